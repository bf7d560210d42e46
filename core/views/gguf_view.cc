#include "core/views/gguf_view.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <utility>
#include <vector>

#include "core/gguf/ggml_quants.h"
#include "core/gguf/ggml_types.h"
#include "core/gguf/tokenizer.h"
#include "core/views/transform.h"

namespace tensorfs {
namespace {

constexpr uint32_t kAlignment = 32;

// The largest config or tokenizer file read (a tokenizer.json of a 256k
// vocabulary is about 35 MB).
constexpr uint64_t kMaxGgufSideFileBytes = 256ull << 20;

// A GGUF tensor computed from its source: decoded to float32, rows permuted
// within each head (llama's q/k projections), rounded through the F16 or
// BF16 file's type when llama-quantize starts from that file (Q4_K_M), and
// quantized to `type`.
class GgufTransform final : public Transform {
 public:
  // `row`: ne[0]. `cols`: elements per permuted row (the HF shape's second
  // dimension; 1 for a bias). `head_rows`: rows per head, 0 for no
  // permutation. `through`: kF16 or kBF16 to round the values to first, kF32
  // for none.
  GgufTransform(TransformSource source, GgmlType type, uint64_t row, uint64_t cols, uint64_t head_rows,
                GgmlType through, uint64_t segment_source_bytes)
      : Transform(std::move(source), 1, std::max(row, head_rows * cols), segment_source_bytes,
                  "gguf" + std::to_string(static_cast<uint32_t>(type)) + ":" + std::to_string(row) + ":" +
                      std::to_string(head_rows) + ":" + std::to_string(static_cast<uint32_t>(through)),
                  /*compute_ahead=*/true),
        type_(type),
        row_(row),
        row_bytes_(RowBytes(type, row)),
        cols_(cols),
        head_rows_(head_rows),
        through_(through) {}

 private:
  uint64_t PartBytes(int, uint64_t n) const override { return n / row_ * row_bytes_; }

  void Emit(std::span<const float> x, std::span<const std::span<std::byte>> out) const override {
    if (head_rows_ == 0 && through_ == GgmlType::kF32) return QuantizeBlocks(type_, x, out[0]);
    thread_local std::vector<float> values;
    values.resize(x.size());
    if (head_rows_ == 0) {
      std::copy(x.begin(), x.end(), values.begin());
    } else {
      // LlamaModel.permute: W.reshape(heads, 2, d/2, cols).swapaxes(1, 2).
      const uint64_t head = head_rows_ * cols_;
      const uint64_t half = head_rows_ / 2;
      for (uint64_t h = 0; h < x.size(); h += head) {
        for (uint64_t i = 0; i < half; ++i) {
          for (uint64_t j = 0; j < 2; ++j) {
            std::memcpy(&values[h + (2 * i + j) * cols_], &x[h + (j * half + i) * cols_], cols_ * sizeof(float));
          }
        }
      }
    }
    if (through_ == GgmlType::kF16) {
      for (float& v : values) v = Fp16ToFp32(Fp32ToFp16(v));
    } else if (through_ == GgmlType::kBF16) {
      for (float& v : values) v = Bf16ToFp32(Fp32ToBf16(v));
    }
    QuantizeBlocks(type_, values, out[0]);
  }

