// Namespace: the tree of directories and files a mount shows, built from an
// ObjectStore's listings, with the node numbers the kernel refers to.
//
// Who calls it: the fs/ adapter, one call per FUSE request. Each call returns a
// Status the adapter turns into an errno, or calls `done` with the bytes. Reads
// go through the ReadEngine; when a directory holding safetensors files is
// listed, the headers of its new shards are prefetched in parallel, since a
// loader that lists a checkpoint opens every shard next.
//
// Freshness (docs/FRESHNESS.md). A directory is listed on first use, and again
// when a lookup in it, a read of it or an open of one of its files finds its
// listing older than Freshness::metadata_ttl: at most one listing per
// directory per TTL, and callers that need the same directory at once share
// the listing in flight. A listing refreshes everything the directory shows:
// new objects and prefixes appear, names gone from it answer kNotFound, and an
// object with another generation or size is a new node. A name looked up and
// not found is looked for again (the directory listed anew) once the listing
// is older than Freshness::negative_ttl. With metadata_ttl kForever each
// directory is listed once and nothing is looked at again.
//
// One node per object version. A replaced object's new version gets a new
// node number, so nothing the kernel caches under the old number (its pages,
// kept across opens) can be served for the new version. The old node goes on
// reading its version (reads are pinned to the generation: from the cache, or
// from the store while it still serves that generation, then kStale, or
// kNotFound if the object was deleted); an open of a node that has left its
// directory's listing fails with kStale, which makes the kernel look the name
// up again. Node numbers are never reused.
//
// Node lifetime. The kernel holds references to nodes: each Lookup and each
// Acquire (an entry of a READDIRPLUS reply) adds one, Forget takes them back.
// A node that has left the listings (deleted, replaced, under a directory that
// went, a view directory of an older listing) is freed once the kernel holds
// none; with it go its children that the kernel does not hold, what the engine
// keeps of its object version (ReadEngine::ForgetObject) and, for a view
// directory, its view files. The table so holds what the current listings
// show plus what the kernel still refers to.
//
// Changes go to a ChangeObserver (the fs/ adapter, which drops what the
// kernel caches of the directory), after the Namespace's lock is released;
// so do the entries the kernel is given of a directory that has left the
// listings (a process still in an old view directory): cached, they would
// keep it and its nodes from ever being forgotten.
//
// Views: a directory holding *.safetensors files (a checkpoint directory) also
// shows the view directories selected by ViewOptions (core/views/views.h),
// unless a real object or prefix already has that name. A view directory is
// built when first looked into: the checkpoint's headers are read through the
// engine (its head chunks, usually prefetched by then), the catalog and layer
// grouping give every view file its exact size, and reads of view files go
// through a ViewReader. @gguf/ is the exception: whether a directory has one
// depends on its headers, config.json and tokenizer files, so when @gguf is
// among the views, listing a checkpoint directory that has a config.json
// reads them (through the engine, before the listing is applied) and
// converts the vocabulary; the directory shows @gguf/ only when its GGUF
// model could be planned (gguf_view.h LoadGgufModel says why not). A checkpoint directory's views are built from one
// listing, pinned to the generations in it; a listing that finds any of the
// directory's objects changed replaces its view directories with new ones
// (new nodes), so no view combines two versions of a shard, or an index with
// the shards of another listing. A view file keeps the versions it was built
// from, as a replaced object's node does.
//
// Thread-safety: all methods may be called concurrently. mu_ guards the node
// table and is never held across store I/O, engine calls or the observer (see
// the lock order in core/util/thread_annotations.h).
#ifndef TENSORFS_CORE_VFS_NAMESPACE_H_
#define TENSORFS_CORE_VFS_NAMESPACE_H_

#include <sys/statvfs.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/engine/read_engine.h"
#include "core/engine/read_result.h"
#include "core/store/object_store.h"
#include "core/util/clock.h"
#include "core/util/log_limiter.h"
#include "core/util/status.h"
#include "core/util/thread_annotations.h"
#include "core/views/gguf_model.h"
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
  // Segments of a GGUF file computed ahead of its reader (view_reader.h);
  // 0: two per core of the machine.
  uint64_t compute_ahead = 0;
  // The NAME of the @gguf/ files of a checkpoint at the root of the mount
  // (elsewhere: its directory's name); "" for "model".
  std::string root_name;
};

// How long what the Namespace knows of the source is trusted.
struct Freshness {
  static constexpr std::chrono::nanoseconds kForever = std::chrono::nanoseconds::max();
  // A directory's listing is taken again once it is older than this, when a
  // lookup, a directory read or an open needs it. 0: every time. kForever:
  // each directory is listed once, and nothing is looked at again.
  std::chrono::nanoseconds metadata_ttl = kForever;
  // A name looked up and not found is looked for again once the directory's
  // listing is older than this (and than metadata_ttl, whichever is less).
  // Unused when metadata_ttl is kForever.
  std::chrono::nanoseconds negative_ttl = kForever;
  // What "older" is measured with; must outlive the Namespace.
  Clock* clock = &SystemClock();
};

