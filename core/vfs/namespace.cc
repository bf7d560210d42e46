#include "core/vfs/namespace.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <future>
#include <utility>

#include "core/safetensors/checkpoint.h"

namespace tensorfs {
namespace {

// An ObjectStore over the objects of one listing whose reads go through the
// engine (and so its cache), for the catalog's header reads: the view
// directories then cost no fetches beyond the head chunks.
class EngineReader final : public ObjectStore {
 public:
  EngineReader(ObjectStore& store, ReadEngine& engine, const std::vector<ObjectInfo>& objects)
      : store_(store), engine_(engine) {
    for (const ObjectInfo& o : objects) objects_.emplace(o.name, o);
  }
  StatusOr<ObjectInfo> Stat(std::string_view name) override { return store_.Stat(name); }
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override {
    return store_.List(prefix, delimiter);
  }
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override {
    auto it = objects_.find(object.name);
    if (it == objects_.end() || it->second.generation != object.generation) return store_.Read(object, offset, out);
    std::promise<Status> result;
    engine_.Read(it->second, offset, out.size(), [&](StatusOr<ReadResult> read) {
      if (!read.ok()) return result.set_value(read.status());
      if (read->size() != out.size()) return result.set_value(InternalError("short read of " + object.name));
      size_t at = 0;
      for (const auto& piece : read->pieces) {
        std::memcpy(out.data() + at, piece.data(), piece.size());
        at += piece.size();
      }
      result.set_value(OkStatus());
    }, ReadHints{.prefetch = false, .delivered = false});
    return result.get_future().get();
  }
  std::string Describe() const override { return store_.Describe(); }

 private:
  ObjectStore& store_;
  ReadEngine& engine_;
  std::map<std::string, ObjectInfo, std::less<>> objects_;
};

constexpr uint64_t kMaxConfigBytes = 16ull << 20;

}  // namespace

Namespace::Namespace(ObjectStore& store, ReadEngine& engine, ViewOptions views)
    : store_(store), engine_(engine), views_(std::move(views)), view_reader_(engine, views_.prefetch_window) {
  MutexLock lock(mu_);
  Node root;
  root.is_dir = true;
  root.parent = kRootNode;
  AddNode(std::move(root));
}

NodeId Namespace::AddNode(Node node) {
  node.id = NodeId{nodes_.size() + 1};
  nodes_.push_back(std::make_unique<Node>(std::move(node)));
  return nodes_.back()->id;
}

StatusOr<const Namespace::Node*> Namespace::Find(NodeId id) const {
  if (id.value == 0 || id.value > nodes_.size()) {
    return NotFoundError("no node " + std::to_string(id.value));
  }
  return nodes_[id.value - 1].get();
}

NodeAttr Namespace::AttrOf(const Node& node) const {
  return NodeAttr{.id = node.id, .is_dir = node.is_dir, .size = node.object.size,
                  .mtime_ns = node.object.mtime_ns};
}

Status Namespace::CheckReachable() { return EnsureListed(kRootNode); }

Status Namespace::EnsureListed(NodeId dir) {
  std::string prefix;
  bool view = false;
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(const Node* node, Find(dir));
    if (!node->is_dir) return InvalidArgumentError("not a directory");
    if (node->listed) return OkStatus();
    view = node->view_kind.has_value();
    prefix = node->prefix;
  }
  if (view) return EnsureViewBuilt(dir);
  // Listed without the lock: concurrent first listings of one directory may
  // both ask the store; the first to finish publishes its result.
  engine_.metrics().metadata_requests.fetch_add(1, std::memory_order_relaxed);
  StatusOr<Listing> listing = store_.List(prefix, "/");
  if (!listing.ok()) {
    return listing.status().WithContext("cannot list " + store_.Describe() + "/" + prefix);
  }
  std::vector<ObjectInfo> shards;
  for (const ObjectInfo& object : listing->objects) {
    if (object.name.ends_with(".safetensors")) shards.push_back(object);
  }
  for (const ObjectInfo& shard : shards) engine_.PrefetchHead(shard);
  engine_.SetReadOrder(shards);
  std::vector<ObjectInfo> checkpoint_objects;
  if (!shards.empty() && !views_.kinds.empty()) checkpoint_objects = listing->objects;
  MutexLock lock(mu_);
  Node& node = *nodes_[dir.value - 1];
  if (node.listed) return OkStatus();
  for (std::string& sub : listing->prefixes) {
    std::string name = sub.substr(prefix.size(), sub.size() - prefix.size() - 1);
    if (name.empty() || name == "." || name == "..") continue;  // not representable as a path
    Node child{.parent = dir, .is_dir = true, .prefix = std::move(sub)};
    NodeId id = AddNode(std::move(child));
    nodes_[dir.value - 1]->children.emplace(std::move(name), id);
  }
  for (ObjectInfo& object : listing->objects) {
    std::string name = object.name.substr(prefix.size());
    if (name.empty() || name == "." || name == ".." || nodes_[dir.value - 1]->children.contains(name)) {
      continue;  // "dir/" placeholder objects, or a name taken by a directory
    }
    total_bytes_ += object.size;
    Node child{.parent = dir, .object = std::move(object)};
    NodeId id = AddNode(std::move(child));
    nodes_[dir.value - 1]->children.emplace(std::move(name), id);
  }
  if (!shards.empty() && !views_.kinds.empty()) {
    auto checkpoint = std::make_shared<CheckpointDir>();
    checkpoint->prefix = prefix;
    checkpoint->objects = std::move(checkpoint_objects);
    for (const ObjectInfo& o : checkpoint->objects) checkpoint->mtime_ns = std::max(checkpoint->mtime_ns, o.mtime_ns);
    for (ViewKind kind : views_.kinds) {
      std::string name(ViewDirName(kind));
      if (nodes_[dir.value - 1]->children.contains(name)) continue;  // a real object wins
      Node child{.parent = dir, .is_dir = true, .prefix = prefix + name + "/", .checkpoint = checkpoint,
                 .view_kind = kind};
      child.object.mtime_ns = checkpoint->mtime_ns;
      NodeId id = AddNode(std::move(child));
      nodes_[dir.value - 1]->children.emplace(std::move(name), id);
    }
  }
  nodes_[dir.value - 1]->listed = true;
  return OkStatus();
}