  const GgmlType type_;
  const uint64_t row_;
  const uint64_t row_bytes_;
  const uint64_t cols_;
  const uint64_t head_rows_;
  const GgmlType through_;
};

// The source's own bytes serve a tensor of this GGUF type.
bool SameEncoding(Dtype dtype, GgmlType type) {
  return (dtype == Dtype::F32 && type == GgmlType::kF32) || (dtype == Dtype::F16 && type == GgmlType::kF16) ||
         (dtype == Dtype::BF16 && type == GgmlType::kBF16);
}

std::shared_ptr<ViewFile> BuildFile(const GgufModel& model, const Checkpoint& checkpoint, GgufFileType file_type,
                                    uint64_t segment_bytes) {
  GgufMetadata metadata = model.metadata;
  metadata.SetU32("general.file_type", static_cast<uint32_t>(file_type));
  std::vector<GgufTensorRecord> records;
  records.reserve(model.tensors.size());
  for (const GgufTensorPlan& t : model.tensors) {
    records.push_back(GgufTensorRecord{.name = t.name, .ne = t.ne, .type = model.TypeOf(t, file_type)});
  }
  StatusOr<GgufLayout> layout = LayOutGguf(metadata, records, kAlignment);
  if (!layout.ok()) {
    // The plan checked what the layout checks: this is a bug, reported on read.
    spdlog::error("INTERNAL ERROR: {} of {}: {}", GgufFileName(model.name, file_type), checkpoint.dir_prefix(),
                  layout.status().message());
    return std::make_shared<ViewFile>(InternalError("cannot lay out the GGUF file: " + layout.status().message()));
  }
  auto file = std::make_shared<ViewFile>();
  file->AddBytes(std::move(layout->header));
  for (size_t i = 0; i < model.tensors.size(); ++i) {
    const GgufTensorPlan& t = model.tensors[i];
    const GgmlType type = records[i].type;
    TENSORFS_CHECK(file->size() == layout->offsets[i]);
    if (t.source == nullptr) {
      std::string bytes(layout->sizes[i], '\0');
      QuantizeBlocks(type, t.values, std::as_writable_bytes(std::span<char>(bytes)));
      file->AddBytes(std::move(bytes));
    } else {
      const CatalogEntry& e = *t.source;
      const ObjectInfo& object = checkpoint.files()[e.file_index].object;
      // llama-quantize quantizes the values the F16/BF16 file holds: the
      // source rounded to that file's type, when it quantizes the tensor.
      const GgmlType stored = model.TypeOf(t, model.float_file_type);
      const bool rounded = file_type == GgufFileType::kMostlyQ4_K_M && type != stored &&
                           (stored == GgmlType::kF16 || stored == GgmlType::kBF16) && !SameEncoding(e.dtype, stored);
      if (t.permute_heads == 0 && SameEncoding(e.dtype, type)) {
        file->AddSource(object, e.range);
      } else {
        uint64_t elements = 1;
        for (uint64_t d : e.shape) elements *= d;
        const uint64_t rows = e.shape[0];
        const uint64_t cols = e.shape.size() > 1 ? elements / rows : 1;
        const uint64_t head_rows = t.permute_heads == 0 ? 0 : rows / t.permute_heads;
        auto transform = std::make_shared<GgufTransform>(
            TransformSource{.object = object, .tensor = e.name, .range = e.range, .dtype = e.dtype,
                            .elements = elements},
            type, t.ne[0], cols, head_rows, rounded ? stored : GgmlType::kF32, segment_bytes);
        TENSORFS_CHECK(transform->PartSize(0) == layout->sizes[i]);
        file->AddTransform(std::move(transform), 0);
      }
    }
    const uint64_t next = i + 1 < model.tensors.size() ? layout->offsets[i + 1] : layout->file_size;
    file->AddBytes(std::string(next - file->size(), '\0'));
  }
  TENSORFS_CHECK(file->size() == layout->file_size);
  return file;
}

}  // namespace

std::vector<ViewEntry> BuildGgufView(const GgufModel& model, const Checkpoint& checkpoint, uint64_t segment_bytes) {
  std::vector<ViewEntry> out;
  for (GgufFileType file_type : model.file_types()) {
    out.push_back({GgufFileName(model.name, file_type), BuildFile(model, checkpoint, file_type, segment_bytes)});
  }
  return out;
}

StatusOr<GgufModel> LoadGgufModel(ObjectStore& store, const CheckpointScan& scan,
                                  const std::vector<ObjectInfo>& others, std::string name) {
  if (Status bad = scan.FirstError(); !bad.ok()) return Status(bad.code(), "the checkpoint is damaged: " + bad.message());
  const std::string& prefix = scan.dir_prefix;
  auto find = [&](std::string_view base) -> const ObjectInfo* {
    for (const ObjectInfo& o : others) {
      if (o.name.size() == prefix.size() + base.size() && o.name.starts_with(prefix) && o.name.ends_with(base)) return &o;
    }
    return nullptr;
  };
  auto read = [&](std::string_view base) -> StatusOr<std::optional<std::string>> {
    const ObjectInfo* o = find(base);
    if (o == nullptr) return std::optional<std::string>();
    if (o->size > kMaxGgufSideFileBytes) {
      return UnimplementedError(std::string(base) + " is " + std::to_string(o->size) + " bytes, over the " +
                                     std::to_string(kMaxGgufSideFileBytes) + " bytes the GGUF view reads");
    }
    std::string text(o->size, '\0');
    RETURN_IF_ERROR(store.Read(o->id(), 0, std::as_writable_bytes(std::span<char>(text)))
                        .WithContext("cannot read " + std::string(base)));
    return std::optional<std::string>(std::move(text));
  };
  ASSIGN_OR_RETURN(std::optional<std::string> config_text, read("config.json"));
  if (!config_text) return UnimplementedError("the directory has no config.json");
  const nlohmann::json config = nlohmann::json::parse(*config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return UnimplementedError("config.json is not valid JSON");
  ASSIGN_OR_RETURN(std::string arch, GgufArchitecture(config));
  TokenizerFiles files;
  ASSIGN_OR_RETURN(files.tokenizer_json, read("tokenizer.json"));
  ASSIGN_OR_RETURN(files.tokenizer_config_json, read("tokenizer_config.json"));
  ASSIGN_OR_RETURN(files.tokenizer_model, read("tokenizer.model"));
  ASSIGN_OR_RETURN(files.added_tokens_json, read("added_tokens.json"));
  ASSIGN_OR_RETURN(files.special_tokens_map_json, read("special_tokens_map.json"));
  ASSIGN_OR_RETURN(files.chat_template_jinja, read("chat_template.jinja"));
  StatusOr<GgufVocab> vocab = ConvertTokenizer(files, config, arch);
  if (!vocab.ok()) return Status(vocab.status().code(), "the tokenizer: " + vocab.status().message());
  return PlanGgufModel(config, arch, scan.checkpoint, vocab->metadata, vocab->tokens, std::move(name));
}

std::string GgufNameOfSource(std::string_view source) {
  if (const size_t scheme = source.find("://"); scheme != std::string_view::npos) source.remove_prefix(scheme + 3);
  while (source.ends_with('/')) source.remove_suffix(1);
  const size_t slash = source.rfind('/');
  return std::string(slash == std::string_view::npos ? source : source.substr(slash + 1));
}

std::string DescribeGguf(const StatusOr<GgufModel>& model) {
  if (!model.ok()) return "none: " + model.status().message();
  std::string files;
  for (GgufFileType file_type : model->file_types()) {
    files += (files.empty() ? "" : ", ") + GgufFileName(model->name, file_type);
  }
  return files + " (" + model->arch + ")";
}

}  // namespace tensorfs

namespace tensorfs {

std::string DescribeGgufOf(ObjectStore& store, std::string_view dir_prefix, std::string name) {
  StatusOr<CheckpointScan> scan = ScanCheckpoint(store, dir_prefix);
  if (!scan.ok()) return "none: " + scan.status().message();
  StatusOr<Listing> listing = store.List(scan->dir_prefix, "/");
  if (!listing.ok()) return "none: " + listing.status().message();
  std::vector<ObjectInfo> others;
  for (const ObjectInfo& o : listing->objects) {
    if (!IsSafetensorsFileName(o.name)) others.push_back(o);
  }
  return DescribeGguf(LoadGgufModel(store, *scan, others, std::move(name)));
}

}  // namespace tensorfs
