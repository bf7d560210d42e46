#include "core/gguf/type_choice.h"

#include <array>
#include <charconv>
#include <optional>

#include "core/util/status.h"

namespace tensorfs {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// The N of a "blk.N." name (sscanf("blk.%d.") as llama.cpp reads it).
std::optional<uint32_t> BlockOf(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const char* begin = name.data() + kPrefix.size();
  const char* end = name.data() + name.size();
  uint32_t n = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, n);
  if (ec != std::errc() || ptr == begin || ptr == end || *ptr != '.') return std::nullopt;
  return n;
}

// ---- convert_hf_to_gguf.py ----

// The tensors prepare_tensors keeps F32 whatever the outtype (its
// match_model_tensor_name list): per block, "blk.N.<key>.weight"; and global
// names.
constexpr std::array<std::string_view, 16> kConverterF32BlockKeys = {
    "ffn_gate_inp",       "ffn_gate_inp_shexp", "ssm_conv1d",         "shortconv.conv",
    "time_mix_first",     "time_mix_w1",        "time_mix_w2",        "time_mix_decay_w1",
    "time_mix_decay_w2",  "time_mix_lerp_fused", "altup_correct_coef", "altup_predict_coef",
    "ssm_conv1d_q",       "ssm_conv1d_k",       "ssm_conv1d_v",       "indexer.proj",
};
constexpr std::array<std::string_view, 4> kConverterF32Names = {
    "position_embd.weight", "token_types.weight", "v.position_embd.weight", "a.position_embd.weight"};

bool ConverterKeepsF32(const TensorTypeQuery& q) {
  if (q.ne.size() <= 1 || EndsWith(q.name, "_norm.weight")) return true;
  const std::string_view last7 = q.name.size() >= 7 ? std::string_view(q.name).substr(q.name.size() - 7) : "";
  if (last7 != ".weight" && last7 != ".lora_a" && last7 != ".lora_b") return true;  // biases
  for (std::string_view name : kConverterF32Names) {
    if (q.name == name) return true;
  }
  if (const std::optional<uint32_t> block = BlockOf(q.name)) {
    const std::string prefix = "blk." + std::to_string(*block) + ".";
    for (std::string_view key : kConverterF32BlockKeys) {
      if (q.name == prefix + std::string(key) + ".weight") return true;
    }
    // posnet.{bid}.norm1 / norm2 are not "blk." names; none of the converted
    // architectures has them.
  }
  return false;
}

GgmlType ConverterType(GgufFileType file_type, const TensorTypeQuery& q) {
  if (ConverterKeepsF32(q)) return GgmlType::kF32;
  switch (file_type) {
    case GgufFileType::kAllF32:
      return GgmlType::kF32;
    case GgufFileType::kMostlyF16:
      return GgmlType::kF16;
    case GgufFileType::kMostlyBF16:
      return GgmlType::kBF16;
    case GgufFileType::kMostlyQ8_0:
      // gguf-py's quantize raises for a row that is not whole blocks; the
      // converter then writes F16.
      return q.ne[0] % BlockElements(GgmlType::kQ8_0) == 0 ? GgmlType::kQ8_0 : GgmlType::kF16;
    case GgufFileType::kMostlyQ4_K_M:
      break;
  }
  InternalFatal("ConverterType: not a converter outtype");
}

// ---- llama-quantize ----

// tensor_allows_quantization's substrings and names (quantize_output_tensor
// on, as llama-quantize's default).
constexpr std::array<std::string_view, 35> kNotQuantizedParts = {
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
};
constexpr std::array<std::string_view, 2> kNotQuantizedNames = {"position_embd.weight", "token_types.weight"};

// ggml_n_dims: the dimensions up to the last one above 1.
size_t GgmlDims(const std::vector<uint64_t>& ne) {
  size_t n = ne.size();
  while (n > 1 && ne[n - 1] == 1) --n;
  return n;
}

bool QuantizeAllows(const TensorTypeQuery& q) {
  if (GgmlDims(q.ne) < 2) return false;
  if (!EndsWith(q.name, "weight")) return false;
  for (std::string_view part : kNotQuantizedParts) {
    if (Contains(q.name, part)) return false;
  }
  for (std::string_view name : kNotQuantizedNames) {
    if (q.name == name) return false;
  }
  return true;
}

// tensor_get_category, in its order (the first match wins).
enum class Category { kOutput, kTokenEmbd, kAttnQkv, kAttnKvB, kAttnV, kAttnK, kAttnQ, kAttnOutput, kFfnUp,
                      kFfnGate, kFfnDown, kOther };

