#include "tests/support/checkpoint_gen.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/safetensors/layers.h"

namespace tensorfs::testing {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::array<std::pair<Arch, std::string_view>, 7> kArchNames = {{
    {Arch::kLlama, "llama"},
    {Arch::kQwen2, "qwen2"},
    {Arch::kMixtral, "mixtral"},
    {Arch::kGpt2, "gpt2"},
    {Arch::kT5, "t5"},
    {Arch::kLlamaTied, "llama-tied"},
    {Arch::kDeepseekMoe, "deepseek-moe"},
}};

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element `index` of a float tensor as its little-endian bits: random sign,
// exponent chosen so that 2^-8 <= |x| < 1, random mantissa.
uint64_t FloatElement(Dtype dtype, uint64_t seed, uint64_t index) {
  const uint64_t r = Mix(seed ^ Mix(index));
  const uint64_t sign = r >> 63;
  const uint64_t exp_off = (r >> 60) & 7;  // 0..7 below the bias - 1
  switch (dtype) {
    case Dtype::F16:
      return (sign << 15) | ((14 - exp_off) << 10) | (r & 0x3FF);
    case Dtype::BF16:
      return (sign << 15) | ((126 - exp_off) << 7) | (r & 0x7F);
    case Dtype::F32:
      return (sign << 31) | ((126 - exp_off) << 23) | (r & 0x7FFFFF);
    case Dtype::F64:
      return (sign << 63) | ((1022 - exp_off) << 52) | (r & 0xFFFFFFFFFFFFFull);
    default:
      return r;
  }
}

bool HasFloatPattern(Dtype dtype) {
  return dtype == Dtype::F16 || dtype == Dtype::BF16 || dtype == Dtype::F32 || dtype == Dtype::F64;
}

void Add(std::vector<TensorSpec>& out, const ModelSpec& spec, std::string name,
         std::vector<uint64_t> shape) {
  out.push_back(TensorSpec{std::move(name), spec.dtype, std::move(shape)});
}

void AddLlamaAttention(std::vector<TensorSpec>& out, const ModelSpec& spec, const std::string& p,
                       bool biases) {
  const uint64_t h = spec.hidden;
  const uint64_t kv = spec.hidden / spec.heads * spec.kv_heads;
  Add(out, spec, p + "input_layernorm.weight", {h});
  Add(out, spec, p + "self_attn.q_proj.weight", {h, h});
  if (biases) Add(out, spec, p + "self_attn.q_proj.bias", {h});
  Add(out, spec, p + "self_attn.k_proj.weight", {kv, h});
  if (biases) Add(out, spec, p + "self_attn.k_proj.bias", {kv});
  Add(out, spec, p + "self_attn.v_proj.weight", {kv, h});
  if (biases) Add(out, spec, p + "self_attn.v_proj.bias", {kv});
  Add(out, spec, p + "self_attn.o_proj.weight", {h, h});
  Add(out, spec, p + "post_attention_layernorm.weight", {h});
}

void AddT5Attention(std::vector<TensorSpec>& out, const ModelSpec& spec, const std::string& p,
                    bool relative_bias) {
  const uint64_t h = spec.hidden;
  for (const char* w : {"q", "k", "v", "o"}) Add(out, spec, p + w + ".weight", {h, h});
  if (relative_bias) Add(out, spec, p + "relative_attention_bias.weight", {32, spec.heads});
}

Status WriteFile(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return InternalError("cannot write " + path.string());
  return OkStatus();
}

}  // namespace

std::string_view ArchName(Arch arch) {
  for (const auto& [a, name] : kArchNames) {
    if (a == arch) return name;
  }
  return "unknown";
}

std::optional<Arch> ParseArch(std::string_view name) {
  for (const auto& [a, n] : kArchNames) {
    if (n == name) return a;
  }
  return std::nullopt;
}