// Where a Namespace reports what changed in the tree it shows, for the caches
// above it (the kernel's dentries and directory pages).
//
// Called on the thread of the request that took the listing (a FUSE request
// handler, for a lookup or open in `dir` itself), with no Namespace lock
// held. An implementation must neither block on that request nor call back
// into the Namespace: the kernel holds `dir` locked until the request is
// answered, so it queues the change and tells the kernel from another thread.
class ChangeObserver {
 public:
  virtual ~ChangeObserver() = default;
  // The entries `names` of directory `dir` were added, removed, or now name
  // another node (a new version, a file that became a directory); or `dir`
  // has left the listings and the kernel should not keep them.
  virtual void EntriesChanged(NodeId dir, std::vector<std::string> names) = 0;
};

class Namespace {
 public:
  // `store` and `engine` (and freshness.clock) must outlive the Namespace.
  Namespace(ObjectStore& store, ReadEngine& engine, ViewOptions views = {}, Freshness freshness = {});

  // Lists the root, so a source that cannot be listed fails at mount time
  // rather than on the first `ls`.
  Status CheckReachable() EXCLUDES(mu_);

  // The entry `name` of directory `parent`, as the source is now (within the
  // metadata TTL). A node found counts one kernel reference (see Forget).
  StatusOr<NodeAttr> Lookup(NodeId parent, std::string_view name) EXCLUDES(mu_);
  // The attributes of `node`, fixed for its life (a file's are its version's).
  StatusOr<NodeAttr> GetAttr(NodeId node) EXCLUDES(mu_);

  struct Directory {
    std::vector<DirEntry> entries;  // in name order, without "." and ".."
    // The entries differ from those the previous ReadDir of this directory
    // gave (or this is the first): what a cache kept of them is out of date.
    bool changed = false;
  };
  // The entries of directory `dir`, as the source is now (within the metadata
  // TTL). They count no kernel reference (see Acquire).
  StatusOr<Directory> ReadDir(NodeId dir) EXCLUDES(mu_);
  // One more kernel reference to `node`, handed out in a READDIRPLUS reply,
  // and its attributes; kNotFound if it has been freed since its directory
  // was read (the entry is then left out).
  StatusOr<NodeAttr> Acquire(NodeId node) EXCLUDES(mu_);
  // The kernel dropped `count` references to `node` (FORGET). Unknown nodes
  // are ignored.
  struct Forgotten {
    NodeId node;
    uint64_t count = 0;
  };
  void Forget(std::span<const Forgotten> forgotten) EXCLUDES(mu_);

  // Checks that `node` is a file that can be opened for reading and still
  // shows the source as it is (within the metadata TTL): kStale when it has
  // left its directory's listing. Gives an object's file its readahead
  // (ReadEngine::Opening: the one the process opening it, `reader`'s, gets)
  // before it returns.
  Status Open(NodeId node, ReaderId reader = {}) EXCLUDES(mu_);
  // Reads up to `size` bytes at `offset` (fewer at the end of the file, none past
  // it). `done` is called exactly once, on any thread, maybe before Read returns.
  // `reader` is the open file the read is for (see ReaderId). The version the
  // node stands for: kStale once the store no longer has it, kNotFound once
  // the object was deleted.
  void Read(NodeId node, uint64_t offset, size_t size, ReadDone done, ReaderId reader = {}) EXCLUDES(mu_);
  // The open file `reader` is closed.
  void Release(ReaderId reader);

  // Where changes are reported (null: nowhere). Set before serving.
  void SetChangeObserver(ChangeObserver* observer) { observer_.store(observer, std::memory_order_release); }

  struct FsStats {
    uint64_t total_bytes = 0;  // bytes of the object files the table holds
    uint64_t nodes = 0;
  };
  FsStats Stats() const EXCLUDES(mu_);

 private:
  using TimePoint = Clock::TimePoint;

  // What the view directories of one checkpoint directory are built from:
  // one listing of it.
  struct CheckpointDir {
    std::string prefix;
    std::vector<ObjectInfo> objects;  // the directory's listing
    int64_t mtime_ns = 0;             // of its newest object, for the view nodes
    std::shared_ptr<const CheckpointScan> scan;  // once a view directory was entered
    std::optional<std::string> config_json;
    // @gguf's model, or why there is none; null when not looked at (no
    // @gguf view, or no config.json). Refers into `scan`.
    std::shared_ptr<const StatusOr<GgufModel>> gguf;
  };

  // A listing being taken; the callers that need it wait for `done`.
  struct ListingInFlight {
    bool done = false;
    Status status;
  };

