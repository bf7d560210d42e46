#include "core/views/gguf_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <optional>

namespace tensorfs {
namespace {

using Json = nlohmann::json;

// What a transformers config class fills in for keys config.json leaves out
// (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Phi3Config), for the
// keys whose default is a property of the architecture rather than of one
// model's size. The size keys (hidden_size, num_hidden_layers,
// num_attention_heads, intermediate_size) are required: their class defaults
// describe one 7B model and would only describe another by accident.
struct ConfigDefaults {
  std::string_view model_type;
  uint32_t max_position_embeddings;
  double rms_norm_eps;
  uint32_t vocab_size;
  // 0: num_attention_heads.
  uint32_t num_key_value_heads;
  // The class has a head_dim attribute (so AutoConfig's dict always holds
  // one, and the converter writes key_length / value_length): 0 when it
  // defaults to hidden_size / num_attention_heads; absent when the class has
  // none.
  std::optional<uint32_t> head_dim;
};

constexpr std::array<ConfigDefaults, 5> kDefaults = {{
    {"llama", 2048, 1e-6, 32000, 0, 0},
    {"mistral", 4096 * 32, 1e-6, 32000, 8, 0},
    {"qwen2", 32768, 1e-6, 151936, 32, std::nullopt},
    {"qwen3", 32768, 1e-6, 151936, 32, 128},
    {"phi3", 4096, 1e-5, 32064, 0, std::nullopt},
}};

struct ArchEntry {
  std::string_view hf_architecture;
  std::string_view arch;        // GGUF
  std::string_view model_type;  // the config class it is read with
};

constexpr std::array<ArchEntry, 5> kArchitectures = {{
    {"LlamaForCausalLM", "llama", "llama"},
    {"MistralForCausalLM", "llama", "mistral"},
    {"Qwen2ForCausalLM", "qwen2", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3", "qwen3"},
    {"Phi3ForCausalLM", "phi3", "phi3"},
}};

const ConfigDefaults& DefaultsFor(std::string_view model_type) {
  for (const ConfigDefaults& d : kDefaults) {
    if (d.model_type == model_type) return d;
  }
  InternalFatal("no config defaults for " + std::string(model_type));
}

std::string HfArchitecture(const Json& config) {
  auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) return "";
  return (*it)[0].get<std::string>();
}

const ArchEntry* FindArch(std::string_view hf) {
  for (const ArchEntry& a : kArchitectures) {
    if (a.hf_architecture == hf) return &a;
  }
  return nullptr;
}

Status ConfigError(std::string what) { return UnimplementedError("config.json " + std::move(what)); }

// A key of config.json: absent and null are both "not given", as
// transformers reads them.
const Json* Given(const Json& config, std::string_view key) {
  auto it = config.find(key);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

StatusOr<std::optional<uint32_t>> OptionalU32(const Json& config, std::string_view key) {
  const Json* v = Given(config, key);
  if (v == nullptr) return std::optional<uint32_t>();
  if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > std::numeric_limits<uint32_t>::max()) {
    return ConfigError("has " + std::string(key) + " = " + v->dump() + "; a GGUF file needs a positive 32-bit integer");
  }
  return std::optional<uint32_t>(v->get<uint32_t>());
}

StatusOr<uint32_t> RequiredU32(const Json& config, std::string_view key, std::string_view gguf_key) {
  ASSIGN_OR_RETURN(std::optional<uint32_t> v, OptionalU32(config, key));
  if (!v) {
    return ConfigError("has no " + std::string(key) + ", which the GGUF loader needs (as " + std::string(gguf_key) + ")");
  }
  return *v;
}

StatusOr<double> NumberOr(const Json& object, std::string_view key, double fallback, std::string_view where) {
  const Json* v = Given(object, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) return ConfigError("has " + std::string(where) + std::string(key) + " = " + v->dump() + ", not a number");
  return v->get<double>();
}

// The hyperparameters every supported architecture has.
struct Hparams {
  uint32_t n_layer = 0;
  uint32_t n_embd = 0;
  uint32_t n_ff = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t n_ctx = 0;
  uint32_t vocab_size = 0;
  std::optional<uint32_t> head_dim;  // as AutoConfig's dict holds it (written as key_length)
  uint32_t head_dim_k = 0;           // what the loader uses: head_dim, else n_embd / n_head
  double rms_eps = 0;
  double rope_theta = 10000.0;
  Json rope = Json::object();        // rope_parameters / rope_scaling, with rope_type mirrored
};

StatusOr<Hparams> ReadHparams(const Json& config, const ConfigDefaults& defaults, std::string_view arch) {
  Hparams h;
  const std::string prefix(arch);
  ASSIGN_OR_RETURN(h.n_layer, RequiredU32(config, "num_hidden_layers", prefix + ".block_count"));
  ASSIGN_OR_RETURN(h.n_embd, RequiredU32(config, "hidden_size", prefix + ".embedding_length"));
  ASSIGN_OR_RETURN(h.n_head, RequiredU32(config, "num_attention_heads", prefix + ".attention.head_count"));
  ASSIGN_OR_RETURN(h.n_ff, RequiredU32(config, "intermediate_size", prefix + ".feed_forward_length"));
  ASSIGN_OR_RETURN(std::optional<uint32_t> kv, OptionalU32(config, "num_key_value_heads"));
  h.n_head_kv = kv.value_or(defaults.num_key_value_heads != 0 ? defaults.num_key_value_heads : h.n_head);
  ASSIGN_OR_RETURN(std::optional<uint32_t> ctx, OptionalU32(config, "max_position_embeddings"));
  h.n_ctx = ctx.value_or(defaults.max_position_embeddings);
  ASSIGN_OR_RETURN(std::optional<uint32_t> vocab, OptionalU32(config, "vocab_size"));
  h.vocab_size = vocab.value_or(defaults.vocab_size);
  ASSIGN_OR_RETURN(h.head_dim, OptionalU32(config, "head_dim"));
  if (!h.head_dim && defaults.head_dim) h.head_dim = *defaults.head_dim != 0 ? *defaults.head_dim : h.n_embd / h.n_head;
  h.head_dim_k = h.head_dim.value_or(h.n_embd / h.n_head);
  if (h.n_embd % h.n_head != 0 && !h.head_dim) {
    return ConfigError("has hidden_size " + std::to_string(h.n_embd) + " not a multiple of num_attention_heads " +
                       std::to_string(h.n_head) + " and no head_dim");
  }
  if (h.n_head % h.n_head_kv != 0) {
    return ConfigError("has num_attention_heads " + std::to_string(h.n_head) + " not a multiple of num_key_value_heads " +
                       std::to_string(h.n_head_kv));
  }
  ASSIGN_OR_RETURN(h.rms_eps, NumberOr(config, "rms_norm_eps", defaults.rms_norm_eps, ""));
  ASSIGN_OR_RETURN(h.rope_theta, NumberOr(config, "rope_theta", 10000.0, ""));
  // rope_parameters (transformers 5) or rope_scaling, the converter's
  // rope_parameters with rope_theta, rope_type, partial_rotary_factor and
  // original_max_position_embeddings mirrored from the top level.
  const Json* rope = Given(config, "rope_parameters");
  if (rope == nullptr) rope = Given(config, "rope_scaling");
  if (rope != nullptr) {
    if (!rope->is_object()) return ConfigError("has rope_scaling = " + rope->dump() + ", not an object");
    h.rope = *rope;
  }
  if (h.rope.contains("full_attention") || h.rope.contains("sliding_attention")) {
    return ConfigError("has per-layer-type rope parameters, which these architectures do not have");
  }
  if (const Json* t = Given(h.rope, "rope_theta")) {
    if (!t->is_number()) return ConfigError("has rope_parameters.rope_theta = " + t->dump() + ", not a number");
    h.rope_theta = t->get<double>();
  }
  if (!h.rope.contains("rope_type") && h.rope.contains("type")) h.rope["rope_type"] = h.rope["type"];
  for (std::string_view key : {"partial_rotary_factor", "original_max_position_embeddings"}) {
    if (!h.rope.contains(key) && Given(config, key) != nullptr) h.rope[std::string(key)] = config[std::string(key)];
  }
  if (const Json* t = Given(h.rope, "rope_type"); t != nullptr && !t->is_string()) {
    return ConfigError("has rope_scaling.rope_type = " + t->dump() + ", not a string");
  }
  return h;
}

std::string RopeType(const Hparams& h) {
  const Json* t = Given(h.rope, "rope_type");
  return t == nullptr ? "" : t->get<std::string>();
}

// The rope keys of TextModel.set_gguf_parameters, and the rope types it
// leaves to the model (llama3: rope_freqs; longrope: Phi-3's factors).
// Fails for a type the converter does not turn into what llama.cpp runs.
Status SetRopeScalingKeys(const Hparams& h, std::string_view arch, GgufMetadata& m) {
  const std::string type = RopeType(h);
  const std::string a(arch);
  if (type.empty() || type == "default") return OkStatus();
  const Json* factor = Given(h.rope, "factor");
  if (factor != nullptr && !factor->is_number()) {
    return ConfigError("has rope_scaling.factor = " + factor->dump() + ", not a number");
  }
  if (type == "linear") {
    if (factor == nullptr) return OkStatus();
    m.SetString(a + ".rope.scaling.type", "linear");
    m.SetF32(a + ".rope.scaling.factor", static_cast<float>(factor->get<double>()));
    return OkStatus();
  }
  if (type == "yarn") {
    if (factor == nullptr) return OkStatus();
    ASSIGN_OR_RETURN(std::optional<uint32_t> orig, OptionalU32(h.rope, "original_max_position_embeddings"));
    if (!orig) return ConfigError("has yarn rope scaling without original_max_position_embeddings");
    m.SetString(a + ".rope.scaling.type", "yarn");
    m.SetF32(a + ".rope.scaling.factor", static_cast<float>(factor->get<double>()));
    m.SetU32(a + ".rope.scaling.original_context_length", *orig);
    const std::array<std::pair<std::string_view, std::string_view>, 4> yarn = {{
        {"extrapolation_factor", ".rope.scaling.yarn_ext_factor"},
        {"attention_factor", ".rope.scaling.yarn_attn_factor"},
        {"beta_fast", ".rope.scaling.yarn_beta_fast"},
        {"beta_slow", ".rope.scaling.yarn_beta_slow"},
    }};
    for (const auto& [key, gguf] : yarn) {
      const Json* v = Given(h.rope, key);
      if (v == nullptr && key == "attention_factor") v = Given(h.rope, "attn_factor");
      if (v == nullptr) continue;
      if (!v->is_number()) return ConfigError("has rope_scaling." + std::string(key) + " = " + v->dump() + ", not a number");
      m.SetF32(a + std::string(gguf), static_cast<float>(v->get<double>()));
    }
    return OkStatus();
  }
  if (type == "llama3" && arch == "llama") return OkStatus();  // rope_freqs.weight
  if (type == "dynamic") {
    return ConfigError("has rope_scaling type \"dynamic\" (dynamic NTK), which llama.cpp does not run");
  }
  return ConfigError("has rope_scaling type \"" + type + "\", which a " + a + " GGUF file cannot express");
}

// LlamaModel.generate_extra_tensors: rope_freqs of the llama3 rope type,
// computed in float32 as torch computes it.
std::vector<float> Llama3RopeFreqs(const Hparams& h, uint32_t dim) {
  auto get = [&](std::string_view key, double fallback) {
    const Json* v = Given(h.rope, key);
    return v != nullptr && v->is_number() ? v->get<double>() : fallback;
  };
  const double factor = get("factor", 8.0);
  const double low_freq_factor = get("low_freq_factor", 1.0);
  const double high_freq_factor = get("high_freq_factor", 4.0);
  const double old_context_len = get("original_max_position_embeddings", 8192);
  const float base = static_cast<float>(h.rope_theta);
  const double low_freq_wavelen = old_context_len / low_freq_factor;
  const double high_freq_wavelen = old_context_len / high_freq_factor;
  std::vector<float> factors;
  for (uint32_t i = 0; i < dim; i += 2) {
    // 1.0 / (base ** (arange(0, dim, 2, float32) / dim)), all float32.
    const float exponent = static_cast<float>(i) / static_cast<float>(dim);
    const float freq = 1.0f / std::pow(base, exponent);
    // 2 * math.pi / freq: a Python float over a float32 tensor is float32.
    const float wavelen = static_cast<float>(2 * std::numbers::pi) / freq;
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(static_cast<float>(factor));
    } else {
      const float smooth = (static_cast<float>(old_context_len) / wavelen - static_cast<float>(low_freq_factor)) /
                           static_cast<float>(high_freq_factor - low_freq_factor);
      factors.push_back(1.0f / ((1.0f - smooth) / static_cast<float>(factor) + smooth));
    }
  }
  return factors;
}

// One tensor the loader creates: its GGUF name, ne, and whether it must be
// there.
struct Expected {
  std::vector<uint64_t> ne;
  bool required = true;
};

using ExpectedTensors = std::map<std::string, Expected, std::less<>>;

// What llama.cpp's loader (src/models/<arch>.cpp, load_arch_tensors) creates
// for a model of these hyperparameters, without MoE and without the fused
// attn_qkv a Hugging Face checkpoint does not have (Phi-3's aside).
ExpectedTensors LoaderTensors(std::string_view arch, const Hparams& h, uint64_t n_vocab, uint32_t n_rot) {
  ExpectedTensors t;
  const uint64_t n_embd = h.n_embd;
  const uint64_t n_ff = h.n_ff;
  const uint64_t hd = arch == "phi3" ? n_embd / h.n_head : h.head_dim_k;
  const uint64_t n_embd_gqa = hd * h.n_head_kv;
  t["token_embd.weight"] = {{n_embd, n_vocab}};
  t["output_norm.weight"] = {{n_embd}};
  t["output.weight"] = {{n_embd, n_vocab}, false};
  if (arch == "phi3") {
    t["rope_factors_long.weight"] = {{n_rot / 2}, false};
    t["rope_factors_short.weight"] = {{n_rot / 2}, false};
  } else if (arch == "llama") {
    t["rope_freqs.weight"] = {{n_rot / 2}, false};
  }
  for (uint32_t i = 0; i < h.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t[b + "attn_norm.weight"] = {{n_embd}};
    t[b + "ffn_norm.weight"] = {{n_embd}};
    t[b + "ffn_down.weight"] = {{n_ff, n_embd}};
    if (arch == "phi3") {
      t[b + "attn_qkv.weight"] = {{n_embd, n_embd + 2 * n_embd_gqa}};
      t[b + "attn_output.weight"] = {{n_embd, n_embd}};
      t[b + "ffn_up.weight"] = {{n_embd, 2 * n_ff}};
      continue;
    }
    const uint64_t n_q = arch == "qwen2" ? n_embd : hd * h.n_head;
    t[b + "attn_q.weight"] = {{n_embd, n_q}};
    t[b + "attn_k.weight"] = {{n_embd, n_embd_gqa}};
    t[b + "attn_v.weight"] = {{n_embd, n_embd_gqa}};
    t[b + "attn_output.weight"] = {{n_q, n_embd}};
    // Qwen2's q/k/v biases are part of the architecture (Qwen2Attention has
    // bias=True); a checkpoint without them is not a Qwen2 model.
    const bool biases_required = arch == "qwen2";
    t[b + "attn_q.bias"] = {{n_q}, biases_required};
    t[b + "attn_k.bias"] = {{n_embd_gqa}, biases_required};
    t[b + "attn_v.bias"] = {{n_embd_gqa}, biases_required};
    t[b + "ffn_gate.weight"] = {{n_embd, n_ff}};
    t[b + "ffn_up.weight"] = {{n_embd, n_ff}};
    if (arch == "llama") {
      t[b + "attn_output.bias"] = {{n_embd}, false};
      t[b + "ffn_gate.bias"] = {{n_ff}, false};
      t[b + "ffn_down.bias"] = {{n_embd}, false};
      t[b + "ffn_up.bias"] = {{n_ff}, false};
    }
    if (arch == "qwen3") {
      t[b + "attn_q_norm.weight"] = {{hd}};
      t[b + "attn_k_norm.weight"] = {{hd}};
    }
  }
  return t;
}

// tensor_mapping.py's names for the tensors of these architectures.
constexpr std::array<std::pair<std::string_view, std::string_view>, 20> kBlockNames = {{
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate_proj.bias", "ffn_gate.bias"},
    {"mlp.up_proj.bias", "ffn_up.bias"},
    {"mlp.down_proj.bias", "ffn_down.bias"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
}};

// The GGUF name of a Hugging Face tensor, or "" when it has none.
std::string GgufName(std::string_view hf, std::string_view arch) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  constexpr std::string_view kLayers = "model.layers.";
  if (!hf.starts_with(kLayers)) return "";
  const std::string_view rest = hf.substr(kLayers.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 9) return "";
  for (char c : rest.substr(0, dot)) {
    if (c < '0' || c > '9') return "";
  }
  const std::string_view tail = rest.substr(dot + 1);
  // Phi-3's fused projections exist only there.
  if ((tail == "self_attn.qkv_proj.weight" || tail == "mlp.gate_up_proj.weight") && arch != "phi3") return "";
  for (const auto& [from, to] : kBlockNames) {
    if (tail == from) return "blk." + std::string(rest.substr(0, dot)) + "." + std::string(to);
  }
  return "";
}

// Tensors the converter drops (ModelBase.prepare_tensors).
bool Skipped(std::string_view hf) {
  return hf.ends_with(".attention.masked_bias") || hf.ends_with(".attention.bias") ||
         hf.ends_with(".rotary_emb.inv_freq");
}

std::string ShapeText(const std::vector<uint64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

// llama.cpp's vocabulary loader looks tokens up by the model's name: one
// named like Phi-3 must have these (llama_vocab::impl::load, token attributes
// "by model/tokenizer/architecture name"), or the load fails.
Status CheckNameRules(std::string_view name, const GgufMetadata& vocab) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.find("phi-3") == std::string::npos && lower.find("phi3") == std::string::npos) return OkStatus();
  const auto* tokens = vocab.Get<std::vector<std::string>>("tokenizer.ggml.tokens");
  for (std::string_view token : {"</s>", "<unk>", "<s>", "<|endoftext|>"}) {
    if (tokens == nullptr || std::find(tokens->begin(), tokens->end(), token) == tokens->end()) {
      return UnimplementedError("llama.cpp gives a model named like Phi-3 (\"" + std::string(name) +
                                "\") attributes of the token " + std::string(token) +
                                ", which this vocabulary lacks: its load would fail");
    }
  }
  return OkStatus();
}

}  // namespace