Status ValidateSpec(const ModelSpec& spec) {
  auto bad = [](std::string what) { return InvalidArgumentError("model spec: " + what); };
  if (spec.layers < 1) return bad("layers must be at least 1");
  if (spec.hidden < 1 || spec.intermediate < 1 || spec.vocab < 1) {
    return bad("hidden, intermediate and vocab must be at least 1");
  }
  if (spec.heads < 1 || spec.hidden % spec.heads != 0) return bad("heads must divide hidden");
  if (spec.kv_heads < 1 || spec.heads % spec.kv_heads != 0) return bad("kv_heads must divide heads");
  if ((spec.arch == Arch::kMixtral || spec.arch == Arch::kDeepseekMoe) && spec.experts < 1) {
    return bad("experts must be at least 1");
  }
  if (spec.arch == Arch::kDeepseekMoe && spec.dense_layers > spec.layers) {
    return bad("dense_layers must not exceed layers");
  }
  if (spec.arch == Arch::kGpt2 && spec.max_positions < 1) return bad("max_positions must be at least 1");
  if (spec.dtype != Dtype::F32 && spec.dtype != Dtype::F16 && spec.dtype != Dtype::BF16) {
    return bad("dtype must be F32, F16 or BF16, not " + std::string(DtypeName(spec.dtype)));
  }
  return OkStatus();
}

uint64_t TensorSpec::size() const {
  std::optional<uint64_t> size = TensorByteSize(dtype, shape);
  TENSORFS_CHECK(size.has_value());
  return *size;
}

std::vector<TensorSpec> ModelTensors(const ModelSpec& spec) {
  std::vector<TensorSpec> out;
  const uint64_t h = spec.hidden;
  const uint64_t i = spec.intermediate;
  switch (spec.arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
    case Arch::kLlamaTied:
    case Arch::kMixtral:
    case Arch::kDeepseekMoe: {
      Add(out, spec, "model.embed_tokens.weight", {spec.vocab, h});
      for (uint64_t l = 0; l < spec.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        AddLlamaAttention(out, spec, p, spec.arch == Arch::kQwen2);
        if (spec.arch == Arch::kMixtral) {
          Add(out, spec, p + "block_sparse_moe.gate.weight", {spec.experts, h});
          for (uint64_t e = 0; e < spec.experts; ++e) {
            const std::string ep = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
            Add(out, spec, ep + "w1.weight", {i, h});
            Add(out, spec, ep + "w2.weight", {h, i});
            Add(out, spec, ep + "w3.weight", {i, h});
          }
        } else if (spec.arch == Arch::kDeepseekMoe && l >= spec.dense_layers) {
          const uint64_t mi = std::max<uint64_t>(1, i / 2);
          Add(out, spec, p + "mlp.gate.weight", {spec.experts, h});
          for (uint64_t e = 0; e < spec.experts; ++e) {
            const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
            Add(out, spec, ep + "gate_proj.weight", {mi, h});
            Add(out, spec, ep + "up_proj.weight", {mi, h});
            Add(out, spec, ep + "down_proj.weight", {h, mi});
          }
          Add(out, spec, p + "mlp.shared_experts.gate_proj.weight", {mi, h});
          Add(out, spec, p + "mlp.shared_experts.up_proj.weight", {mi, h});
          Add(out, spec, p + "mlp.shared_experts.down_proj.weight", {h, mi});
        } else {
          Add(out, spec, p + "mlp.gate_proj.weight", {i, h});
          Add(out, spec, p + "mlp.up_proj.weight", {i, h});
          Add(out, spec, p + "mlp.down_proj.weight", {h, i});
        }
      }
      Add(out, spec, "model.norm.weight", {h});
      if (spec.arch != Arch::kLlamaTied) Add(out, spec, "lm_head.weight", {spec.vocab, h});
      break;
    }
    case Arch::kGpt2: {
      // Conv1D weights are stored [in, out].
      Add(out, spec, "transformer.wte.weight", {spec.vocab, h});
      Add(out, spec, "transformer.wpe.weight", {spec.max_positions, h});
      for (uint64_t l = 0; l < spec.layers; ++l) {
        const std::string p = "transformer.h." + std::to_string(l) + ".";
        Add(out, spec, p + "ln_1.weight", {h});
        Add(out, spec, p + "ln_1.bias", {h});
        Add(out, spec, p + "attn.c_attn.weight", {h, 3 * h});
        Add(out, spec, p + "attn.c_attn.bias", {3 * h});
        Add(out, spec, p + "attn.c_proj.weight", {h, h});
        Add(out, spec, p + "attn.c_proj.bias", {h});
        Add(out, spec, p + "ln_2.weight", {h});
        Add(out, spec, p + "ln_2.bias", {h});
        Add(out, spec, p + "mlp.c_fc.weight", {h, i});
        Add(out, spec, p + "mlp.c_fc.bias", {i});
        Add(out, spec, p + "mlp.c_proj.weight", {i, h});
        Add(out, spec, p + "mlp.c_proj.bias", {h});
      }
      Add(out, spec, "transformer.ln_f.weight", {h});
      Add(out, spec, "transformer.ln_f.bias", {h});
      break;
    }
    case Arch::kT5: {
      Add(out, spec, "shared.weight", {spec.vocab, h});
      for (uint64_t l = 0; l < spec.layers; ++l) {
        const std::string p = "encoder.block." + std::to_string(l) + ".";
        AddT5Attention(out, spec, p + "layer.0.SelfAttention.", l == 0);
        Add(out, spec, p + "layer.0.layer_norm.weight", {h});
        Add(out, spec, p + "layer.1.DenseReluDense.wi.weight", {i, h});
        Add(out, spec, p + "layer.1.DenseReluDense.wo.weight", {h, i});
        Add(out, spec, p + "layer.1.layer_norm.weight", {h});
      }
      Add(out, spec, "encoder.final_layer_norm.weight", {h});
      for (uint64_t l = 0; l < spec.layers; ++l) {
        const std::string p = "decoder.block." + std::to_string(l) + ".";
        AddT5Attention(out, spec, p + "layer.0.SelfAttention.", l == 0);
        Add(out, spec, p + "layer.0.layer_norm.weight", {h});
        AddT5Attention(out, spec, p + "layer.1.EncDecAttention.", false);
        Add(out, spec, p + "layer.1.layer_norm.weight", {h});
        Add(out, spec, p + "layer.2.DenseReluDense.wi.weight", {i, h});
        Add(out, spec, p + "layer.2.DenseReluDense.wo.weight", {h, i});
        Add(out, spec, p + "layer.2.layer_norm.weight", {h});
      }
      Add(out, spec, "decoder.final_layer_norm.weight", {h});
      Add(out, spec, "lm_head.weight", {spec.vocab, h});
      break;
    }
  }
  return out;
}

