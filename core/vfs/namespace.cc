#include "core/vfs/namespace.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <thread>
#include <utility>

#include "core/safetensors/checkpoint.h"
#include "core/views/gguf_view.h"

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

// The same object version: a node that shows `a` shows `b` as well.
bool SameVersion(const ObjectInfo& a, const ObjectInfo& b) {
  return a.name == b.name && a.generation == b.generation && a.size == b.size;
}

bool SameObjects(const std::vector<ObjectInfo>& a, const std::vector<ObjectInfo>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), SameVersion);
}

}  // namespace

Namespace::Namespace(ObjectStore& store, ReadEngine& engine, ViewOptions views, Freshness freshness)
    : store_(store),
      engine_(engine),
      metrics_(engine.metrics()),
      views_(std::move(views)),
      freshness_(freshness),
      view_reader_(engine, views_.prefetch_window,
                   views_.compute_ahead != 0 ? views_.compute_ahead
                                             : 2 * std::max<uint64_t>(1, std::thread::hardware_concurrency())) {
  MutexLock lock(mu_);
  auto root = std::make_unique<Node>();
  root->id = kRootNode;
  root->parent = kRootNode;
  root->is_dir = true;
  nodes_.emplace(kRootNode.value, std::move(root));
  next_id_ = kRootNode.value + 1;
  metrics_.nodes.store(nodes_.size(), std::memory_order_relaxed);
}

Namespace::Node* Namespace::Find(NodeId id) const {
  auto it = nodes_.find(id.value);
  return it == nodes_.end() ? nullptr : it->second.get();
}

StatusOr<Namespace::Node*> Namespace::FindOrError(NodeId id) const {
  Node* node = Find(id);
  if (node == nullptr) return NotFoundError("no node " + std::to_string(id.value));
  return node;
}

NodeAttr Namespace::AttrOf(const Node& node) const {
  return NodeAttr{.id = node.id, .is_dir = node.is_dir, .size = node.object.size,
                  .mtime_ns = node.object.mtime_ns};
}

std::string Namespace::Describe(const Node& node) const {
  if (!node.path.empty()) return node.path;
  if (node.is_dir) return node.prefix.empty() ? "/" : node.prefix;
  return node.object.name;
}

Namespace::Node& Namespace::AddChild(Node& dir, std::string name, Node node) {
  node.id = NodeId{next_id_++};
  node.parent = dir.id;
  node.name = name;
  if (!node.is_dir && node.view == nullptr) total_bytes_ += node.object.size;
  auto owned = std::make_unique<Node>(std::move(node));
  Node& added = *owned;
  nodes_.emplace(added.id.value, std::move(owned));
  dir.children.emplace(std::move(name), added.id);
  metrics_.nodes.store(nodes_.size(), std::memory_order_relaxed);
  return added;
}

void Namespace::Detach(Node& child, Changes& changes) {
  child.attached = false;
  if (child.kernel_refs == 0) return Free(child, changes);
  // The kernel still holds the directory (a process in it, a file open in
  // it): the entries it holds of it would keep it, and it them, cached past
  // their use; they are dropped from its caches.
  std::vector<std::string> held;
  for (const auto& [name, id] : child.children) {
    const Node* c = Find(id);
    if (c != nullptr && c->kernel_refs > 0) held.push_back(name);
  }
  if (!held.empty()) changes.unlisted.emplace_back(child.id, std::move(held));
}

void Namespace::Free(Node& node, Changes& changes) {
  if (node.id == kRootNode) return;
  if (!node.is_dir && node.view == nullptr) {
    total_bytes_ -= std::min(total_bytes_, node.object.size);
    changes.freed.push_back(node.object.id());
  }
  for (const auto& [name, id] : node.children) {
    Node* child = Find(id);
    if (child == nullptr) continue;
    child->attached = false;
    // A child the kernel still holds would hold this directory too; should
    // the counts say otherwise, it stays, to be freed at its own Forget.
    if (child->kernel_refs == 0) Free(*child, changes);
  }
  nodes_.erase(node.id.value);  // `node` is gone from here on
  metrics_.nodes.store(nodes_.size(), std::memory_order_relaxed);
}

bool Namespace::IsCurrent(const Node& node) const {
  const Node* n = &node;
  while (n->id != kRootNode) {
    if (!n->attached) return false;
    n = Find(n->parent);
    if (n == nullptr) return false;
  }
  return true;
}