GgmlType GgufModel::TypeOf(const GgufTensorPlan& tensor, GgufFileType file_type) const {
  return ChooseType(file_type, TensorTypeQuery{.name = tensor.name,
                                               .ne = tensor.ne,
                                               .block_count = block_count,
                                               .expert_count = 0,
                                               .has_output = !tied,
                                               .arch = arch,
                                               .head_count = head_count,
                                               .head_count_kv = head_count_kv,
                                               .quantize_from = float_file_type});
}

StatusOr<std::string> GgufArchitecture(const Json& config) {
  if (!config.is_object()) return UnimplementedError("config.json is not a JSON object");
  const std::string hf = HfArchitecture(config);
  if (hf.empty()) return UnimplementedError("config.json names no architectures");
  const ArchEntry* entry = FindArch(hf);
  if (entry == nullptr) {
    std::string known;
    for (const ArchEntry& a : kArchitectures) known += (known.empty() ? "" : ", ") + std::string(a.hf_architecture);
    return UnimplementedError("architecture " + hf + " has no GGUF view (supported: " + known + ")");
  }
  return std::string(entry->arch);
}

StatusOr<GgufModel> PlanGgufModel(const Json& config, std::string_view arch, const Checkpoint& checkpoint,
                                  const GgufMetadata& vocab_metadata, uint64_t vocab_tokens, std::string name) {
  const ArchEntry* entry = FindArch(HfArchitecture(config));
  if (entry == nullptr || entry->arch != arch) return InvalidArgumentError("PlanGgufModel: config is not of " + std::string(arch));
  if (Given(config, "quantization_config") != nullptr) {
    return UnimplementedError("config.json has a quantization_config: the checkpoint is already quantized");
  }
  std::string model_type(entry->model_type);
  if (const Json* t = Given(config, "model_type"); t != nullptr && t->is_string()) {
    if (std::any_of(kDefaults.begin(), kDefaults.end(), [&](const ConfigDefaults& d) { return d.model_type == *t; })) {
      model_type = t->get<std::string>();
    }
  }
  const ConfigDefaults& defaults = DefaultsFor(model_type);
  ASSIGN_OR_RETURN(Hparams h, ReadHparams(config, defaults, arch));
  const std::string a(arch);

  GgufModel model;
  model.arch = a;
  model.name = std::move(name);
  model.block_count = h.n_layer;
  model.head_count = h.n_head;
  model.head_count_kv = h.n_head_kv;

  // Metadata, in the converter's order (ModelBase.prepare_metadata).
  GgufMetadata& m = model.metadata;
  m.SetString("general.architecture", a);
  m.SetString("general.type", "model");
  m.SetString("general.name", model.name);
  uint32_t n_rot = 0;
  std::vector<GgufTensorPlan> computed;
  if (arch == "phi3") {
    // Phi3MiniModel.set_gguf_parameters (it does not call the base class's).
    ASSIGN_OR_RETURN(std::optional<uint32_t> orig, OptionalU32(h.rope, "original_max_position_embeddings"));
    const uint32_t orig_ctx = orig.value_or(4096);  // Phi3Config's default
    ASSIGN_OR_RETURN(double rot_pct, NumberOr(h.rope, "partial_rotary_factor", 1.0, "rope_scaling."));
    n_rot = static_cast<uint32_t>(static_cast<int64_t>(rot_pct * h.n_embd) / h.n_head);
    m.SetU32(a + ".context_length", h.n_ctx);
    m.SetU32(a + ".rope.scaling.original_context_length", orig_ctx);
    m.SetU32(a + ".embedding_length", h.n_embd);
    m.SetU32(a + ".feed_forward_length", h.n_ff);
    m.SetU32(a + ".block_count", h.n_layer);
    m.SetU32(a + ".attention.head_count", h.n_head);
    m.SetU32(a + ".attention.head_count_kv", h.n_head_kv);
    m.SetF32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(h.rms_eps));
    m.SetU32(a + ".rope.dimension_count", n_rot);
    m.SetF32(a + ".rope.freq_base", static_cast<float>(h.rope_theta));
    m.SetU32("general.file_type", static_cast<uint32_t>(GgufFileType::kMostlyF16));
    ASSIGN_OR_RETURN(std::optional<uint32_t> swa, OptionalU32(config, "sliding_window"));
    m.SetU32(a + ".attention.sliding_window", swa.value_or(0));
    // Phi3MiniModel.generate_extra_tensors: longrope's factors.
    const Json* long_factors = Given(h.rope, "long_factor");
    if (long_factors != nullptr && !(long_factors->is_array() && long_factors->empty())) {
      const std::string type = RopeType(h);
      const double scale = static_cast<double>(h.n_ctx) / orig_ctx;
      double attn_factor = 1.0;
      if (type == "su" || type == "longrope") {
        if (scale > 1.0) attn_factor = std::sqrt(1 + std::log(scale) / std::log(static_cast<double>(orig_ctx)));
      } else if (type == "yarn") {
        if (scale > 1.0) attn_factor = 0.1 * std::log(scale) + 1.0;
      } else {
        return ConfigError("has rope_scaling type \"" + type + "\" with long_factor, which a phi3 GGUF file cannot express");
      }
      m.SetF32(a + ".rope.scaling.attn_factor", static_cast<float>(attn_factor));
      const Json* short_factors = Given(h.rope, "short_factor");
      auto factors = [&](const Json* list, std::string_view which) -> StatusOr<std::vector<float>> {
        if (list == nullptr || !list->is_array() || list->size() * 2 != n_rot) {
          return ConfigError("has rope_scaling." + std::string(which) + " of other than " + std::to_string(n_rot / 2) +
                             " numbers");
        }
        std::vector<float> out;
        for (const Json& v : *list) {
          if (!v.is_number()) return ConfigError("has a rope_scaling." + std::string(which) + " that is not numbers");
          out.push_back(static_cast<float>(v.get<double>()));
        }
        return out;
      };
      ASSIGN_OR_RETURN(std::vector<float> long_values, factors(long_factors, "long_factor"));
      ASSIGN_OR_RETURN(std::vector<float> short_values, factors(short_factors, "short_factor"));
      computed.push_back({.name = "rope_factors_long.weight", .ne = {n_rot / 2}, .values = std::move(long_values)});
      computed.push_back({.name = "rope_factors_short.weight", .ne = {n_rot / 2}, .values = std::move(short_values)});
    } else if (const std::string type = RopeType(h); !type.empty() && type != "default" && type != "longrope" &&
                                                     type != "su") {
      return ConfigError("has rope_scaling type \"" + type + "\", which a phi3 GGUF file cannot express");
    }
  } else {
    // TextModel.set_gguf_parameters, then LlamaModel's additions.
    m.SetU32(a + ".block_count", h.n_layer);
    m.SetU32(a + ".context_length", h.n_ctx);
    m.SetU32(a + ".embedding_length", h.n_embd);
    m.SetU32(a + ".feed_forward_length", h.n_ff);
    m.SetU32(a + ".attention.head_count", h.n_head);
    m.SetU32(a + ".attention.head_count_kv", h.n_head_kv);
    RETURN_IF_ERROR(SetRopeScalingKeys(h, arch, m));
    m.SetF32(a + ".rope.freq_base", static_cast<float>(h.rope_theta));
    m.SetF32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(h.rms_eps));
    if (h.head_dim) {
      m.SetU32(a + ".attention.key_length", *h.head_dim);
      m.SetU32(a + ".attention.value_length", *h.head_dim);
    }
    m.SetU32("general.file_type", static_cast<uint32_t>(GgufFileType::kMostlyF16));
    n_rot = h.head_dim_k;
    if (arch == "llama") {
      m.SetU32(a + ".vocab_size", h.vocab_size);
      m.SetU32(a + ".rope.dimension_count", n_rot);
      if (RopeType(h) == "llama3") {
        computed.push_back({.name = "rope_freqs.weight", .ne = {n_rot / 2}, .values = Llama3RopeFreqs(h, n_rot)});
      }
    }
  }
  m.SetU32("general.quantization_version", 2);
  m.Merge(vocab_metadata);
  RETURN_IF_ERROR(CheckNameRules(model.name, vocab_metadata));

  // Tensors: the computed ones first (generate_extra_tensors), then the
  // checkpoint's in storage order.
  model.tensors = std::move(computed);
  const ExpectedTensors expected = LoaderTensors(arch, h, vocab_tokens, n_rot);
  std::map<std::string, std::string, std::less<>> seen;  // GGUF name -> HF name
  bool float_type_known = false;
  for (const CatalogEntry& e : checkpoint.tensors()) {
    if (Skipped(e.name)) continue;
    const std::string gguf = GgufName(e.name, arch);
    if (gguf.empty()) {
      return UnimplementedError("tensor " + e.name + " has no counterpart in a " + a + " GGUF file");
    }
    if (e.dtype != Dtype::F32 && e.dtype != Dtype::F16 && e.dtype != Dtype::BF16) {
      return UnimplementedError("tensor " + e.name + " is " + std::string(DtypeName(e.dtype)) +
                                     "; the GGUF view converts F32, F16 and BF16 tensors");
    }
    if (auto [it, added] = seen.emplace(gguf, e.name); !added) {
      return UnimplementedError("tensors " + it->second + " and " + e.name + " both become " + gguf);
    }
    std::vector<uint64_t> ne(e.shape.rbegin(), e.shape.rend());
    auto want = expected.find(gguf);
    if (want == expected.end()) {
      return UnimplementedError("tensor " + e.name + " (" + gguf + ") is not one llama.cpp's " + a +
                                     " loader takes (config.json says num_hidden_layers = " + std::to_string(h.n_layer) +
                                     ")");
    }
    if (ne != want->second.ne) {
      if ((gguf == "token_embd.weight" || gguf == "output.weight") && ne.size() == 2 && ne[0] == h.n_embd) {
        return UnimplementedError(
            "the vocabulary has " + std::to_string(vocab_tokens) + " tokens, " +
            (vocab_tokens > ne[1] ? "more" : "fewer") + " than the " + std::to_string(ne[1]) + " rows of " + e.name +
            " (llama.cpp needs one row per token)");
      }
      return UnimplementedError("tensor " + e.name + " has GGUF shape " + ShapeText(ne) + "; llama.cpp's " + a +
                                     " loader expects " + gguf + " " + ShapeText(want->second.ne) +
                                     " from config.json and the vocabulary");
    }
    GgufTensorPlan t{.name = gguf, .ne = std::move(ne), .source = &e};
    if (arch == "llama") {
      // LlamaModel.modify_tensors: q_proj by n_head, k_proj by n_head_kv.
      const bool q = e.name.ends_with("self_attn.q_proj.weight") || e.name.ends_with("self_attn.q_proj.bias");
      const bool k = e.name.ends_with("self_attn.k_proj.weight") || e.name.ends_with("self_attn.k_proj.bias");
      if (q || k) {
        t.permute_heads = q ? h.n_head : h.n_head_kv;
        if (e.shape[0] % (2 * t.permute_heads) != 0) {
          return UnimplementedError("tensor " + e.name + " has " + std::to_string(e.shape[0]) +
                                         " rows, not an even number per head of " + std::to_string(t.permute_heads));
        }
      }
    }
    if (!float_type_known && e.shape.size() >= 2 && (e.dtype == Dtype::BF16 || e.dtype == Dtype::F16)) {
      // The "auto" outtype: the first 2-D tensor that is bf16 or f16.
      model.float_file_type = e.dtype == Dtype::BF16 ? GgufFileType::kMostlyBF16 : GgufFileType::kMostlyF16;
      float_type_known = true;
    }
    model.tensors.push_back(std::move(t));
  }
  for (const GgufTensorPlan& t : model.tensors) {
    if (t.source == nullptr) seen.emplace(t.name, "");
  }
  for (const auto& [gguf, want] : expected) {
    if (want.required && !seen.contains(gguf)) {
      if (gguf == "token_embd.weight") return UnimplementedError("the checkpoint has no model.embed_tokens.weight");
      return UnimplementedError("the checkpoint has no tensor for " + gguf + ", which llama.cpp's " + a +
                                     " loader requires");
    }
  }
  model.tied = !seen.contains("output.weight");
  // The file's general.file_type is that of the F16 or BF16 file until a
  // file sets its own.
  m.SetU32("general.file_type", static_cast<uint32_t>(model.float_file_type));
  return model;
}

std::string GgufFileName(std::string_view name, GgufFileType file_type) {
  return std::string(name) + "-" + std::string(GgufFileTypeName(file_type)) + ".gguf";
}

}  // namespace tensorfs