std::shared_ptr<const CheckpointScan> Namespace::Scan(CheckpointDir& checkpoint) {
  {
    MutexLock lock(mu_);
    if (checkpoint.scan != nullptr) return checkpoint.scan;
  }
  // Scanned without the lock; concurrent first scans publish the first result.
  EngineReader reader(store_, engine_, checkpoint.objects);
  auto scan = std::make_shared<CheckpointScan>(ScanListing(reader, checkpoint.prefix, Listing{checkpoint.objects, {}}));
  std::optional<std::string> config;
  for (const ObjectInfo& o : checkpoint.objects) {
    if (o.name != checkpoint.prefix + "config.json" || o.size > kMaxConfigBytes) continue;
    std::string text(o.size, '\0');
    Status read = reader.Read(o.id(), 0, std::as_writable_bytes(std::span<char>(text)));
    if (read.ok()) {
      config = std::move(text);
    } else {
      spdlog::warn("{}: {}; the views show config.json unchanged", o.name, read.message());
    }
  }
  for (const FileScan& f : scan->files) {
    if (!f.header.ok()) spdlog::warn("{}: the views that need it cannot be read: {}", f.object.name, f.header.status().message());
  }
  MutexLock lock(mu_);
  if (checkpoint.scan == nullptr) {
    checkpoint.scan = std::move(scan);
    checkpoint.config_json = std::move(config);
  }
  return checkpoint.scan;
}