bool Namespace::Fresh(const Node& dir, std::chrono::nanoseconds max_age) const {
  if (!dir.listed) return false;
  if (max_age == Freshness::kForever) return true;
  return freshness_.clock->Now() - dir.listed_at < max_age;
}

Status Namespace::CheckReachable() { return EnsureFresh(kRootNode, freshness_.metadata_ttl); }

Status Namespace::EnsureFresh(NodeId dir, std::chrono::nanoseconds max_age) {
  std::string prefix;
  std::shared_ptr<ListingInFlight> flight;
  TimePoint asked_at;
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(Node * node, FindOrError(dir));
    if (!node->is_dir) return InvalidArgumentError("not a directory");
    if (node->view_kind.has_value()) {
      if (node->listed) return OkStatus();
    } else {
      if (Fresh(*node, max_age)) return OkStatus();
      if (node->in_flight != nullptr) {  // another caller is listing it: share that listing
        std::shared_ptr<ListingInFlight> shared = node->in_flight;
        listed_cv_.Wait(mu_, [&] { return shared->done; });
        return shared->status;
      }
      flight = std::make_shared<ListingInFlight>();
      node->in_flight = flight;
      prefix = node->prefix;
      asked_at = freshness_.clock->Now();
    }
  }
  if (flight == nullptr) return EnsureViewBuilt(dir);

  metrics_.metadata_requests.fetch_add(1, std::memory_order_relaxed);
  metrics_.listings.fetch_add(1, std::memory_order_relaxed);
  StatusOr<Listing> listing = store_.List(prefix, "/");
  std::shared_ptr<CheckpointDir> prepared = listing.ok() ? PrepareCheckpoint(dir, prefix, *listing) : nullptr;
  Changes changes;
  {
    MutexLock lock(mu_);
    Node* node = Find(dir);
    if (node == nullptr) {
      flight->status = NotFoundError("the directory " + prefix + " is gone");
    } else if (listing.ok()) {
      ApplyListing(*node, std::move(*listing), asked_at, std::move(prepared), changes);
    } else if (node->listed) {
      // What was listed before goes on being shown, for another TTL: a
      // source that does not answer does not take the mount's files away.
      node->listed_at = asked_at;
      if (std::optional<uint64_t> suppressed = refresh_log_.Allow()) {
        spdlog::warn("cannot list {}/{} again ({}); showing it as listed before{}", store_.Describe(), prefix,
                     listing.status().message(), SuppressedSuffix(*suppressed));
      }
    } else {
      flight->status = listing.status().WithContext("cannot list " + store_.Describe() + "/" + prefix);
    }
    if (node != nullptr) node->in_flight = nullptr;
    flight->done = true;
  }
  listed_cv_.NotifyAll();
  Publish(dir, std::move(changes));
  return flight->status;
}

std::string Namespace::CheckpointName(const std::string& prefix) const {
  if (prefix.empty()) return views_.root_name.empty() ? "model" : views_.root_name;
  const std::string_view dir(prefix.data(), prefix.size() - 1);  // without the trailing '/'
  return std::string(dir.substr(dir.rfind('/') + 1));
}

std::shared_ptr<Namespace::CheckpointDir> Namespace::PrepareCheckpoint(NodeId dir, const std::string& prefix,
                                                                       const Listing& listing) {
  if (std::find(views_.kinds.begin(), views_.kinds.end(), ViewKind::kGguf) == views_.kinds.end()) return nullptr;
  std::vector<ObjectInfo> others;
  bool shards = false;
  bool config = false;
  for (const ObjectInfo& o : listing.objects) {
    if (IsSafetensorsFileName(o.name)) {
      shards = true;
    } else {
      config = config || o.name == prefix + "config.json";
      others.push_back(o);
    }
  }
  if (!shards || !config) return nullptr;
  {
    MutexLock lock(mu_);
    const Node* node = Find(dir);
    if (node != nullptr && node->checkpoint != nullptr && node->checkpoint->gguf != nullptr &&
        SameObjects(node->checkpoint->objects, listing.objects)) {
      return node->checkpoint;
    }
  }
  auto checkpoint = std::make_shared<CheckpointDir>();
  checkpoint->prefix = prefix;
  checkpoint->objects = listing.objects;
  for (const ObjectInfo& o : checkpoint->objects) {
    checkpoint->mtime_ns = std::max(checkpoint->mtime_ns, o.mtime_ns);
    if (IsSafetensorsFileName(o.name)) engine_.PrefetchHead(o);  // the scan reads them all
  }
  std::shared_ptr<const CheckpointScan> scan = Scan(*checkpoint);
  EngineReader reader(store_, engine_, checkpoint->objects);
  auto gguf = std::make_shared<const StatusOr<GgufModel>>(LoadGgufModel(reader, *scan, others, CheckpointName(prefix)));
  if (!gguf->ok()) spdlog::info("{}/{}: no @gguf/: {}", store_.Describe(), prefix, gguf->status().message());
  MutexLock lock(mu_);
  checkpoint->gguf = std::move(gguf);
  return checkpoint;
}

