#include "core/vfs/namespace.h"

#include <utility>

namespace tensorfs {

Namespace::Namespace(ObjectStore& store, ReadEngine& engine) : store_(store), engine_(engine) {
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
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(const Node* node, Find(dir));
    if (!node->is_dir) return InvalidArgumentError("not a directory");
    if (node->listed) return OkStatus();
    prefix = node->prefix;
  }
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

Status Namespace::Open(NodeId id) {
  MutexLock lock(mu_);
  ASSIGN_OR_RETURN(const Node* node, Find(id));
  if (node->is_dir) return InvalidArgumentError("is a directory");
  return OkStatus();
}

void Namespace::Read(NodeId id, uint64_t offset, size_t size, ReadDone done) {
  ObjectInfo object;
  {
    MutexLock lock(mu_);
    StatusOr<const Node*> node = Find(id);
    if (!node.ok()) return done(node.status());
    if ((*node)->is_dir) return done(InvalidArgumentError("is a directory"));
    object = (*node)->object;
  }
  engine_.Read(object, offset, size, std::move(done));
}

Namespace::FsStats Namespace::Stats() const {
  MutexLock lock(mu_);
  return FsStats{.total_bytes = total_bytes_, .nodes = nodes_.size()};
}

}  // namespace tensorfs
