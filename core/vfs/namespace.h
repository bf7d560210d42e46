// Namespace: the tree of directories and files a mount shows, built from an
// ObjectStore's listings, with the stable node numbers the kernel refers to.
//
// Who calls it: the fs/ adapter, one call per FUSE request. Each call returns a
// Status the adapter turns into an errno, or calls `done` with the bytes. Reads
// go through the ReadEngine; when a directory holding safetensors files is
// listed, their headers are prefetched in parallel, since a loader that lists
// a checkpoint opens every shard next.
//
// Directories are listed once, on first use, and kept for the mount's life:
// objects are immutable per generation, and a mount shows one version of them.
// Nodes are never removed, so node numbers are stable and a kernel FORGET
// needs no action.
//
// Thread-safety: all methods may be called concurrently. mu_ guards the node
// table and is never held across store I/O (see the lock order in
// core/util/thread_annotations.h).
#ifndef TENSORFS_CORE_VFS_NAMESPACE_H_
#define TENSORFS_CORE_VFS_NAMESPACE_H_

#include <sys/statvfs.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/engine/read_engine.h"
#include "core/engine/read_result.h"
#include "core/store/object_store.h"
#include "core/util/status.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

struct NodeId {
  uint64_t value = 0;
  auto operator<=>(const NodeId&) const = default;
};
inline constexpr NodeId kRootNode{1};  // FUSE_ROOT_ID

struct NodeAttr {
  NodeId id;
  bool is_dir = false;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

struct DirEntry {
  std::string name;
  NodeAttr attr;
};

class Namespace {
 public:
  // `store` and `engine` must outlive the Namespace.
  Namespace(ObjectStore& store, ReadEngine& engine);

  // Lists the root once, so a source that cannot be listed fails at mount time
  // rather than on the first `ls`.
  Status CheckReachable() EXCLUDES(mu_);

  StatusOr<NodeAttr> Lookup(NodeId parent, std::string_view name) EXCLUDES(mu_);
  StatusOr<NodeAttr> GetAttr(NodeId node) EXCLUDES(mu_);
  // Entries in name order, without "." and "..".
  StatusOr<std::vector<DirEntry>> ReadDir(NodeId dir) EXCLUDES(mu_);
  // Checks that `node` is a file that can be opened for reading.
  Status Open(NodeId node) EXCLUDES(mu_);
  // Reads up to `size` bytes at `offset` (fewer at the end of the file, none past
  // it). `done` is called exactly once, on any thread, maybe before Read returns.
  void Read(NodeId node, uint64_t offset, size_t size, ReadDone done) EXCLUDES(mu_);

  struct FsStats {
    uint64_t total_bytes = 0;  // bytes of the files known so far
    uint64_t nodes = 0;
  };
  FsStats Stats() const EXCLUDES(mu_);

 private:
  struct Node {
    NodeId id;
    NodeId parent;
    bool is_dir = false;
    std::string prefix;  // directories: object-name prefix ("" or "a/b/")
    ObjectInfo object;   // files
    bool listed = false;
    std::map<std::string, NodeId, std::less<>> children;
  };

  // Lists `dir` from the store if not done yet.
  Status EnsureListed(NodeId dir) EXCLUDES(mu_);
  NodeAttr AttrOf(const Node& node) const REQUIRES(mu_);
  StatusOr<const Node*> Find(NodeId id) const REQUIRES(mu_);
  NodeId AddNode(Node node) REQUIRES(mu_);

  ObjectStore& store_;
  ReadEngine& engine_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Node>> nodes_ GUARDED_BY(mu_);  // index = id - 1
  uint64_t total_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VFS_NAMESPACE_H_