void Namespace::ApplyListing(Node& dir, Listing listing, TimePoint asked_at, std::shared_ptr<CheckpointDir> prepared,
                             Changes& changes) {
  const bool first = !dir.listed;
  // What the directory shows now, by name: prefixes, then objects whose name
  // no prefix takes, then the view directories no real name takes.
  std::map<std::string, Node, std::less<>> wanted;
  const std::string& prefix = dir.prefix;
  for (std::string& sub : listing.prefixes) {
    std::string name = sub.substr(prefix.size(), sub.size() - prefix.size() - 1);
    if (name.empty() || name == "." || name == "..") continue;  // not representable as a path
    wanted.emplace(std::move(name), Node{.is_dir = true, .prefix = std::move(sub)});
  }
  std::vector<ObjectInfo> shards;
  for (const ObjectInfo& object : listing.objects) {
    std::string name = object.name.substr(prefix.size());
    if (name.empty() || name == "." || name == ".." || wanted.contains(name)) {
      continue;  // "dir/" placeholder objects, or a name taken by a directory
    }
    if (object.name.ends_with(".safetensors")) shards.push_back(object);
    wanted.emplace(std::move(name), Node{.object = object});
  }
  std::shared_ptr<CheckpointDir> checkpoint;
  if (!shards.empty() && !views_.kinds.empty()) {
    if (dir.checkpoint != nullptr && SameObjects(dir.checkpoint->objects, listing.objects)) {
      checkpoint = dir.checkpoint;
    } else if (prepared != nullptr && SameObjects(prepared->objects, listing.objects)) {
      checkpoint = std::move(prepared);
    } else {
      checkpoint = std::make_shared<CheckpointDir>();
      checkpoint->prefix = prefix;
      checkpoint->objects = listing.objects;
      for (const ObjectInfo& o : checkpoint->objects) checkpoint->mtime_ns = std::max(checkpoint->mtime_ns, o.mtime_ns);
    }
    for (ViewKind kind : views_.kinds) {
      std::string name(ViewDirName(kind));
      if (wanted.contains(name)) continue;  // a real object wins
      if (kind == ViewKind::kGguf && (checkpoint->gguf == nullptr || !checkpoint->gguf->ok())) continue;
      Node view{.is_dir = true, .prefix = prefix + name + "/", .checkpoint = checkpoint, .view_kind = kind};
      view.object.mtime_ns = checkpoint->mtime_ns;
      wanted.emplace(std::move(name), std::move(view));
    }
  }
  dir.checkpoint = std::move(checkpoint);

  // Children that stay are those that show the same thing; the others go,
  // and what replaces them is a new node.
  size_t removed = 0;
  size_t replaced = 0;
  for (auto it = dir.children.begin(); it != dir.children.end();) {
    Node* child = Find(it->second);
    auto want = wanted.find(it->first);
    bool same = false;
    if (child != nullptr && want != wanted.end()) {
      const Node& w = want->second;
      if (w.view_kind.has_value()) {
        same = child->view_kind == w.view_kind && child->checkpoint == w.checkpoint;
      } else if (w.is_dir) {
        same = child->is_dir && !child->view_kind.has_value();
      } else {
        same = !child->is_dir && SameVersion(child->object, w.object);
      }
    }
    if (same) {
      wanted.erase(want);
      ++it;
      continue;
    }
    if (want == wanted.end()) {
      ++removed;
    } else if (child != nullptr && !child->is_dir && !want->second.is_dir) {
      ++replaced;
    }
    changes.names.push_back(it->first);
    if (child != nullptr) Detach(*child, changes);
    it = dir.children.erase(it);
  }
  for (auto& [name, node] : wanted) {
    if (!first) changes.names.push_back(name);
    // The heads of shards new to the directory (or new versions of them).
    if (!node.is_dir && node.object.name.ends_with(".safetensors")) changes.new_shards.push_back(node.object);
    AddChild(dir, name, std::move(node));
  }
  if (first || !changes.names.empty()) changes.read_order = std::move(shards);
  // A replaced entry went and came back: named once.
  std::sort(changes.names.begin(), changes.names.end());
  changes.names.erase(std::unique(changes.names.begin(), changes.names.end()), changes.names.end());

  dir.listed = true;
  dir.listed_at = asked_at;
  if (first || !changes.names.empty()) ++dir.version;
  if (!first && !changes.names.empty()) {
    metrics_.listings_changed.fetch_add(1, std::memory_order_relaxed);
    metrics_.versions_replaced.fetch_add(replaced, std::memory_order_relaxed);
    metrics_.entries_removed.fetch_add(removed, std::memory_order_relaxed);
    spdlog::debug("{}/{}: {} entries changed ({} objects replaced, {} entries gone)", store_.Describe(), prefix,
                  changes.names.size(), replaced, removed);
  }
}