uint64_t ModelTensorBytes(const ModelSpec& spec) {
  uint64_t total = 0;
  for (const TensorSpec& t : ModelTensors(spec)) total += t.size();
  return total;
}

void FillTensorBytes(std::string_view name, Dtype dtype, uint64_t offset, std::span<std::byte> out) {
  const uint64_t seed = Fnv1a(name) ^ (static_cast<uint64_t>(dtype) << 56);
  if (!HasFloatPattern(dtype)) {
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<std::byte>(Mix(seed ^ Mix(offset + i)) & 0xFF);
    }
    return;
  }
  const uint64_t width = DtypeBits(dtype) / 8;
  size_t i = 0;
  while (i < out.size()) {
    const uint64_t pos = offset + i;
    const uint64_t element = pos / width;
    const uint64_t bits = FloatElement(dtype, seed, element);
    for (uint64_t b = pos % width; b < width && i < out.size(); ++b, ++i) {
      out[i] = static_cast<std::byte>((bits >> (8 * b)) & 0xFF);
    }
  }
}

std::string ExpectedTensorBytes(std::string_view name, Dtype dtype, uint64_t size) {
  std::string bytes(size, '\0');
  FillTensorBytes(name, dtype, 0, std::as_writable_bytes(std::span<char>(bytes)));
  return bytes;
}

std::string ExpectedTensorBytes(const TensorSpec& tensor) {
  return ExpectedTensorBytes(tensor.name, tensor.dtype, tensor.size());
}

