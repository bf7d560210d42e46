#include "core/views/stacked.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "core/safetensors/header.h"
#include "core/safetensors/index.h"

namespace tensorfs {
namespace {

// Longest decimal index taken as a layer or expert number (fits 64 bits).
constexpr size_t kMaxIndexDigits = 9;

std::optional<uint64_t> ParseDecimal(std::string_view digits) {
  if (digits.empty() || digits.size() > kMaxIndexDigits) return std::nullopt;
  uint64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

// <stack><i>.<rest>, rest not empty.
std::optional<std::pair<uint64_t, std::string>> SplitLayer(std::string_view name, std::string_view stack) {
  if (stack.empty() || !name.starts_with(stack)) return std::nullopt;
  const std::string_view tail = name.substr(stack.size());
  const size_t dot = tail.find('.');
  if (dot == std::string_view::npos || dot + 1 == tail.size()) return std::nullopt;
  std::optional<uint64_t> layer = ParseDecimal(tail.substr(0, dot));
  if (!layer) return std::nullopt;
  return std::make_pair(*layer, std::string(tail.substr(dot + 1)));
}

// <a>experts.<j>.<b> at the first "experts" component followed by a number
// and something after it: {a + "experts.", j, b}.
struct ExpertSplit {
  std::string head;  // "block_sparse_moe.experts."
  uint64_t expert = 0;
  std::string tail;  // "w1.weight"
};

std::optional<ExpertSplit> SplitExpert(std::string_view rest) {
  size_t start = 0;
  while (true) {
    const size_t dot = rest.find('.', start);
    if (dot == std::string_view::npos) return std::nullopt;
    if (rest.substr(start, dot - start) == "experts") {
      const size_t next = rest.find('.', dot + 1);
      if (next != std::string_view::npos && next + 1 < rest.size()) {
        if (std::optional<uint64_t> j = ParseDecimal(rest.substr(dot + 1, next - dot - 1))) {
          return ExpertSplit{std::string(rest.substr(0, dot + 1)), *j, std::string(rest.substr(next + 1))};
        }
      }
    }
    start = dot + 1;
  }
}

// A block tensor <stack><layer>.<rest>; entry null when its shard cannot be read.
struct Member {
  std::string name;
  const CatalogEntry* entry = nullptr;
  std::string stack;
  uint64_t layer = 0;
  std::string rest;
};

// One layer's part of a family: a member, or a layer's experts stacked.
struct Item {
  uint64_t layer = 0;
  std::vector<const Member*> members;  // expert order
  bool stacked_experts = false;
  bool broken = false;
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;
};

struct Family {
  std::string stack;
  std::string rest;
  std::vector<Item> items;                       // by layer, once sorted
  std::vector<std::pair<size_t, size_t>> runs;   // [begin, end) into items
  std::vector<std::string> run_names;
  bool demoted = false;  // not stacked: its members pass through
};

bool SameLayout(const CatalogEntry& a, const CatalogEntry& b) { return a.dtype == b.dtype && a.shape == b.shape; }

}  // namespace

std::vector<StackedTensor> PlanStackedTensors(const Checkpoint& checkpoint, const LayerGrouper& grouper,
                                              const std::set<std::string>& unreadable) {
  std::vector<std::string> names = checkpoint.TensorNames();
  names.insert(names.end(), unreadable.begin(), unreadable.end());

  std::vector<const CatalogEntry*> passthrough;
  std::vector<Member> members;
  for (const LayerGroup& group : grouper.Group(names)) {
    for (const std::string& name : group.tensors) {
      const CatalogEntry* entry = checkpoint.Find(name);
      std::optional<std::pair<uint64_t, std::string>> split;
      if (group.kind == LayerGroup::Kind::kBlock) split = SplitLayer(name, group.stack);
      if (!split) {
        if (entry != nullptr) passthrough.push_back(entry);
        continue;
      }
      members.push_back(Member{.name = name, .entry = entry, .stack = group.stack, .layer = split->first,
                               .rest = std::move(split->second)});
    }
  }

  std::map<std::string, uint64_t> stack_layers;  // stack -> one past its largest layer index
  for (const Member& m : members) stack_layers[m.stack] = std::max(stack_layers[m.stack], m.layer + 1);

  // Items: the experts of one layer first.
  std::map<std::pair<std::string, std::string>, Family> families;  // (stack, rest)
  auto add_item = [&](const std::string& stack, const std::string& rest, Item item) {
    Family& f = families[{stack, rest}];
    f.stack = stack;
    f.rest = rest;
    f.items.push_back(std::move(item));
  };
  auto single = [](const Member& m) {
    Item item{.layer = m.layer, .members = {&m}, .broken = m.entry == nullptr};
    if (m.entry != nullptr) {
      item.dtype = m.entry->dtype;
      item.shape = m.entry->shape;
    }
    return item;
  };
  std::map<std::tuple<std::string, uint64_t, std::string, std::string>, std::vector<std::pair<uint64_t, const Member*>>>
      experts;  // (stack, layer, head, tail) -> (expert, member)
  for (const Member& m : members) {
    if (std::optional<ExpertSplit> e = SplitExpert(m.rest)) {
      experts[{m.stack, m.layer, e->head, e->tail}].emplace_back(e->expert, &m);
    } else {
      add_item(m.stack, m.rest, single(m));
    }
  }
  for (auto& [key, list] : experts) {
    const auto& [stack, layer, head, tail] = key;
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    bool agree = true;
    for (size_t j = 0; j < list.size() && agree; ++j) {
      const Member& m = *list[j].second;
      agree = list[j].first == j && m.entry != nullptr && SameLayout(*m.entry, *list[0].second->entry);
    }
    if (!agree) {
      for (const auto& [j, m] : list) add_item(stack, m->rest, single(*m));
      continue;
    }
    Item item{.layer = layer, .stacked_experts = true, .dtype = list[0].second->entry->dtype};
    item.shape.push_back(list.size());
    item.shape.insert(item.shape.end(), list[0].second->entry->shape.begin(), list[0].second->entry->shape.end());
    for (const auto& [j, m] : list) item.members.push_back(m);
    add_item(stack, head + tail, std::move(item));
  }

  // Runs over layers.
  for (auto& [key, f] : families) {
    std::sort(f.items.begin(), f.items.end(), [](const Item& a, const Item& b) { return a.layer < b.layer; });
    for (size_t k = 0; k < f.items.size(); ++k) {
      if (f.items[k].broken || (k > 0 && f.items[k].layer == f.items[k - 1].layer)) f.demoted = true;
    }
    if (f.demoted) continue;
    size_t begin = 0;
    for (size_t k = 1; k <= f.items.size(); ++k) {
      if (k < f.items.size() && f.items[k].layer == f.items[k - 1].layer + 1 &&
          f.items[k].dtype == f.items[begin].dtype && f.items[k].shape == f.items[begin].shape) {
        continue;
      }
      f.runs.emplace_back(begin, k);
      begin = k;
    }
    const bool whole = f.runs.size() == 1 && f.items.front().layer == 0 &&
                       f.items.back().layer + 1 == stack_layers.at(f.stack);
    for (const auto& [b, e] : f.runs) {
      f.run_names.push_back(whole ? f.stack + f.rest
                                  : f.stack + std::to_string(f.items[b].layer) + "-" +
                                        std::to_string(f.items[e - 1].layer) + "." + f.rest);
    }
  }

  // A stacked name equal to any other tensor's name: that family is not stacked.
  while (true) {
    std::map<std::string, int> uses;
    for (const CatalogEntry* e : passthrough) ++uses[e->name];
    for (const auto& [key, f] : families) {
      if (f.demoted) {
        for (const Item& item : f.items) {
          for (const Member* m : item.members) ++uses[m->name];
        }
      } else {
        for (const std::string& n : f.run_names) ++uses[n];
      }
    }
    bool changed = false;
    for (auto& [key, f] : families) {
      if (f.demoted) continue;
      for (const std::string& n : f.run_names) {
        if (uses[n] > 1) f.demoted = true;
      }
      changed = changed || f.demoted;
    }
    if (!changed) break;
  }

  std::vector<StackedTensor> out;
  for (const CatalogEntry* e : passthrough) out.push_back({e->name, e->dtype, e->shape, {e}});
  for (const auto& [key, f] : families) {
    if (f.demoted) {
      for (const Item& item : f.items) {
        for (const Member* m : item.members) {
          if (m->entry != nullptr) out.push_back({m->name, m->entry->dtype, m->entry->shape, {m->entry}});
        }
      }
      continue;
    }
    for (size_t r = 0; r < f.runs.size(); ++r) {
      const auto [b, e] = f.runs[r];
      StackedTensor t{.name = f.run_names[r], .dtype = f.items[b].dtype};
      t.shape.push_back(e - b);
      t.shape.insert(t.shape.end(), f.items[b].shape.begin(), f.items[b].shape.end());
      for (size_t k = b; k < e; ++k) {
        for (const Member* m : f.items[k].members) t.sources.push_back(m->entry);
      }
      out.push_back(std::move(t));
    }
  }
  std::sort(out.begin(), out.end(), [](const StackedTensor& a, const StackedTensor& b) { return a.name < b.name; });
  return out;
}

std::vector<ViewEntry> BuildStackedView(const ViewInput& input) {
  const Checkpoint& checkpoint = input.scan->checkpoint;
  std::optional<Status> broken;  // the first shard that cannot be parsed
  for (const FileScan& f : input.scan->files) {
    if (!f.header.ok() && !broken) {
      broken = Status(f.header.status().code(), "needs a shard that cannot be read: " + f.header.status().message());
    }
  }
  std::set<std::string> unreadable;
  for (const IndexScan& i : input.scan->indexes) {
    if (!i.index.ok()) continue;
    for (const auto& [tensor, file] : i.index->weight_map) {
      if (checkpoint.Find(tensor) == nullptr) unreadable.insert(tensor);
    }
  }
  std::vector<StackedTensor> tensors = PlanStackedTensors(checkpoint, *input.grouper, unreadable);

  // As many files as the source has shards: the total cut in equal parts,
  // each tensor in the part where its first byte falls (a part left empty by
  // a larger tensor is no file).
  uint64_t total = 0;
  for (const StackedTensor& t : tensors) total += *TensorByteSize(t.dtype, t.shape);
  const uint64_t parts = std::max<uint64_t>(1, input.scan->files.size());
  std::vector<std::vector<const StackedTensor*>> files;
  uint64_t start = 0;
  uint64_t last_part = 0;
  for (const StackedTensor& t : tensors) {
    const uint64_t part =
        total == 0 ? 0 : static_cast<uint64_t>(static_cast<unsigned __int128>(start) * parts / total);
    if (files.empty() || part != last_part) files.emplace_back();
    last_part = part;
    files.back().push_back(&t);
    start += *TensorByteSize(t.dtype, t.shape);
  }

  std::vector<ViewEntry> out;
  std::map<std::string, std::string> weight_map;
  uint64_t total_size = 0;
  ViewFile* previous = nullptr;
  for (size_t k = 0; k < files.size(); ++k) {
    std::string name = "model.safetensors";
    if (files.size() > 1) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", k + 1, files.size());
      name = buf;
    }
    std::vector<TensorInfo> infos;
    for (const StackedTensor* t : files[k]) infos.push_back({.name = t->name, .dtype = t->dtype, .shape = t->shape});
    StatusOr<uint64_t> data_size = LayOutContiguously(infos);
    TENSORFS_CHECK(data_size.ok());
    std::shared_ptr<ViewFile> file;
    if (broken) {
      file = std::make_shared<ViewFile>(*broken);
    } else {
      file = std::make_shared<ViewFile>();
      file->AddBytes(SerializeHeader(infos, {{"format", "pt"}}));
      for (size_t i = 0; i < infos.size(); ++i) {
        uint64_t bytes = 0;
        for (const CatalogEntry* e : files[k][i]->sources) {
          file->AddSource(checkpoint.files()[e->file_index].object, e->range);
          bytes += e->range.length;
        }
        TENSORFS_CHECK(bytes == infos[i].size());
      }
      if (previous != nullptr) {
        previous->next = file.get();
        file->previous = previous;
      }
      previous = file.get();
    }
    for (const TensorInfo& t : infos) {
      weight_map[t.name] = name;
      total_size += t.size();
    }
    out.push_back({std::move(name), std::move(file)});
  }

  bool had_index = false;
  std::vector<ViewEntry> others;
  for (const ObjectInfo& other : input.others) {
    if (IsIndexFileName(other.name)) {
      had_index = true;
      continue;
    }
    auto file = std::make_shared<ViewFile>();
    file->AddSource(other, ByteRange{0, other.size});
    others.push_back({other.name.substr(input.scan->dir_prefix.size()), std::move(file)});
  }
  if (files.size() > 1 || had_index) {
    nlohmann::ordered_json index;
    index["metadata"]["total_size"] = total_size;
    index["weight_map"] = weight_map;
    auto file = std::make_shared<ViewFile>();
    file->AddBytes(index.dump(2) + "\n");
    others.push_back({std::string(kIndexFileName), std::move(file)});
  }
  std::sort(others.begin(), others.end(), [](const ViewEntry& a, const ViewEntry& b) { return a.name < b.name; });
  for (ViewEntry& e : others) out.push_back(std::move(e));
  return out;
}

}  // namespace tensorfs