void Namespace::Publish(NodeId dir, Changes changes) {
  for (const ObjectId& object : changes.freed) engine_.ForgetObject(object);
  for (const ObjectInfo& shard : changes.new_shards) engine_.PrefetchHead(shard);
  if (changes.read_order) engine_.SetReadOrder(*changes.read_order);
  if (!changes.names.empty()) Notify(dir, std::move(changes.names));
  for (auto& [unlisted_dir, names] : changes.unlisted) Notify(unlisted_dir, std::move(names));
}

void Namespace::Notify(NodeId dir, std::vector<std::string> names) {
  if (ChangeObserver* observer = observer_.load(std::memory_order_acquire)) {
    observer->EntriesChanged(dir, std::move(names));
  }
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
    ASSIGN_OR_RETURN(const Node* node, FindOrError(dir));
    if (node->listed) return OkStatus();
    checkpoint = node->checkpoint;
    kind = *node->view_kind;
    path = node->prefix;
  }
  std::shared_ptr<const CheckpointScan> scan = Scan(*checkpoint);
  ViewInput input{.scan = scan.get(), .grouper = views_.grouper.get(), .segment_bytes = views_.segment_bytes};
  std::optional<std::string> config;
  std::shared_ptr<const StatusOr<GgufModel>> gguf;
  {
    MutexLock lock(mu_);
    config = checkpoint->config_json;
    gguf = checkpoint->gguf;
  }
  if (gguf != nullptr && gguf->ok()) input.gguf = &**gguf;
  input.config_json = std::move(config);
  for (const ObjectInfo& o : checkpoint->objects) {
    if (!IsSafetensorsFileName(o.name)) input.others.push_back(o);
  }
  // The files link to each other (ViewFile::previous, next): each node's file
  // keeps them all alive, whichever nodes are freed first.
  auto files = std::make_shared<std::vector<ViewEntry>>(BuildView(kind, input));
  spdlog::debug("{}: {} files from {} shards ({} tensors)", path, files->size(), scan->files.size(),
                scan->checkpoint.tensors().size());

  MutexLock lock(mu_);
  Node* node = Find(dir);
  if (node == nullptr || node->listed) return OkStatus();
  for (ViewEntry& entry : *files) {
    if (node->children.contains(entry.name)) continue;
    Node child{.path = path + entry.name};
    child.object.size = entry.file->size();
    child.object.mtime_ns = checkpoint->mtime_ns;
    child.view = std::shared_ptr<const ViewFile>(files, entry.file.get());
    AddChild(*node, entry.name, std::move(child));
  }
  node->listed = true;
  node->version = 1;
  return OkStatus();
}