StatusOr<CheckpointPlan> PlanCheckpoint(const ModelSpec& spec, const WriteOptions& options) {
  RETURN_IF_ERROR(ValidateSpec(spec));
  const std::vector<TensorSpec> tensors = ModelTensors(spec);
  const size_t m = tensors.size();
  const size_t n = options.num_shards < 1 ? 0 : static_cast<size_t>(options.num_shards);
  if (n < 1 || n > m) {
    return InvalidArgumentError("num_shards must be between 1 and the model's " + std::to_string(m) +
                                " tensors, not " + std::to_string(options.num_shards));
  }

  // Shard k holds tensors [cut[k], cut[k+1]): cut by cumulative size.
  std::vector<uint64_t> cumulative(m + 1, 0);
  for (size_t t = 0; t < m; ++t) cumulative[t + 1] = cumulative[t] + tensors[t].size();
  const uint64_t total = cumulative[m];
  std::vector<size_t> cut(n + 1, 0);
  cut[n] = m;
  for (size_t k = 1; k < n; ++k) {
    const long double target = static_cast<long double>(total) * k / n;
    size_t t = 0;
    while (t < m && static_cast<long double>(cumulative[t]) < target) ++t;
    cut[k] = std::clamp(t, cut[k - 1] + 1, m - (n - k));
  }

  // Make sure some block has tensors on both sides of a cut.
  CheckpointPlan plan;
  if (n > 1) {
    ASSIGN_OR_RETURN(LayerGrouper grouper, LayerGrouper::Create(""));
    std::vector<std::string> group(m);
    for (size_t t = 0; t < m; ++t) group[t] = grouper.GroupOf(tensors[t].name);
    std::vector<std::string> names;
    for (const TensorSpec& t : tensors) names.push_back(t.name);
    std::map<std::string, LayerGroup::Kind> kind;
    for (const LayerGroup& g : grouper.Group(names)) kind[g.prefix] = g.kind;
    // Groups are contiguous in forward order: [start, end) of each tensor's group.
    std::vector<size_t> start(m), end(m);
    for (size_t t = 0; t < m; ++t) start[t] = (t > 0 && group[t - 1] == group[t]) ? start[t - 1] : t;
    for (size_t t = m; t-- > 0;) end[t] = (t + 1 < m && group[t + 1] == group[t]) ? end[t + 1] : t + 1;
    // Cutting before tensor c as cut k leaves c's block in exactly shards k-1 and k.
    auto splits_in_two = [&](size_t c, size_t k) {
      return c > 0 && c < m && start[c] < c && kind[group[c]] == LayerGroup::Kind::kBlock &&
             cut[k - 1] <= start[c] && end[c] <= cut[k + 1];
    };
    for (size_t k = 1; k < n && plan.split_group.empty(); ++k) {
      if (splits_in_two(cut[k], k)) plan.split_group = group[cut[k]];
    }
    for (size_t k = 1; k < n && plan.split_group.empty(); ++k) {
      // The qualifying cut nearest to cut[k].
      std::optional<size_t> best;
      auto distance = [&](size_t c) { return c > cut[k] ? c - cut[k] : cut[k] - c; };
      for (size_t c = cut[k - 1] + 1; c < cut[k + 1]; ++c) {
        if (splits_in_two(c, k) && (!best || distance(c) < distance(*best))) best = c;
      }
      if (best) {
        cut[k] = *best;
        plan.split_group = group[*best];
      }
    }
    if (plan.split_group.empty()) {
      return InvalidArgumentError("cannot place " + std::to_string(n) + " shards so that a layer spans two; "
                                  "use fewer shards or more layers");
    }
  }

  for (size_t k = 0; k < n; ++k) {
    ShardPlan shard;
    if (n == 1) {
      shard.file_name = "model.safetensors";
    } else {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, n);
      shard.file_name = name;
    }
    for (size_t t = cut[k]; t < cut[k + 1]; ++t) {
      shard.tensors.push_back(TensorInfo{.name = tensors[t].name, .dtype = tensors[t].dtype,
                                         .shape = tensors[t].shape});
      plan.weight_map[tensors[t].name] = shard.file_name;
    }
    if (options.sort_by_name_in_file) {
      std::sort(shard.tensors.begin(), shard.tensors.end(),
                [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
    }
    ASSIGN_OR_RETURN(uint64_t data_size, LayOutContiguously(shard.tensors));
    shard.header = SerializeHeader(shard.tensors, {{"format", "pt"}});
    shard.file_size = shard.header.size() + data_size;
    plan.shards.push_back(std::move(shard));
  }
  plan.total_size = total;
  return plan;
}

std::string IndexJson(const CheckpointPlan& plan) {
  Json doc;
  doc["metadata"]["total_size"] = plan.total_size;
  doc["weight_map"] = Json::object();
  for (const auto& [tensor, file] : plan.weight_map) doc["weight_map"][tensor] = file;
  return doc.dump(2) + "\n";
}

std::string ConfigJson(const ModelSpec& spec) {
  Json doc;
  const std::string dtype = spec.dtype == Dtype::BF16 ? "bfloat16"
                            : spec.dtype == Dtype::F16 ? "float16"
                                                       : "float32";
  switch (spec.arch) {
    case Arch::kLlama:
    case Arch::kLlamaTied:
    case Arch::kQwen2:
    case Arch::kMixtral:
    case Arch::kDeepseekMoe: {
      static constexpr std::array<std::pair<Arch, std::pair<const char*, const char*>>, 5> kNames = {{
          {Arch::kLlama, {"LlamaForCausalLM", "llama"}},
          {Arch::kLlamaTied, {"LlamaForCausalLM", "llama"}},
          {Arch::kQwen2, {"Qwen2ForCausalLM", "qwen2"}},
          {Arch::kMixtral, {"MixtralForCausalLM", "mixtral"}},
          {Arch::kDeepseekMoe, {"DeepseekForCausalLM", "deepseek"}},
      }};
      for (const auto& [arch, names] : kNames) {
        if (arch != spec.arch) continue;
        doc["architectures"] = {names.first};
        doc["model_type"] = names.second;
      }
      doc["hidden_size"] = spec.hidden;
      doc["intermediate_size"] = spec.intermediate;
      doc["num_hidden_layers"] = spec.layers;
      doc["num_attention_heads"] = spec.heads;
      doc["num_key_value_heads"] = spec.kv_heads;
      doc["vocab_size"] = spec.vocab;
      doc["max_position_embeddings"] = spec.max_positions;
      doc["rms_norm_eps"] = 1e-5;
      doc["hidden_act"] = "silu";
      if (spec.arch == Arch::kMixtral) {
        doc["num_local_experts"] = spec.experts;
        doc["num_experts_per_tok"] = std::min<uint64_t>(2, spec.experts);
      }
      if (spec.arch == Arch::kDeepseekMoe) {
        doc["first_k_dense_replace"] = spec.dense_layers;
        doc["moe_layer_freq"] = 1;
        doc["n_routed_experts"] = spec.experts;
        doc["n_shared_experts"] = 1;
        doc["moe_intermediate_size"] = std::max<uint64_t>(1, spec.intermediate / 2);
        doc["num_experts_per_tok"] = std::min<uint64_t>(2, spec.experts);
      }
      doc["tie_word_embeddings"] = spec.arch == Arch::kLlamaTied;
      break;
    }
    case Arch::kGpt2:
      doc["architectures"] = {"GPT2LMHeadModel"};
      doc["model_type"] = "gpt2";
      doc["n_embd"] = spec.hidden;
      doc["n_inner"] = spec.intermediate;
      doc["n_layer"] = spec.layers;
      doc["n_head"] = spec.heads;
      doc["n_positions"] = spec.max_positions;
      doc["vocab_size"] = spec.vocab;
      doc["tie_word_embeddings"] = true;
      break;
    case Arch::kT5:
      doc["architectures"] = {"T5ForConditionalGeneration"};
      doc["model_type"] = "t5";
      doc["d_model"] = spec.hidden;
      doc["d_ff"] = spec.intermediate;
      doc["d_kv"] = spec.hidden / spec.heads;
      doc["num_layers"] = spec.layers;
      doc["num_decoder_layers"] = spec.layers;
      doc["num_heads"] = spec.heads;
      doc["relative_attention_num_buckets"] = 32;
      doc["vocab_size"] = spec.vocab;
      doc["tie_word_embeddings"] = false;
      break;
  }
  doc["torch_dtype"] = dtype;
  return doc.dump(2) + "\n";
}

std::string GenerationConfigJson(const ModelSpec& spec) {
  Json doc;
  doc["bos_token_id"] = 1;
  doc["eos_token_id"] = 2;
  if (spec.arch == Arch::kT5) doc["decoder_start_token_id"] = 0;
  return doc.dump(2) + "\n";
}

std::string TokenizerJson(const ModelSpec& spec) {
  Json vocab = Json::object();
  vocab["<unk>"] = 0;
  for (uint64_t t = 1; t < spec.vocab; ++t) vocab["tok" + std::to_string(t)] = t;
  Json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = Json::array();
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {{"type", "Whitespace"}};
  doc["post_processor"] = nullptr;
  doc["decoder"] = nullptr;
  doc["model"] = {{"type", "WordLevel"}, {"vocab", std::move(vocab)}, {"unk_token", "<unk>"}};
  return doc.dump(2) + "\n";
}

namespace {

// The small files that go with the shards.
std::map<std::string, std::string> SideFiles(const ModelSpec& spec, const WriteOptions& options,
                                             const CheckpointPlan& plan) {
  std::map<std::string, std::string> files;
  if (options.write_index && plan.shards.size() > 1) files["model.safetensors.index.json"] = IndexJson(plan);
  if (options.write_extra_files) {
    files["config.json"] = ConfigJson(spec);
    files["generation_config.json"] = GenerationConfigJson(spec);
    files["tokenizer.json"] = TokenizerJson(spec);
  }
  return files;
}

}  // namespace

StatusOr<std::map<std::string, std::string>> BuildCheckpointFiles(const ModelSpec& spec,
                                                                  const WriteOptions& options) {
  ASSIGN_OR_RETURN(CheckpointPlan plan, PlanCheckpoint(spec, options));
  std::map<std::string, std::string> files = SideFiles(spec, options, plan);
  for (const ShardPlan& shard : plan.shards) {
    std::string bytes = shard.header;
    bytes.resize(shard.file_size);
    auto data = std::as_writable_bytes(std::span<char>(bytes)).subspan(shard.header.size());
    for (const TensorInfo& t : shard.tensors) {
      FillTensorBytes(t.name, t.dtype, 0, data.subspan(t.begin, t.size()));
    }
    files[shard.file_name] = std::move(bytes);
  }
  return files;
}

StatusOr<CheckpointPlan> PutCheckpoint(MemoryStore& store, std::string_view prefix,
                                       const ModelSpec& spec, const WriteOptions& options) {
  ASSIGN_OR_RETURN(CheckpointPlan plan, PlanCheckpoint(spec, options));
  ASSIGN_OR_RETURN(auto files, BuildCheckpointFiles(spec, options));
  for (auto& [name, bytes] : files) store.Put(std::string(prefix) + name, std::move(bytes));
  return plan;
}

StatusOr<WrittenCheckpoint> WriteCheckpoint(const ModelSpec& spec, const WriteOptions& options) {
  ASSIGN_OR_RETURN(CheckpointPlan plan, PlanCheckpoint(spec, options));
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return InternalError("cannot create " + options.dir.string() + ": " + ec.message());

  WrittenCheckpoint written;
  for (const ShardPlan& shard : plan.shards) {
    const std::filesystem::path path = options.dir / shard.file_name;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(shard.header.data(), static_cast<std::streamsize>(shard.header.size()));
    std::vector<std::byte> chunk(4 << 20);
    for (const TensorInfo& t : shard.tensors) {
      for (uint64_t off = 0; off < t.size(); off += chunk.size()) {
        const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk.size(), t.size() - off));
        FillTensorBytes(t.name, t.dtype, off, std::span<std::byte>(chunk).first(len));
        f.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(len));
      }
    }
    f.close();
    if (!f) return InternalError("cannot write " + path.string());
    written.files.emplace_back(path, shard.file_size);
  }
  for (const auto& [name, bytes] : SideFiles(spec, options, plan)) {
    RETURN_IF_ERROR(WriteFile(options.dir / name, bytes));
    written.files.emplace_back(options.dir / name, bytes.size());
  }
  written.plan = std::move(plan);
  return written;
}

std::string BuildSafetensorsFile(const std::vector<RawTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  std::vector<TensorInfo> infos;
  std::string data;
  for (const RawTensor& t : tensors) {
    std::string bytes;
    if (t.bytes) {
      bytes = *t.bytes;
    } else {
      std::optional<uint64_t> size = TensorByteSize(t.dtype, t.shape);
      TENSORFS_CHECK(size.has_value());
      bytes = ExpectedTensorBytes(t.name, t.dtype, *size);
    }
    infos.push_back(TensorInfo{.name = t.name, .dtype = t.dtype, .shape = t.shape,
                               .begin = data.size(), .end = data.size() + bytes.size()});
    data += bytes;
  }
  return SerializeHeader(infos, metadata) + data;
}

std::string FileWithHeaderJson(std::string_view json, uint64_t data_bytes) {
  std::string out(kHeaderLengthBytes, '\0');
  const uint64_t n = json.size();
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += json;
  out.append(data_bytes, '\0');
  return out;
}

}  // namespace tensorfs::testing
