#include "core/safetensors/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

namespace tensorfs {
namespace {

std::string NormalizePrefix(std::string_view dir_prefix) {
  std::string prefix(dir_prefix);
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  return prefix;
}

std::string Location(const ObjectStore& store, const std::string& prefix) {
  return prefix.empty() ? store.Describe() : store.Describe() + "/" + prefix;
}

// "'a', 'b', 'c' and 5 more"
std::string ListNames(const std::vector<std::string>& names, size_t shown = 3) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i) {
    if (i > 0) out += ", ";
    out += "'" + names[i] + "'";
  }
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

// Runs fn(0) ... fn(n-1) on up to `max_threads` threads (the caller's included).
template <typename Fn>
void ParallelFor(size_t n, int max_threads, const Fn& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  {
    std::vector<std::jthread> pool;
    const size_t extra = std::min<size_t>(n, static_cast<size_t>(max_threads)) - (n > 0 ? 1 : 0);
    for (size_t t = 0; t < extra; ++t) {
      try {
        pool.emplace_back(worker);
      } catch (const std::system_error&) {
        break;  // fewer threads is only slower
      }
    }
    worker();
  }  // joins
}

}  // namespace

bool IsSafetensorsFileName(std::string_view name) {
  constexpr std::string_view kSuffix = ".safetensors";
  size_t slash = name.rfind('/');
  std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  return base.size() > kSuffix.size() && base.ends_with(kSuffix);
}

bool IsOneOfSeveralShards(std::string_view name) {
  if (!IsSafetensorsFileName(name)) return false;
  name.remove_suffix(std::string_view(".safetensors").size());
  auto digits = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const size_t of = name.rfind("-of-");
  if (of == std::string_view::npos) return false;
  const std::string_view count = name.substr(of + 4);
  const std::string_view head = name.substr(0, of);
  const size_t dash = head.rfind('-');
  if (!digits(count) || dash == std::string_view::npos || !digits(head.substr(dash + 1))) return false;
  const size_t first = count.find_first_not_of('0');
  return first != std::string_view::npos && (count.size() - first > 1 || count[first] >= '2');
}

bool IsCheckpointDirectory(const Listing& listing) {
  return std::any_of(listing.objects.begin(), listing.objects.end(),
                     [](const ObjectInfo& o) { return IsSafetensorsFileName(o.name); });
}

StatusOr<SafetensorsHeader> ReadSafetensorsHeader(ObjectStore& store, const ObjectInfo& object) {
  const uint64_t first_read =
      std::min<uint64_t>(object.size, kHeaderLengthBytes + kSpeculativeHeaderBytes);
  std::vector<std::byte> buf(object.size >= kHeaderLengthBytes ? first_read : 0);
  if (!buf.empty()) {
    Status st = store.Read(object.id(), 0, buf);
    if (!st.ok()) return st.WithContext("reading the header of " + object.name);
  }
  ASSIGN_OR_RETURN(uint64_t n, ParseHeaderLength(object.name, buf, object.size));
  const uint64_t header_end = kHeaderLengthBytes + n;  // within the file: checked above
  if (header_end > buf.size()) {
    const size_t have = buf.size();
    buf.resize(header_end);
    Status st = store.Read(object.id(), have, std::span<std::byte>(buf).subspan(have));
    if (!st.ok()) return st.WithContext("reading the header of " + object.name);
  }
  return ParseHeader(object.name, std::span<const std::byte>(buf).subspan(kHeaderLengthBytes, n),
                     object.size);
}

StatusOr<SafetensorsIndex> ReadSafetensorsIndex(ObjectStore& store, const ObjectInfo& object) {
  if (object.size > kMaxIndexBytes) {
    return CorruptError(object.name + ": index is " + std::to_string(object.size) +
                        " bytes, over the " + std::to_string(kMaxIndexBytes) +
                        "-byte limit for index files");
  }
  std::string text(object.size, '\0');
  if (!text.empty()) {
    Status st = store.Read(object.id(), 0, std::as_writable_bytes(std::span<char>(text)));
    if (!st.ok()) return st.WithContext("reading " + object.name);
  }
  return ParseIndex(object.name, text);
}