  struct Node {
    NodeId id;
    NodeId parent;
    std::string name;      // in `parent` ("" for the root)
    bool is_dir = false;
    bool attached = true;  // one of its parent's children (the root: always)
    uint64_t kernel_refs = 0;  // references the kernel holds (Lookup, Acquire, less Forget)
    std::string prefix;    // directories: object-name prefix ("" or "a/b/")
    ObjectInfo object;     // files
    // Directories: the children of their last listing (view directories:
    // built once), when it was asked for, one in flight.
    bool listed = false;
    std::map<std::string, NodeId, std::less<>> children;
    TimePoint listed_at{};
    std::shared_ptr<ListingInFlight> in_flight;
    uint64_t version = 0;       // changes to `children` so far
    uint64_t version_read = 0;  // `version` when ReadDir last gave them
    // A checkpoint directory: the checkpoint its view directories show. A
    // view directory: the checkpoint it shows, and the view.
    std::shared_ptr<CheckpointDir> checkpoint;
    std::optional<ViewKind> view_kind;
    // View files: the file (which keeps its directory's files alive: they
    // link to each other) and its path (for messages).
    std::shared_ptr<const ViewFile> view;
    std::string path;
  };

  // What a listing changed, for the calls made once mu_ is released.
  struct Changes {
    std::vector<std::string> names;      // for the observer
    std::vector<ObjectInfo> new_shards;  // their heads are prefetched
    std::optional<std::vector<ObjectInfo>> read_order;  // the shards, when they changed
    std::vector<ObjectId> freed;         // object versions no node shows any more
    // Entries the kernel holds of directories that left the listings.
    std::vector<std::pair<NodeId, std::vector<std::string>>> unlisted;
  };

  // Lists `dir` from the store unless its listing is younger than `max_age`
  // (a view directory: builds it once).
  Status EnsureFresh(NodeId dir, std::chrono::nanoseconds max_age) EXCLUDES(mu_);
  // Makes `dir`'s children those of `listing`, asked for at `asked_at`;
  // `prepared`, when not null, is the checkpoint PrepareCheckpoint made of it.
  void ApplyListing(Node& dir, Listing listing, TimePoint asked_at, std::shared_ptr<CheckpointDir> prepared,
                    Changes& changes) REQUIRES(mu_);
  // For a checkpoint directory whose listing will show @gguf/ only if its
  // GGUF model can be planned: the checkpoint of `listing`, scanned, with its
  // model planned (or the current one, when the listing shows the same
  // objects). Null when @gguf is not among the views or `listing` is no
  // checkpoint directory with a config.json.
  std::shared_ptr<CheckpointDir> PrepareCheckpoint(NodeId dir, const std::string& prefix, const Listing& listing)
      EXCLUDES(mu_);
  // The NAME of the @gguf/ files of the checkpoint directory `prefix`.
  std::string CheckpointName(const std::string& prefix) const;
  // Builds the files of view directory `dir` if not done yet.
  Status EnsureViewBuilt(NodeId dir) EXCLUDES(mu_);
  // Reads the checkpoint's headers, index and config through the engine.
  std::shared_ptr<const CheckpointScan> Scan(CheckpointDir& checkpoint) EXCLUDES(mu_);
  // What follows a change, without mu_: engine calls and the observer.
  void Publish(NodeId dir, Changes changes) EXCLUDES(mu_);
  // Tells the observer, if any, that the kernel should drop `names` of `dir`.
  void Notify(NodeId dir, std::vector<std::string> names) EXCLUDES(mu_);

  NodeAttr AttrOf(const Node& node) const REQUIRES(mu_);
  Node* Find(NodeId id) const REQUIRES(mu_);
  StatusOr<Node*> FindOrError(NodeId id) const REQUIRES(mu_);
  // Adds a child `name` of `dir`, made from `node`.
  Node& AddChild(Node& dir, std::string name, Node node) REQUIRES(mu_);
  // Takes `child` out of its parent's listing (the caller erases it from the
  // children); frees it if the kernel holds no reference, else has the
  // kernel drop the entries it holds of it.
  void Detach(Node& child, Changes& changes) REQUIRES(mu_);
  // Frees `node` and its children that the kernel does not hold.
  void Free(Node& node, Changes& changes) REQUIRES(mu_);
  // Whether `node` and every directory above it are in their parents' listings.
  bool IsCurrent(const Node& node) const REQUIRES(mu_);
  bool Fresh(const Node& dir, std::chrono::nanoseconds max_age) const REQUIRES(mu_);
  std::string Describe(const Node& node) const REQUIRES(mu_);

  ObjectStore& store_;
  ReadEngine& engine_;
  Metrics& metrics_;
  const ViewOptions views_;
  const Freshness freshness_;
  ViewReader view_reader_;
  std::atomic<ChangeObserver*> observer_{nullptr};
  LogRateLimiter refresh_log_{std::chrono::seconds(10), "failed listings"};
  mutable Mutex mu_;
  CondVar listed_cv_;  // a listing in flight finished (ListingInFlight::done)
  std::unordered_map<uint64_t, std::unique_ptr<Node>> nodes_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = kRootNode.value;
  uint64_t total_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VFS_NAMESPACE_H_