Status Namespace::EnsureViewBuilt(NodeId dir) {
  std::shared_ptr<CheckpointDir> checkpoint;
  ViewKind kind;
  std::string path;
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(const Node* node, Find(dir));
    if (node->listed) return OkStatus();
    checkpoint = node->checkpoint;
    kind = *node->view_kind;
    path = node->prefix;
  }
  std::shared_ptr<const CheckpointScan> scan = Scan(*checkpoint);
  ViewInput input{.scan = scan.get(), .grouper = views_.grouper.get(), .segment_bytes = views_.segment_bytes};
  std::optional<std::string> config;
  {
    MutexLock lock(mu_);
    config = checkpoint->config_json;
  }
  input.config_json = std::move(config);
  for (const ObjectInfo& o : checkpoint->objects) {
    if (!IsSafetensorsFileName(o.name)) input.others.push_back(o);
  }
  std::vector<ViewEntry> entries = BuildView(kind, input);
  spdlog::debug("{}: {} files from {} shards ({} tensors)", path, entries.size(), scan->files.size(),
                scan->checkpoint.tensors().size());

  MutexLock lock(mu_);
  if (nodes_[dir.value - 1]->listed) return OkStatus();
  for (ViewEntry& entry : entries) {
    if (nodes_[dir.value - 1]->children.contains(entry.name)) continue;
    Node child{.parent = dir, .path = path + entry.name};
    child.object.size = entry.file->size();
    child.object.mtime_ns = checkpoint->mtime_ns;
    child.view = std::move(entry.file);
    NodeId id = AddNode(std::move(child));
    nodes_[dir.value - 1]->children.emplace(std::move(entry.name), id);
  }
  nodes_[dir.value - 1]->listed = true;
  return OkStatus();
}

StatusOr<NodeAttr> Namespace::Lookup(NodeId parent, std::string_view name) {
  RETURN_IF_ERROR(EnsureListed(parent));
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(const Node* dir, Find(parent));
  auto it = dir->children.find(name);
  if (it == dir->children.end()) return NotFoundError("no entry " + std::string(name));
  return AttrOf(*nodes_[it->second.value - 1]);
}

StatusOr<NodeAttr> Namespace::GetAttr(NodeId id) {
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(const Node* node, Find(id));
  return AttrOf(*node);
}

StatusOr<std::vector<DirEntry>> Namespace::ReadDir(NodeId id) {
  RETURN_IF_ERROR(EnsureListed(id));
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(const Node* dir, Find(id));
  std::vector<DirEntry> entries;
  entries.reserve(dir->children.size());
  for (const auto& [name, child] : dir->children) {
    entries.push_back(DirEntry{name, AttrOf(*nodes_[child.value - 1])});
  }
  return entries;
}

Status Namespace::Open(NodeId id, ReaderId reader) {
  std::string object;
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(const Node* node, Find(id));
    if (node->is_dir) return InvalidArgumentError("is a directory");
    if (node->view != nullptr && !node->view->error().ok()) {
      spdlog::warn("{}: {}", node->path, node->view->error().message());
      return node->view->error().WithContext(node->path);
    }
    if (node->view == nullptr) object = node->object.name;
  }
  // Before the open is answered: the kernel sets the file's readahead then.
  if (!object.empty()) engine_.Opening(object, reader);
  return OkStatus();
}

void Namespace::Release(ReaderId reader) { engine_.ReleaseReader(reader); }

void Namespace::Read(NodeId id, uint64_t offset, size_t size, ReadDone done, ReaderId reader) {
  ObjectInfo object;
  std::shared_ptr<const ViewFile> view;
  {
    MutexLock lock(mu_);
    StatusOr<const Node*> node = Find(id);
    if (!node.ok()) return done(node.status());
    if ((*node)->is_dir) return done(InvalidArgumentError("is a directory"));
    object = (*node)->object;
    view = (*node)->view;
  }
  if (view != nullptr) {
    return view_reader_.Read(std::move(view), offset, size, [this, done = std::move(done)](StatusOr<ReadResult> r) {
      if (r.ok()) {
        engine_.metrics().read_requests.fetch_add(1, std::memory_order_relaxed);
        engine_.metrics().bytes_served.fetch_add(r->size(), std::memory_order_relaxed);
      }
      done(std::move(r));
    });
  }
  engine_.Read(object, offset, size, std::move(done), ReadHints{.reader = reader});
}

Namespace::FsStats Namespace::Stats() const {
  MutexLock lock(mu_);
  return FsStats{.total_bytes = total_bytes_, .nodes = nodes_.size()};
}

}  // namespace tensorfs
