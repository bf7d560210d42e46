#include "core/views/views.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <map>
#include <set>
#include <utility>

#include "core/safetensors/header.h"
#include "core/safetensors/index.h"
#include "core/views/gguf_view.h"
#include "core/views/model_config.h"
#include "core/views/quantize.h"
#include "core/views/stacked.h"
#include "core/views/view_transforms.h"

namespace tensorfs {
namespace {

constexpr std::string_view kNf4StateKey = "quant_state.bitsandbytes__nf4";

// transformers keeps these models' projections in Conv1D modules, whose weight
// is stored [in, out]; its bitsandbytes integration quantizes them as the
// [out, in] weight of a Linear layer, so @bnb-* quantizes the transpose.
constexpr std::array<std::string_view, 4> kConv1dModelTypes = {"gpt2", "openai-gpt", "imagegpt",
                                                               "decision_transformer"};

// One tensor of a view file and where its bytes come from: a source tensor, a
// part of a transform, or bytes of its own (code tables, quant state JSON).
struct OutTensor {
  std::string name;
  Dtype dtype = Dtype::U8;
  std::vector<uint64_t> shape;
  const CatalogEntry* source = nullptr;
  std::shared_ptr<const Transform> transform;
  int part = 0;
  std::string bytes;
};

uint64_t Elements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // the header parser has checked for overflow
  return n;
}

bool IsCastable(const CatalogEntry& e) {
  return (e.dtype == Dtype::F32 || e.dtype == Dtype::F16 || e.dtype == Dtype::BF16) && Elements(e.shape) > 0;
}

std::string_view TorchDtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::F16: return "float16";
    case Dtype::BF16: return "bfloat16";
    default: return "float32";
  }
}