Category CategoryOf(std::string_view name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  struct Part {
    std::string_view part;
    Category category;
  };
  static constexpr Part kParts[] = {
      {"attn_qkv.weight", Category::kAttnQkv}, {"attn_kv_b.weight", Category::kAttnKvB},
      {"attn_v.weight", Category::kAttnV},     {"attn_k.weight", Category::kAttnK},
      {"attn_q.weight", Category::kAttnQ},     {"attn_output.weight", Category::kAttnOutput},
      {"ffn_up", Category::kFfnUp},            {"ffn_gate", Category::kFfnGate},
      {"ffn_down", Category::kFfnDown},
  };
  for (const Part& p : kParts) {
    if (Contains(name, p.part)) return p.category;
  }
  return Category::kOther;
}

bool UseMoreBits(int64_t i_layer, int64_t n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// The model types llama.cpp's load_arch_hparams calls LLM_TYPE_70B, the only
// type llama-quantize's rules look at.
bool Is70B(const TensorTypeQuery& q) {
  if (q.block_count != 80) return false;
  if (q.arch == "llama") return q.expert_count != 8 && q.head_count != q.head_count_kv;
  return q.arch == "qwen2" || q.arch == "deci" || q.arch == "olmo";
}

// tensor_type_fallback: a type whose block does not divide the rows.
GgmlType ShapeFallback(GgmlType type, uint64_t ne0) {
  if (ne0 % BlockElements(type) == 0) return type;
  GgmlType fallback = type;
  switch (type) {
    case GgmlType::kQ4_K:
      fallback = GgmlType::kQ5_0;
      break;
    case GgmlType::kQ5_K:
      fallback = GgmlType::kQ5_1;
      break;
    case GgmlType::kQ6_K:
      fallback = GgmlType::kQ8_0;
      break;
    default:  // already a 32-element block
      break;
  }
  return ne0 % BlockElements(fallback) == 0 ? fallback : GgmlType::kF16;
}

GgmlType Q4KMType(const TensorTypeQuery& q) {
  TENSORFS_CHECK(q.quantize_from == GgufFileType::kMostlyF16 || q.quantize_from == GgufFileType::kMostlyBF16);
  if (!QuantizeAllows(q)) return ConverterType(q.quantize_from, q);
  TENSORFS_CHECK(q.block_count > 0);
  const uint64_t ne0 = q.ne[0];
  const bool falcon = q.arch == "falcon";
  const Category category = CategoryOf(q.name);
  const int64_t n_layer = q.block_count;
  GgmlType type = GgmlType::kQ4_K;  // the default type of LLAMA_FTYPE_MOSTLY_Q4_K_M
  if (category == Category::kOutput || (!q.has_output && category == Category::kTokenEmbd)) {
    type = (falcon || ne0 % BlockElements(GgmlType::kQ4_K) != 0) ? GgmlType::kQ8_0 : GgmlType::kQ6_K;
  } else if (category == Category::kAttnV || category == Category::kAttnQkv || category == Category::kAttnKvB) {
    const std::optional<uint32_t> layer = BlockOf(q.name);
    TENSORFS_CHECK(layer.has_value());
    if (UseMoreBits(*layer, n_layer)) type = GgmlType::kQ6_K;
    if (Is70B(q) && type == GgmlType::kQ4_K) type = GgmlType::kQ5_K;
    if (q.expert_count == 8) type = GgmlType::kQ8_0;
  } else if (category == Category::kAttnK) {
    if (q.expert_count == 8) type = GgmlType::kQ8_0;
  } else if (category == Category::kFfnDown) {
    const std::optional<uint32_t> layer = BlockOf(q.name);
    TENSORFS_CHECK(layer.has_value() && *layer < q.block_count);
    if (falcon) {
      type = *layer < n_layer / 16             ? GgmlType::kQ6_K
             : UseMoreBits(*layer, n_layer) ? GgmlType::kQ5_K
                                            : GgmlType::kQ4_K;
    } else if (UseMoreBits(*layer, n_layer)) {
      type = GgmlType::kQ6_K;
    }
  } else if (category == Category::kAttnOutput) {
    if (!falcon && q.expert_count == 8) type = GgmlType::kQ5_K;
  }
  return ShapeFallback(type, ne0);
}

}  // namespace

std::string_view GgufFileTypeName(GgufFileType file_type) {
  switch (file_type) {
    case GgufFileType::kAllF32:
      return "F32";
    case GgufFileType::kMostlyF16:
      return "F16";
    case GgufFileType::kMostlyQ8_0:
      return "Q8_0";
    case GgufFileType::kMostlyQ4_K_M:
      return "Q4_K_M";
    case GgufFileType::kMostlyBF16:
      return "BF16";
  }
  InternalFatal("GgufFileTypeName: unknown file type " + std::to_string(static_cast<uint32_t>(file_type)));
}

GgmlType ChooseType(GgufFileType file_type, const TensorTypeQuery& query) {
  TENSORFS_CHECK(!query.ne.empty());
  if (file_type == GgufFileType::kMostlyQ4_K_M) return Q4KMType(query);
  return ConverterType(file_type, query);
}

}  // namespace tensorfs
