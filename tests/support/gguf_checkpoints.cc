#include "tests/support/gguf_checkpoints.h"

#include <algorithm>
#include <set>

namespace tensorfs::testing {
namespace {

using Json = nlohmann::json;

bool IsArch(const GgufSpec& spec, std::string_view hf) { return spec.architecture == hf; }

std::string ModelType(const GgufSpec& spec) {
  if (IsArch(spec, "MistralForCausalLM")) return "mistral";
  if (IsArch(spec, "Qwen2ForCausalLM")) return "qwen2";
  if (IsArch(spec, "Qwen3ForCausalLM")) return "qwen3";
  if (IsArch(spec, "Phi3ForCausalLM")) return "phi3";
  return "llama";
}

// GPT-2's bytes_to_unicode: the symbol byte-level BPE writes for each byte.
std::vector<std::string> ByteSymbols() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  }
  std::vector<std::string> symbol(256);
  for (size_t i = 0; i < bs.size(); ++i) {
    const int c = cs[i];
    std::string utf8;
    if (c < 0x80) {
      utf8 += static_cast<char>(c);
    } else {
      utf8 += static_cast<char>(0xC0 | (c >> 6));
      utf8 += static_cast<char>(0x80 | (c & 0x3F));
    }
    symbol[bs[i]] = utf8;
  }
  return symbol;
}

constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

std::vector<TensorSpec> GgufSpecTensors(const GgufSpec& spec) {
  const Dtype d = spec.dtype;
  const uint64_t h = spec.hidden;
  const uint64_t q = spec.heads * spec.head_size();
  const uint64_t kv = spec.kv_heads * spec.head_size();
  const bool qwen2 = IsArch(spec, "Qwen2ForCausalLM");
  const bool qwen3 = IsArch(spec, "Qwen3ForCausalLM");
  const bool phi3 = IsArch(spec, "Phi3ForCausalLM");
  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", d, {spec.vocab(), h}});
  for (uint64_t i = 0; i < spec.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", d, {h}});
    if (phi3) {
      t.push_back({p + "self_attn.qkv_proj.weight", d, {q + 2 * kv, h}});
    } else {
      t.push_back({p + "self_attn.q_proj.weight", d, {q, h}});
      t.push_back({p + "self_attn.k_proj.weight", d, {kv, h}});
      t.push_back({p + "self_attn.v_proj.weight", d, {kv, h}});
      if (qwen2) {
        t.push_back({p + "self_attn.q_proj.bias", d, {q}});
        t.push_back({p + "self_attn.k_proj.bias", d, {kv}});
        t.push_back({p + "self_attn.v_proj.bias", d, {kv}});
      }
      if (qwen3) {
        t.push_back({p + "self_attn.q_norm.weight", d, {spec.head_size()}});
        t.push_back({p + "self_attn.k_norm.weight", d, {spec.head_size()}});
      }
    }
    t.push_back({p + "self_attn.o_proj.weight", d, {h, q}});
    t.push_back({p + "post_attention_layernorm.weight", d, {h}});
    if (phi3) {
      t.push_back({p + "mlp.gate_up_proj.weight", d, {2 * spec.intermediate, h}});
    } else {
      t.push_back({p + "mlp.gate_proj.weight", d, {spec.intermediate, h}});
      t.push_back({p + "mlp.up_proj.weight", d, {spec.intermediate, h}});
    }
    t.push_back({p + "mlp.down_proj.weight", d, {h, spec.intermediate}});
  }
  t.push_back({"model.norm.weight", d, {h}});
  if (!spec.tied) t.push_back({"lm_head.weight", d, {spec.vocab(), h}});
  return t;
}

Json GgufConfig(const GgufSpec& spec) {
  Json c;
  c["architectures"] = {spec.architecture};
  c["model_type"] = ModelType(spec);
  c["hidden_size"] = spec.hidden;
  c["intermediate_size"] = spec.intermediate;
  c["num_hidden_layers"] = spec.layers;
  c["num_attention_heads"] = spec.heads;
  c["num_key_value_heads"] = spec.kv_heads;
  if (spec.head_dim != 0 || IsArch(spec, "Qwen3ForCausalLM")) c["head_dim"] = spec.head_size();
  c["max_position_embeddings"] = 4096;
  c["rms_norm_eps"] = 1e-5;
  c["rope_theta"] = 500000.0;
  c["vocab_size"] = spec.vocab();
  c["tie_word_embeddings"] = spec.tied;
  c["bos_token_id"] = spec.vocab() - 2;
  c["eos_token_id"] = spec.vocab() - 1;
  c["torch_dtype"] = spec.dtype == Dtype::BF16 ? "bfloat16" : spec.dtype == Dtype::F16 ? "float16" : "float32";
  if (IsArch(spec, "Phi3ForCausalLM")) {
    c["original_max_position_embeddings"] = 4096;
    c["sliding_window"] = 2047;
  }
  c.merge_patch(spec.config_patch);
  return c;
}