std::string FloatBytes(std::span<const float> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// bitsandbytes packs the non-tensor part of a quant state as the bytes of
// Python's json.dumps of it (default separators).
std::string QuantStateJson(const CatalogEntry& e, const std::vector<uint64_t>& dims, uint64_t blocksize) {
  std::string shape;
  for (size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
  return "{\"quant_type\": \"nf4\", \"blocksize\": " + std::to_string(blocksize) + ", \"dtype\": \"" +
         std::string(TorchDtypeName(e.dtype)) + "\", \"shape\": [" + shape + "]}";
}

class Builder {
 public:
  explicit Builder(const ViewInput& input) : input_(input), checkpoint_(input.scan->checkpoint) {
    if (input.config_json) {
      std::optional<nlohmann::ordered_json> config = ParseModelConfig(*input.config_json);
      if (config && config->is_object()) {
        config_ = std::move(*config);
      } else {
        spdlog::warn("config.json is not a JSON object (or nests deeper than {} levels); the views show it unchanged",
                     kMaxConfigDepth);
      }
    }
    if (config_ && config_->contains("model_type") && (*config_)["model_type"].is_string()) {
      const std::string type = (*config_)["model_type"];
      conv1d_ = std::find(kConv1dModelTypes.begin(), kConv1dModelTypes.end(), type) != kConv1dModelTypes.end();
    }
    for (const FileScan& f : input.scan->files) {
      if (!f.header.ok()) broken_files_.emplace(f.object.name, f.header.status());
    }
    for (const IndexScan& i : input.scan->indexes) {
      if (!i.index.ok()) continue;
      for (const auto& [tensor, file] : i.index->weight_map) {
        const std::string object = checkpoint_.dir_prefix() + file;
        if (broken_files_.contains(object) && checkpoint_.Find(tensor) == nullptr) {
          broken_tensors_.emplace(tensor, object);
        }
      }
    }
  }

  std::vector<ViewEntry> Tensors() const {
    std::vector<ViewEntry> out;
    for (const CatalogEntry& e : checkpoint_.tensors()) {
      out.push_back({TensorFileName(e.name) + ".safetensors", MakeFile({Plain(e)})});
    }
    for (const auto& [tensor, object] : broken_tensors_) {
      out.push_back({TensorFileName(tensor) + ".safetensors", Unreadable(object)});
    }
    return out;
  }

  std::vector<ViewEntry> Split(ViewKind kind) const {
    std::vector<std::string> names = checkpoint_.TensorNames();
    for (const auto& [tensor, object] : broken_tensors_) names.push_back(tensor);
    std::vector<ViewEntry> out;
    ViewFile* previous = nullptr;
    for (const LayerGroup& group : input_.grouper->Group(names)) {
      std::string file_name = group.prefix + (group.prefix.ends_with('.') ? "" : ".") + "safetensors";
      std::shared_ptr<ViewFile> file;
      std::vector<OutTensor> tensors;
      for (const std::string& name : group.tensors) {
        const CatalogEntry* e = checkpoint_.Find(name);
        if (e == nullptr) {
          file = Unreadable(broken_tensors_.at(name));
          break;
        }
        if (kind == ViewKind::kSplit4bit && IsCastable(*e)) {
          AddNf4(*e, ".4bit.", tensors);
        } else if (kind == ViewKind::kSplit8bit && IsCastable(*e)) {
          Add8bit(*e, tensors);
        } else {
          tensors.push_back(Plain(*e));
        }
      }
      if (file == nullptr) file = MakeFile(std::move(tensors));
      if (previous != nullptr) {
        previous->next = file.get();
        file->previous = previous;
      }
      previous = file.get();
      out.push_back({file_name, std::move(file)});
      out.push_back({file_name + ".done", std::make_shared<ViewFile>()});
    }
    return out;
  }

  std::vector<ViewEntry> Mirror(ViewKind kind) const {
    std::map<std::string, LayerGroup::Kind> kinds;
    for (const LayerGroup& g : input_.grouper->Group(checkpoint_.TensorNames())) {
      for (const std::string& t : g.tensors) kinds.emplace(t, g.kind);
    }
    // The catalog's tensors (storage order) of each file.
    std::vector<std::vector<const CatalogEntry*>> by_file(checkpoint_.files().size());
    for (const CatalogEntry& e : checkpoint_.tensors()) by_file[e.file_index].push_back(&e);
    std::vector<ViewEntry> out;
    std::map<std::string, std::string> weight_map;  // sorted by tensor name, as transformers writes it
    uint64_t total_size = 0;
    std::optional<Dtype> quantized_dtype;
    for (const FileScan& f : input_.scan->files) {
      const std::string base = Base(f.object.name);
      if (!f.header.ok()) {
        out.push_back({base, Unreadable(f.object.name)});
        for (const auto& [tensor, object] : broken_tensors_) {
          if (object == f.object.name) weight_map[tensor] = base;
        }
        continue;
      }
      std::vector<OutTensor> tensors;
      const CheckpointFile* file = checkpoint_.FindFile(f.object.name);
      for (const CatalogEntry* entry : by_file[file - checkpoint_.files().data()]) {
        const CatalogEntry& e = *entry;
        const bool block_weight = kinds.at(e.name) == LayerGroup::Kind::kBlock && e.shape.size() == 2 &&
                                  e.name.ends_with(".weight") && IsCastable(e);
        if (kind == ViewKind::kBnbNf4 && block_weight) {
          AddNf4(e, ".", tensors, /*transpose=*/conv1d_);
          quantized_dtype = quantized_dtype.value_or(e.dtype);
        } else if (kind == ViewKind::kBnbInt8 && block_weight) {
          AddInt8(e, tensors, /*transpose=*/conv1d_);
          quantized_dtype = quantized_dtype.value_or(e.dtype);
        } else if ((kind == ViewKind::kBf16 || kind == ViewKind::kF16) && e.dtype == Dtype::F32 && IsCastable(e)) {
          auto t = MakeCastTransform(SourceOf(e), kind == ViewKind::kBf16 ? Dtype::BF16 : Dtype::F16,
                                     input_.segment_bytes);
          tensors.push_back({.name = e.name, .dtype = kind == ViewKind::kBf16 ? Dtype::BF16 : Dtype::F16,
                             .shape = e.shape, .transform = std::move(t)});
        } else {
          tensors.push_back(Plain(e));
        }
      }
      for (const OutTensor& t : tensors) {
        weight_map[t.name] = base;
        total_size += *TensorByteSize(t.dtype, t.shape);
      }
      out.push_back({base, MakeFile(std::move(tensors))});
    }

    for (const ObjectInfo& other : input_.others) {
      const std::string base = Base(other.name);
      if (IsIndexFileName(other.name)) {
        nlohmann::ordered_json index;
        index["metadata"]["total_size"] = total_size;
        index["weight_map"] = weight_map;
        out.push_back({base, Synthesized(index.dump(2) + "\n")});
        continue;
      }
      if (base == "config.json" && config_) {
        out.push_back({base, Synthesized(RewriteConfig(kind, *config_, quantized_dtype))});
        continue;
      }
      auto file = std::make_shared<ViewFile>();
      file->AddSource(other, ByteRange{0, other.size});
      out.push_back({base, std::move(file)});
    }
    return out;
  }

 private:
  std::string Base(const std::string& object) const { return object.substr(checkpoint_.dir_prefix().size()); }

  const ObjectInfo& ObjectOf(const CatalogEntry& e) const { return checkpoint_.files()[e.file_index].object; }

  // Tensor `e` as a transform's source; `transpose`: read as its transpose.
  TransformSource SourceOf(const CatalogEntry& e, bool transpose = false) const {
    return TransformSource{.object = ObjectOf(e), .tensor = e.name, .range = e.range, .dtype = e.dtype,
                           .elements = Elements(e.shape), .transpose_rows = transpose ? e.shape[0] : 0};
  }

  std::shared_ptr<ViewFile> Unreadable(const std::string& object) const {
    const Status& why = broken_files_.at(object);
    return std::make_shared<ViewFile>(
        Status(why.code(), "needs a shard that cannot be read: " + why.message()));
  }

  static std::shared_ptr<ViewFile> Synthesized(std::string bytes) {
    auto file = std::make_shared<ViewFile>();
    file->AddBytes(std::move(bytes));
    return file;
  }

  static OutTensor Plain(const CatalogEntry& e) {
    return OutTensor{.name = e.name, .dtype = e.dtype, .shape = e.shape, .source = &e};
  }

  void AddNf4(const CatalogEntry& e, std::string_view separator, std::vector<OutTensor>& out,
              bool transpose = false) const {
    const uint64_t n = Elements(e.shape);
    auto t = MakeNf4Transform(SourceOf(e, transpose), quant::kNf4BlockSize, input_.segment_bytes);
    const std::string json = QuantStateJson(e, transpose ? std::vector<uint64_t>{e.shape[1], e.shape[0]} : e.shape,
                                            quant::kNf4BlockSize);
    const std::string prefix = e.name + std::string(separator);
    out.push_back({.name = e.name, .dtype = Dtype::U8, .shape = {(n + 1) / 2, 1}, .transform = t, .part = 0});
    out.push_back({.name = prefix + "absmax", .dtype = Dtype::F32, .shape = {t->PartSize(1) / 4}, .transform = t,
                   .part = 1});
    out.push_back({.name = prefix + "quant_map", .dtype = Dtype::F32, .shape = {16},
                   .bytes = FloatBytes(quant::Nf4Code())});
    out.push_back({.name = prefix + std::string(kNf4StateKey), .dtype = Dtype::U8, .shape = {json.size()},
                   .bytes = json});
  }

  void Add8bit(const CatalogEntry& e, std::vector<OutTensor>& out) const {
    auto t = MakeBlockwise8Transform(SourceOf(e), quant::kBlockwise8BlockSize, input_.segment_bytes);
    out.push_back({.name = e.name, .dtype = Dtype::U8, .shape = e.shape, .transform = t, .part = 0});
    out.push_back({.name = e.name + ".8bit.absmax", .dtype = Dtype::F32, .shape = {t->PartSize(1) / 4},
                   .transform = t, .part = 1});
    out.push_back({.name = e.name + ".8bit.code", .dtype = Dtype::F32, .shape = {256},
                   .bytes = FloatBytes(quant::DynamicCode())});
  }

  void AddInt8(const CatalogEntry& e, std::vector<OutTensor>& out, bool transpose = false) const {
    const std::vector<uint64_t> shape = transpose ? std::vector<uint64_t>{e.shape[1], e.shape[0]} : e.shape;
    auto t = MakeInt8RowsTransform(SourceOf(e, transpose), shape[1], input_.segment_bytes);
    const std::string module = e.name.substr(0, e.name.size() - std::string_view("weight").size());
    out.push_back({.name = e.name, .dtype = Dtype::I8, .shape = shape, .transform = t, .part = 0});
    out.push_back({.name = module + "SCB", .dtype = Dtype::F32, .shape = {shape[0]}, .transform = t, .part = 1});
  }

  std::shared_ptr<ViewFile> MakeFile(std::vector<OutTensor> outs) const {
    std::vector<TensorInfo> infos;
    infos.reserve(outs.size());
    for (const OutTensor& t : outs) infos.push_back(TensorInfo{.name = t.name, .dtype = t.dtype, .shape = t.shape});
    StatusOr<uint64_t> data_size = LayOutContiguously(infos);
    TENSORFS_CHECK(data_size.ok());
    auto file = std::make_shared<ViewFile>();
    file->AddBytes(SerializeHeader(infos, {{"format", "pt"}}));
    for (size_t i = 0; i < outs.size(); ++i) {
      const OutTensor& t = outs[i];
      if (t.source != nullptr) {
        file->AddSource(ObjectOf(*t.source), t.source->range);
      } else if (t.transform != nullptr) {
        TENSORFS_CHECK(t.transform->PartSize(t.part) == infos[i].size());
        file->AddTransform(t.transform, t.part);
      } else {
        TENSORFS_CHECK(t.bytes.size() == infos[i].size());
        file->AddBytes(t.bytes);
      }
    }
    return file;
  }

  // config.json of a @bnb-* or cast view; see model_config.h.
  static std::string RewriteConfig(ViewKind kind, const nlohmann::ordered_json& config,
                                   std::optional<Dtype> quantized_dtype) {
    ConfigRewrite how = ConfigRewrite::kCastF16;
    if (kind == ViewKind::kBnbNf4) {
      how = ConfigRewrite::kBnbNf4;
    } else if (kind == ViewKind::kBnbInt8) {
      how = ConfigRewrite::kBnbInt8;
    } else if (kind == ViewKind::kBf16) {
      how = ConfigRewrite::kCastBf16;
    } else {
      TENSORFS_CHECK(kind == ViewKind::kF16);
    }
    return RewriteModelConfig(config, how, quantized_dtype).dump(2) + "\n";
  }

  const ViewInput& input_;
  const Checkpoint& checkpoint_;
  std::map<std::string, Status> broken_files_;          // object name -> why
  std::map<std::string, std::string> broken_tensors_;   // tensor -> object name, from the index
  std::optional<nlohmann::ordered_json> config_;  // config.json, when it is a JSON object
  bool conv1d_ = false;  // projections are Conv1D weights (see kConv1dModelTypes)
};

}  // namespace

std::string_view ViewDirName(ViewKind kind) {
  switch (kind) {
    case ViewKind::kTensors: return "@tensors";
    case ViewKind::kSplit: return "splitted_model";
    case ViewKind::kSplit4bit: return "splitted_model.4bit";
    case ViewKind::kSplit8bit: return "splitted_model.8bit";
    case ViewKind::kBnbNf4: return "@bnb-nf4";
    case ViewKind::kBnbInt8: return "@bnb-int8";
    case ViewKind::kBf16: return "@bf16";
    case ViewKind::kF16: return "@f16";
    case ViewKind::kStacked: return "@stacked";
    case ViewKind::kGguf: return "@gguf";
  }
  return "";
}

std::string_view ViewOptionName(ViewKind kind) {
  std::string_view dir = ViewDirName(kind);
  return dir.starts_with('@') ? dir.substr(1) : dir;
}

StatusOr<std::vector<ViewKind>> ParseViewList(std::string_view text) {
  if (text == "all") return std::vector<ViewKind>(kAllViews.begin(), kAllViews.end());
  if (text == "none" || text.empty()) return std::vector<ViewKind>{};
  std::vector<ViewKind> views;
  while (!text.empty()) {
    const size_t end = text.find_first_of(":+");
    const std::string_view name = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    auto it = std::find_if(kAllViews.begin(), kAllViews.end(),
                           [&](ViewKind k) { return ViewOptionName(k) == name || ViewDirName(k) == name; });
    if (it == kAllViews.end()) {
      std::string known;
      for (ViewKind k : kAllViews) known += (known.empty() ? "" : ", ") + std::string(ViewOptionName(k));
      return InvalidArgumentError("views: unknown view '" + std::string(name) + "'; write all, none, or names from " +
                                  known + " joined by ':' (views=splitted_model:bnb-nf4)");
    }
    if (std::find(views.begin(), views.end(), *it) == views.end()) views.push_back(*it);
  }
  return views;
}

std::vector<ViewEntry> BuildView(ViewKind kind, const ViewInput& input) {
  Builder builder(input);
  switch (kind) {
    case ViewKind::kTensors: return builder.Tensors();
    case ViewKind::kSplit:
    case ViewKind::kSplit4bit:
    case ViewKind::kSplit8bit: return builder.Split(kind);
    case ViewKind::kBnbNf4:
    case ViewKind::kBnbInt8:
    case ViewKind::kBf16:
    case ViewKind::kF16: return builder.Mirror(kind);
    case ViewKind::kStacked: return BuildStackedView(input);
    case ViewKind::kGguf:
      if (input.gguf == nullptr) return {};
      return BuildGgufView(*input.gguf, input.scan->checkpoint, input.segment_bytes);
  }
  return {};
}

std::string TensorFileName(std::string_view tensor) {
  std::string out;
  for (char c : tensor) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace tensorfs