Checkpoint Checkpoint::Build(std::string dir_prefix, std::vector<CheckpointFile> files,
                             std::vector<CheckpointIndex> indexes,
                             const std::vector<std::string>& unreadable,
                             std::vector<Status>* problems) {
  auto report = [problems](Status s) {
    if (problems != nullptr) problems->push_back(std::move(s));
  };
  Checkpoint c;
  c.dir_prefix_ = NormalizePrefix(dir_prefix);
  c.files_ = std::move(files);
  c.indexes_ = std::move(indexes);

  // (file holding the catalog's copy, file repeating it) -> tensor names
  std::map<std::pair<size_t, size_t>, std::vector<std::string>> duplicates;
  for (size_t fi = 0; fi < c.files_.size(); ++fi) {
    const CheckpointFile& f = c.files_[fi];
    c.file_by_name_.emplace(f.object.name, fi);
    for (const TensorInfo& t : f.header.tensors) {
      auto [it, inserted] = c.tensor_by_name_.try_emplace(t.name, c.tensors_.size());
      if (!inserted) {
        duplicates[{c.tensors_[it->second].file_index, fi}].push_back(t.name);
        continue;
      }
      c.tensors_.push_back(CatalogEntry{
          .name = t.name,
          .file = f.object.name,
          .object = f.object.id(),
          .file_index = fi,
          .dtype = t.dtype,
          .shape = t.shape,
          .range = ByteRange{f.header.data_start() + t.begin, t.size()},
      });
      c.total_tensor_bytes_ += t.size();
    }
  }
  for (const auto& [pair, names] : duplicates) {
    const std::string& first = c.files_[pair.first].object.name;
    const std::string& second = c.files_[pair.second].object.name;
    if (names.size() == 1) {
      report(CorruptError("tensor '" + names[0] + "' is in both " + first + " and " + second +
                          "; each tensor must be in exactly one file (remove the extra copy)"));
    } else {
      report(CorruptError(second + " repeats " + std::to_string(names.size()) + " tensors of " +
                          first + " (" + ListNames(names) +
                          "); each tensor must be in exactly one file (remove the extra copy)"));
    }
  }

  if (c.indexes_.empty()) return c;
  const std::set<std::string> unreadable_set(unreadable.begin(), unreadable.end());
  std::vector<std::set<std::string_view>> names_by_file(c.files_.size());
  for (size_t fi = 0; fi < c.files_.size(); ++fi) {
    for (const TensorInfo& t : c.files_[fi].header.tensors) names_by_file[fi].insert(t.name);
  }
  for (const CheckpointIndex& idx : c.indexes_) {
    // shard file (relative) -> the tensors the index places there
    std::map<std::string, std::vector<std::string>> by_file;
    for (const auto& [tensor, file] : idx.index.weight_map) by_file[file].push_back(tensor);
    for (const auto& [file, tensors] : by_file) {
      const std::string object_name = c.dir_prefix_ + file;
      auto it = c.file_by_name_.find(object_name);
      if (it == c.file_by_name_.end()) {
        if (unreadable_set.count(object_name) > 0) continue;  // its own error says why
        report(CorruptError(idx.object.name + " places " + std::to_string(tensors.size()) +
                            (tensors.size() == 1 ? " tensor (" : " tensors (") + ListNames(tensors) +
                            ") in " + file + ", but there is no such file in the directory"));
        continue;
      }
      std::vector<std::string> lacking;
      for (const std::string& t : tensors) {
        if (names_by_file[it->second].count(t) == 0) lacking.push_back(t);
      }
      if (lacking.empty()) continue;
      if (lacking.size() == 1) {
        std::string where;
        if (const CatalogEntry* e = c.Find(lacking[0])) where = " (it is in " + e->file + ")";
        report(CorruptError(idx.object.name + " places tensor '" + lacking[0] + "' in " +
                            object_name + ", but the header of " + object_name +
                            " has no such tensor" + where));
      } else {
        report(CorruptError(idx.object.name + " places " + std::to_string(lacking.size()) +
                            " tensors in " + object_name + " that its header lacks: " +
                            ListNames(lacking)));
      }
    }
  }
  return c;
}