StatusOr<NodeAttr> Namespace::Lookup(NodeId parent, std::string_view name) {
  // A name the last listing did not have is looked for again sooner.
  std::chrono::nanoseconds max_age = freshness_.metadata_ttl;
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(const Node* dir, FindOrError(parent));
    if (dir->listed && !dir->children.contains(name) && max_age != Freshness::kForever) {
      max_age = std::min(max_age, freshness_.negative_ttl);
    }
  }
  RETURN_IF_ERROR(EnsureFresh(parent, max_age));
  StatusOr<NodeAttr> found = NotFoundError("no entry " + std::string(name));
  bool unlisted = false;
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(const Node* dir, FindOrError(parent));
    auto it = dir->children.find(name);
    if (Node* child = it == dir->children.end() ? nullptr : Find(it->second)) {
      ++child->kernel_refs;
      found = AttrOf(*child);
    }
    unlisted = !IsCurrent(*dir);
  }
  // In a directory that left the listings (a process still in it), the entry
  // is not kept by the kernel: it would keep the directory cached.
  if (unlisted) Notify(parent, {std::string(name)});
  return found;
}

StatusOr<NodeAttr> Namespace::GetAttr(NodeId id) {
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(const Node* node, FindOrError(id));
  return AttrOf(*node);
}

StatusOr<Namespace::Directory> Namespace::ReadDir(NodeId id) {
  RETURN_IF_ERROR(EnsureFresh(id, freshness_.metadata_ttl));
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(Node * dir, FindOrError(id));
  Directory out;
  out.entries.reserve(dir->children.size());
  for (const auto& [name, child] : dir->children) {
    if (const Node* node = Find(child)) out.entries.push_back(DirEntry{name, AttrOf(*node)});
  }
  out.changed = dir->version != dir->version_read;
  dir->version_read = dir->version;
  return out;
}

StatusOr<NodeAttr> Namespace::Acquire(NodeId id) {
  NodeAttr attr;
  NodeId parent;
  std::string unlisted;  // the entry's name, when its directory left the listings (see Lookup)
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(Node * node, FindOrError(id));
    ++node->kernel_refs;
    attr = AttrOf(*node);
    parent = node->parent;
    const Node* dir = Find(parent);
    if (dir == nullptr || !IsCurrent(*dir)) unlisted = node->name;
  }
  if (!unlisted.empty()) Notify(parent, {std::move(unlisted)});
  return attr;
}

void Namespace::Forget(std::span<const Forgotten> forgotten) {
  Changes changes;
  {
    MutexLock lock(mu_);
    for (const Forgotten& f : forgotten) {
      Node* node = Find(f.node);
      if (node == nullptr) continue;
      node->kernel_refs -= std::min(node->kernel_refs, f.count);
      if (node->kernel_refs == 0 && !node->attached) Free(*node, changes);
    }
  }
  for (const ObjectId& object : changes.freed) engine_.ForgetObject(object);
}

Status Namespace::Open(NodeId id, ReaderId reader) {
  std::string object;
  NodeId listing_dir;
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(const Node* node, FindOrError(id));
    if (node->is_dir) return InvalidArgumentError("is a directory");
    if (node->view != nullptr && !node->view->error().ok()) {
      spdlog::warn("{}: {}", node->path, node->view->error().message());
      return node->view->error().WithContext(node->path);
    }
    if (node->view == nullptr) object = node->object.name;
    // The directory whose listing says whether the file is current: a view
    // file's is its checkpoint directory's.
    listing_dir = node->parent;
    if (node->view != nullptr) {
      const Node* view_dir = Find(node->parent);
      if (view_dir != nullptr) listing_dir = view_dir->parent;
    }
  }
  if (freshness_.metadata_ttl != Freshness::kForever) {
    Status listed = EnsureFresh(listing_dir, freshness_.metadata_ttl);
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(const Node* node, FindOrError(id));
    if (!IsCurrent(*node)) {
      return StaleError(Describe(*node) + " was replaced or removed in the source since it was looked up; open it "
                        "again for the version the source has now");
    }
    RETURN_IF_ERROR(listed);
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
    const Node* node = Find(id);
    if (node == nullptr) return done(NotFoundError("no node " + std::to_string(id.value)));
    if (node->is_dir) return done(InvalidArgumentError("is a directory"));
    object = node->object;
    view = node->view;
  }
  if (view != nullptr) {
    return view_reader_.Read(std::move(view), offset, size, [this, done = std::move(done)](StatusOr<ReadResult> r) {
      if (r.ok()) {
        metrics_.read_requests.fetch_add(1, std::memory_order_relaxed);
        metrics_.bytes_served.fetch_add(r->size(), std::memory_order_relaxed);
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
