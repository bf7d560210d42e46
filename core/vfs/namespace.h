// Namespace: the tree of directories and files a mount shows, built from an
// ObjectStore's listings, with the stable node numbers the kernel refers to.
//
// Who calls it: the fs/ adapter, one call per FUSE request. Each call returns a
// Status the adapter turns into an errno, or calls `done` with the bytes. Reads
// go through the ReadEngine; when a directory holding safetensors files is
// listed, their headers are prefetched in parallel, since a loader that lists
// a checkpoint opens every shard next.
//
// Views: a directory holding *.safetensors files (a checkpoint directory) also
// shows the view directories selected by ViewOptions (core/views/views.h),
// unless a real object or prefix already has that name. A view directory is
// built when first looked into: the checkpoint's headers are read through the
// engine (its head chunks, usually prefetched by then), the catalog and layer
// grouping give every view file its exact size, and reads of view files go
// through a ViewReader.
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
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/engine/read_engine.h"
#include "core/engine/read_result.h"
#include "core/store/object_store.h"
#include "core/util/status.h"
#include "core/util/thread_annotations.h"
#include "core/views/view_reader.h"
#include "core/views/views.h"

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

struct ViewOptions {
  std::vector<ViewKind> kinds;  // none: no views
  std::shared_ptr<const LayerGrouper> grouper;  // required when `kinds` is not empty
  uint64_t prefetch_window = 256ull << 20;
  uint64_t segment_bytes = 4ull << 20;  // source bytes per computed segment (ViewInput)
};

class Namespace {
 public:
  // `store` and `engine` must outlive the Namespace.
  Namespace(ObjectStore& store, ReadEngine& engine, ViewOptions views = {});

  // Lists the root once, so a source that cannot be listed fails at mount time
  // rather than on the first `ls`.
  Status CheckReachable() EXCLUDES(mu_);

  StatusOr<NodeAttr> Lookup(NodeId parent, std::string_view name) EXCLUDES(mu_);
  StatusOr<NodeAttr> GetAttr(NodeId node) EXCLUDES(mu_);
  // Entries in name order, without "." and "..".
  StatusOr<std::vector<DirEntry>> ReadDir(NodeId dir) EXCLUDES(mu_);
  // Checks that `node` is a file that can be opened for reading, and gives
  // an object's file its readahead (ReadEngine::Opening: the one the
  // process opening it, `reader`'s, gets) before it returns.
  Status Open(NodeId node, ReaderId reader = {}) EXCLUDES(mu_);
  // Reads up to `size` bytes at `offset` (fewer at the end of the file, none past
  // it). `done` is called exactly once, on any thread, maybe before Read returns.
  // `reader` is the open file the read is for (see ReaderId).
  void Read(NodeId node, uint64_t offset, size_t size, ReadDone done, ReaderId reader = {}) EXCLUDES(mu_);
  // The open file `reader` is closed.
  void Release(ReaderId reader);

  struct FsStats {
    uint64_t total_bytes = 0;  // bytes of the files known so far
    uint64_t nodes = 0;
  };
  FsStats Stats() const EXCLUDES(mu_);

 private:
  // What the view directories of one checkpoint directory are built from.
  struct CheckpointDir {
    std::string prefix;
    std::vector<ObjectInfo> objects;  // the directory's listing
    int64_t mtime_ns = 0;             // of its newest object, for the view nodes
    std::shared_ptr<const CheckpointScan> scan;  // once a view directory was entered
    std::optional<std::string> config_json;
  };

  struct Node {
    NodeId id;
    NodeId parent;
    bool is_dir = false;
    std::string prefix;  // directories: object-name prefix ("" or "a/b/")
    ObjectInfo object;   // files
    bool listed = false;
    std::map<std::string, NodeId, std::less<>> children;
    // View directories: the checkpoint and the view; view files: the file and
    // its path (for messages).
    std::shared_ptr<CheckpointDir> checkpoint;
    std::optional<ViewKind> view_kind;
    std::shared_ptr<const ViewFile> view;
    std::string path;
  };

  // Lists `dir` from the store if not done yet.
  Status EnsureListed(NodeId dir) EXCLUDES(mu_);
  // Builds the files of view directory `dir` if not done yet.
  Status EnsureViewBuilt(NodeId dir) EXCLUDES(mu_);
  // Reads the checkpoint's headers, index and config through the engine.
  std::shared_ptr<const CheckpointScan> Scan(CheckpointDir& checkpoint) EXCLUDES(mu_);
  NodeAttr AttrOf(const Node& node) const REQUIRES(mu_);
  StatusOr<const Node*> Find(NodeId id) const REQUIRES(mu_);
  NodeId AddNode(Node node) REQUIRES(mu_);

  ObjectStore& store_;
  ReadEngine& engine_;
  const ViewOptions views_;
  ViewReader view_reader_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Node>> nodes_ GUARDED_BY(mu_);  // index = id - 1
  uint64_t total_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VFS_NAMESPACE_H_