const CatalogEntry* Checkpoint::Find(std::string_view tensor_name) const {
  auto it = tensor_by_name_.find(tensor_name);
  return it == tensor_by_name_.end() ? nullptr : &tensors_[it->second];
}

const CheckpointFile* Checkpoint::FindFile(std::string_view object_name) const {
  auto it = file_by_name_.find(object_name);
  return it == file_by_name_.end() ? nullptr : &files_[it->second];
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const CatalogEntry& e : tensors_) names.push_back(e.name);
  return names;
}

StatusOr<Checkpoint> Checkpoint::Load(ObjectStore& store, std::string_view dir_prefix) {
  ASSIGN_OR_RETURN(CheckpointScan scan, ScanCheckpoint(store, dir_prefix));
  if (scan.files.empty()) {
    return NotFoundError("no .safetensors files in " + scan.location +
                         " (a checkpoint directory holds model.safetensors or "
                         "model-00001-of-0000N.safetensors shards)");
  }
  RETURN_IF_ERROR(scan.FirstError());
  return std::move(scan.checkpoint);
}

Status CheckpointScan::FirstError() const {
  for (const FileScan& f : files) {
    if (!f.header.ok()) return f.header.status();
  }
  for (const IndexScan& i : indexes) {
    if (!i.index.ok()) return i.index.status();
  }
  if (!problems.empty()) return problems.front();
  return OkStatus();
}

StatusOr<CheckpointScan> ScanCheckpoint(ObjectStore& store, std::string_view dir_prefix) {
  const std::string prefix = NormalizePrefix(dir_prefix);
  StatusOr<Listing> listing = store.List(prefix, "/");
  if (!listing.ok()) return listing.status().WithContext("listing " + Location(store, prefix));
  return ScanListing(store, prefix, *listing);
}

CheckpointScan ScanListing(ObjectStore& store, std::string_view dir_prefix, const Listing& listing) {
  const std::string prefix = NormalizePrefix(dir_prefix);
  const std::string location = Location(store, prefix);
  std::vector<ObjectInfo> shard_objects;
  std::vector<ObjectInfo> index_objects;
  for (const ObjectInfo& o : listing.objects) {
    if (IsSafetensorsFileName(o.name)) shard_objects.push_back(o);
    if (IsIndexFileName(o.name)) index_objects.push_back(o);
  }

  std::vector<std::optional<StatusOr<SafetensorsHeader>>> headers(shard_objects.size());
  ParallelFor(shard_objects.size(), kMaxParallelHeaderReads,
              [&](size_t i) { headers[i].emplace(ReadSafetensorsHeader(store, shard_objects[i])); });

  CheckpointScan scan{.dir_prefix = prefix, .location = location};
  std::vector<CheckpointFile> good_files;
  std::vector<std::string> unreadable;
  for (size_t i = 0; i < shard_objects.size(); ++i) {
    if (headers[i]->ok()) {
      good_files.push_back(CheckpointFile{shard_objects[i], headers[i]->value()});
    } else {
      unreadable.push_back(shard_objects[i].name);
    }
    scan.files.push_back(FileScan{shard_objects[i], std::move(*headers[i])});
  }
  std::vector<CheckpointIndex> good_indexes;
  for (const ObjectInfo& o : index_objects) {
    StatusOr<SafetensorsIndex> index = ReadSafetensorsIndex(store, o);
    if (index.ok()) good_indexes.push_back(CheckpointIndex{o, *index});
    scan.indexes.push_back(IndexScan{o, std::move(index)});
  }
  scan.checkpoint = Checkpoint::Build(prefix, std::move(good_files), std::move(good_indexes),
                                      unreadable, &scan.problems);
  return scan;
}

}  // namespace tensorfs