std::string GgufTokenizerJson(const GgufSpec& spec) {
  const std::vector<std::string> symbol = ByteSymbols();
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[symbol[b]] = b;
  Json merges = Json::array();
  std::set<std::string> made;
  for (uint64_t k = 0; made.size() < spec.merges; ++k) {
    const std::string a = symbol['a' + k % 26];
    const std::string b = symbol['a' + (7 * k + 3) % 26];
    if (!made.insert(a + b).second) continue;
    vocab[a + b] = 256 + made.size() - 1;
    merges.push_back(a + " " + b);
  }
  const bool qwen = ModelType(spec) == "qwen2" || ModelType(spec) == "qwen3";
  Json added = Json::array();
  if (IsArch(spec, "Phi3ForCausalLM")) {
    uint64_t id = 256 + spec.merges;
    for (const char* content : {"<unk>", "<s>", "</s>", "<|endoftext|>"}) {
      added.push_back({{"id", id++}, {"content", content}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
  }
  for (const auto& [offset, content] : {std::pair<uint64_t, std::string>{2, "<|begin_of_text|>"}, {1, "<|end_of_text|>"}}) {
    added.push_back({{"id", spec.vocab() - offset}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  Json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = added;
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", qwen ? kQwen2Split : kLlama3Split}}}, {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  doc["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false},
                           {"use_regex", true}};
  doc["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  doc["model"] = {{"type", "BPE"},          {"dropout", nullptr},
                  {"unk_token", nullptr},   {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                  {"byte_fallback", false}, {"ignore_merges", !qwen},
                  {"vocab", vocab},         {"merges", merges}};
  return doc.dump(2) + "\n";
}

std::string GgufTokenizerConfigJson(const GgufSpec& spec) {
  Json c;
  c["bos_token"] = "<|begin_of_text|>";
  c["eos_token"] = "<|end_of_text|>";
  c["add_bos_token"] = ModelType(spec) != "qwen2" && ModelType(spec) != "qwen3";
  c["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
  c["tokenizer_class"] = IsArch(spec, "Phi3ForCausalLM") ? "GPT2Tokenizer" : "PreTrainedTokenizerFast";
  c["model_max_length"] = 4096;
  return c.dump(2) + "\n";
}

std::map<std::string, std::string> GgufCheckpointFiles(const GgufSpec& spec) {
  std::map<std::string, std::string> files;
  const std::vector<TensorSpec> tensors = GgufSpecTensors(spec);
  const int shards = std::max(1, spec.shards);
  Json weight_map = Json::object();
  uint64_t total = 0;
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    const std::string file = shards == 1 ? "model.safetensors" : name;
    // Forward order cut in equal counts; within a file, sorted by name as the
    // safetensors writer stores them.
    std::vector<RawTensor> raw;
    for (size_t i = s * tensors.size() / shards; i < (s + 1) * tensors.size() / shards; ++i) {
      raw.push_back({.name = tensors[i].name, .dtype = tensors[i].dtype, .shape = tensors[i].shape});
      weight_map[tensors[i].name] = file;
      total += tensors[i].size();
    }
    std::sort(raw.begin(), raw.end(), [](const RawTensor& a, const RawTensor& b) { return a.name < b.name; });
    files[file] = BuildSafetensorsFile(raw, {{"format", "pt"}});
  }
  if (shards > 1) {
    Json index;
    index["metadata"]["total_size"] = total;
    index["weight_map"] = weight_map;
    files["model.safetensors.index.json"] = index.dump(2) + "\n";
  }
  files["config.json"] = GgufConfig(spec).dump(2) + "\n";
  files["tokenizer.json"] = GgufTokenizerJson(spec);
  files["tokenizer_config.json"] = GgufTokenizerConfigJson(spec);
  return files;
}

}  // namespace tensorfs::testing
