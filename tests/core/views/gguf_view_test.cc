// @gguf/ through the Namespace over an in-memory store: which directories have
// it, and, parsed back by a reader of the test's own, each file's header (the
// metadata keys with the value types llama.cpp's loader demands, the tensor
// records: names, shapes and types as the converter and llama-quantize give
// them, dense aligned offsets) and its tensor bytes (the source passed through,
// llama's q/k rows permuted, Q8_0 against a reference of the test's); what a
// checkpoint that cannot be converted gets instead (no @gguf/, the reason);
// sizes known before any tensor data is fetched; a replaced shard.
#include "core/views/gguf_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <tuple>
#include <variant>

#include "core/gguf/ggml_quants.h"
#include "core/views/quantize.h"
#include "core/vfs/namespace.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/controlled_store.h"
#include "tests/support/gguf_checkpoints.h"
#include "tests/support/manual_clock.h"
#include "tests/support/memory_store.h"
#include "tests/support/test_util.h"

namespace tensorfs {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::GgufSpec;

// ---- A GGUF reader written from the format description (not the writer's code).

enum ValueType : uint32_t { kU8, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };

struct Value {
  uint32_t type = 0;
  uint32_t element_type = 0;  // kArray
  uint64_t count = 0;         // kArray
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<std::string> strings;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

struct TensorRecord {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;  // in the data section
};

struct Parsed {
  uint32_t version = 0;
  std::map<std::string, Value> kv;
  std::vector<std::string> keys;  // in order
  std::vector<TensorRecord> tensors;
  uint64_t data_start = 0;
};

class Cursor {
 public:
  explicit Cursor(const std::string& bytes) : b_(bytes) {}
  template <typename T>
  T Get() {
    EXPECT_LE(at_ + sizeof(T), b_.size()) << "header runs past the file";
    T v{};
    if (at_ + sizeof(T) <= b_.size()) std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string String() {
    const uint64_t n = Get<uint64_t>();
    EXPECT_LE(at_ + n, b_.size());
    std::string s = b_.substr(at_, n);
    at_ += n;
    return s;
  }
  uint64_t at() const { return at_; }

 private:
  const std::string& b_;
  uint64_t at_ = 0;
};

// The value of `key`; a failure when the file lacks it.
const Value& At(const Parsed& p, const std::string& key) {
  static const Value kNone;
  auto it = p.kv.find(key);
  if (it == p.kv.end()) {
    ADD_FAILURE() << "no key " << key;
    return kNone;
  }
  return it->second;
}

uint64_t ScalarSize(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    default: return 8;
  }
}

void ReadScalar(Cursor& c, uint32_t type, Value& v) {
  switch (type) {
    case kU8: v.u = c.Get<uint8_t>(); break;
    case kBool: v.u = c.Get<uint8_t>(); break;
    case kU32: v.u = c.Get<uint32_t>(); break;
    case kI32: v.i = c.Get<int32_t>(); break;
    case kF32: v.f = c.Get<float>(); break;
    case kU64: v.u = c.Get<uint64_t>(); break;
    default: for (uint64_t k = 0; k < ScalarSize(type); ++k) c.Get<uint8_t>();
  }
}

Parsed ParseGguf(const std::string& bytes) {
  Parsed p;
  Cursor c(bytes);
  EXPECT_EQ(bytes.substr(0, 4), "GGUF");
  c.Get<uint32_t>();
  p.version = c.Get<uint32_t>();
  const uint64_t n_tensors = c.Get<uint64_t>();
  const uint64_t n_kv = c.Get<uint64_t>();
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string key = c.String();
    Value v;
    v.type = c.Get<uint32_t>();
    if (v.type == kString) {
      v.s = c.String();
    } else if (v.type == kArray) {
      v.element_type = c.Get<uint32_t>();
      v.count = c.Get<uint64_t>();
      for (uint64_t e = 0; e < v.count; ++e) {
        if (v.element_type == kString) {
          v.strings.push_back(c.String());
        } else {
          Value one;
          ReadScalar(c, v.element_type, one);
          v.ints.push_back(one.i);
          v.floats.push_back(one.f);
        }
      }
    } else {
      ReadScalar(c, v.type, v);
    }
    EXPECT_FALSE(p.kv.contains(key)) << "duplicate key " << key;
    p.keys.push_back(key);
    p.kv[key] = std::move(v);
  }
  for (uint64_t t = 0; t < n_tensors; ++t) {
    TensorRecord r;
    r.name = c.String();
    const uint32_t n_dims = c.Get<uint32_t>();
    for (uint32_t d = 0; d < n_dims; ++d) r.ne.push_back(c.Get<uint64_t>());
    r.type = c.Get<uint32_t>();
    r.offset = c.Get<uint64_t>();
    p.tensors.push_back(std::move(r));
  }
  p.data_start = (c.at() + 31) / 32 * 32;
  return p;
}

// ggml's block sizes, from ggml-common.h: (elements, bytes).
std::pair<uint64_t, uint64_t> Block(uint32_t type) {
  switch (type) {
    case 0: return {1, 4};      // F32
    case 1: return {1, 2};      // F16
    case 6: return {32, 22};    // Q5_0
    case 7: return {32, 24};    // Q5_1
    case 8: return {32, 34};    // Q8_0
    case 12: return {256, 144}; // Q4_K
    case 13: return {256, 176}; // Q5_K
    case 14: return {256, 210}; // Q6_K
    case 30: return {1, 2};     // BF16
  }
  ADD_FAILURE() << "unexpected ggml type " << type;
  return {1, 1};
}

uint64_t TensorSize(const TensorRecord& t) {
  const auto [elements, bytes] = Block(t.type);
  uint64_t n = t.ne[0] / elements * bytes;
  for (size_t d = 1; d < t.ne.size(); ++d) n *= t.ne[d];
  return n;
}

constexpr uint32_t kF32Type = 0, kQ8_0Type = 8, kQ4_KType = 12, kQ6_KType = 14, kBF16Type = 30;

// ---- The source side, computed here.

std::vector<float> SourceFloats(const std::string& name, Dtype dtype, const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  const std::string bytes = testing::ExpectedTensorBytes(name, dtype, n * DtypeBits(dtype) / 8);
  std::vector<float> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (dtype == Dtype::F32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = dtype == Dtype::BF16 ? quant::Bf16ToFloat(h) : quant::F16ToFloat(h);
    }
  }
  return out;
}

// convert_hf_to_gguf.py's LlamaModel.permute, as numpy does it:
// w.reshape(heads, 2, rows / heads / 2, cols).swapaxes(1, 2).reshape(rows, cols).
std::vector<float> Permuted(const std::vector<float>& w, uint64_t rows, uint64_t cols, uint64_t heads) {
  const uint64_t half = rows / heads / 2;
  std::vector<float> out(w.size());
  uint64_t at = 0;
  for (uint64_t h = 0; h < heads; ++h) {
    for (uint64_t i = 0; i < half; ++i) {
      for (uint64_t j = 0; j < 2; ++j) {  // after swapaxes the axis of 2 is innermost
        const uint64_t src_row = h * 2 * half + j * half + i;
        std::memcpy(&out[at], &w[src_row * cols], cols * sizeof(float));
        at += cols;
      }
    }
  }
  return out;
}

// ggml's quantize_row_q8_0_ref from its description: per 32 values,
// d = max|x| / 127 as an fp16, q = round(x / d) half away from zero.
std::string Q8_0(const std::vector<float>& x) {
  std::string out;
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[b + k]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = Fp32ToFp16(d);
    out.append(reinterpret_cast<const char*>(&dh), 2);
    for (size_t k = 0; k < 32; ++k) out.push_back(static_cast<char>(static_cast<int8_t>(std::round(x[b + k] * id))));
  }
  return out;
}

std::string AsBytes(const std::vector<float>& x) { return std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4); }

std::string AsHalf(const std::vector<float>& x, bool bf16) {
  std::string out;
  for (float v : x) {
    const uint16_t h = bf16 ? Fp32ToBf16(v) : Fp32ToFp16(v);
    out.append(reinterpret_cast<const char*>(&h), 2);
  }
  return out;
}

std::vector<std::string> Names(const std::vector<DirEntry>& entries) {
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  return names;
}

class GgufViewTest : public ::testing::Test {
 protected:
  void Put(const GgufSpec& spec, std::string_view dir = "m/") {
    for (const auto& [name, bytes] : testing::GgufCheckpointFiles(spec)) store_.Put(std::string(dir) + name, bytes);
  }

  void Mount(std::vector<ViewKind> kinds = {ViewKind::kGguf}, Freshness freshness = {}) {
    engine_ = std::make_unique<ReadEngine>(recorded_,
                                           EngineOptions{.chunk_size = 64 << 10, .cache_size = 64 << 20,
                                                         .max_fetches = 4, .prefetch_window = 1 << 20,
                                                         .head_size = 128 << 10},
                                           metrics_);
    ns_ = std::make_unique<Namespace>(
        recorded_, *engine_,
        ViewOptions{.kinds = std::move(kinds),
                    .grouper = std::make_shared<const LayerGrouper>(*LayerGrouper::Create("")),
                    .prefetch_window = 1 << 20,
                    .segment_bytes = 64 << 10},
        freshness);
  }

  StatusOr<NodeId> Path(std::string_view path) {
    NodeId node = kRootNode;
    while (!path.empty()) {
      const size_t slash = path.find('/');
      ASSIGN_OR_RETURN(NodeAttr attr, ns_->Lookup(node, path.substr(0, slash)));
      node = attr.id;
      path = slash == std::string_view::npos ? "" : path.substr(slash + 1);
    }
    return node;
  }

  StatusOr<std::string> ReadAll(std::string_view path) {
    ASSIGN_OR_RETURN(NodeId id, Path(path));
    ASSIGN_OR_RETURN(NodeAttr attr, ns_->GetAttr(id));
    std::string out;
    for (uint64_t off = 0; off < attr.size; off += 128 << 10) {
      std::promise<StatusOr<ReadResult>> result;
      ns_->Read(id, off, 128 << 10, [&](StatusOr<ReadResult> r) { result.set_value(std::move(r)); });
      ASSIGN_OR_RETURN(ReadResult r, result.get_future().get());
      for (auto p : r.pieces) out.append(reinterpret_cast<const char*>(p.data()), p.size());
    }
    if (out.size() != attr.size) return InternalError("read " + std::to_string(out.size()) + " bytes");
    return out;
  }

  std::vector<std::string> List(std::string_view path) {
    StatusOr<NodeId> id = Path(path);
    if (!id.ok()) return {"<" + id.status().message() + ">"};
    StatusOr<Namespace::Directory> dir = ns_->ReadDir(*id);
    if (!dir.ok()) return {"<" + dir.status().message() + ">"};
    return Names(dir->entries);
  }

  // The tensor `name` of a parsed file, and its bytes.
  static const TensorRecord* Find(const Parsed& p, std::string_view name) {
    for (const TensorRecord& t : p.tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  static std::string TensorBytes(const std::string& file, const Parsed& p, std::string_view name) {
    const TensorRecord* t = Find(p, name);
    if (t == nullptr) return "";
    return file.substr(p.data_start + t->offset, TensorSize(*t));
  }

  testing::MemoryStore store_;
  testing::ControlledStore recorded_{store_, /*hold=*/false};
  Metrics metrics_;
  std::unique_ptr<ReadEngine> engine_;
  std::unique_ptr<Namespace> ns_;
};

// Each tensor's GGUF type, from the rules of the converter (F16/BF16, Q8_0)
// and llama-quantize (Q4_K_M), written out here for the test's model: every
// row length is 256 or 512, so nothing falls back.
uint32_t ExpectedType(const std::string& name, const std::vector<uint64_t>& ne, const std::string& file,
                      uint32_t float_type, uint64_t layers) {
  if (ne.size() == 1) return kF32Type;
  if (file == "F16" || file == "BF16") return float_type;
  if (file == "Q8_0") return kQ8_0Type;
  if (name == "output.weight") return kQ6_KType;
  if (name.ends_with("attn_v.weight") || name.ends_with("attn_qkv.weight") || name.ends_with("ffn_down.weight")) {
    const uint64_t layer = std::stoull(name.substr(4));
    const bool more_bits = layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
    return more_bits ? kQ6_KType : kQ4_KType;
  }
  return kQ4_KType;
}

TEST(GgufViewOptionTest, GgufIsAViewOfTheList) {
  StatusOr<std::vector<ViewKind>> views = ParseViewList("gguf");
  ASSERT_TRUE(views.ok()) << views.status().message();
  EXPECT_THAT(*views, ElementsAre(ViewKind::kGguf));
  EXPECT_EQ(ViewDirName(ViewKind::kGguf), "@gguf");
  EXPECT_THAT(*ParseViewList("all"), Contains(ViewKind::kGguf));
  EXPECT_EQ(GgufNameOfSource("gs://bucket/models/Qwen3-8B/"), "Qwen3-8B");
  EXPECT_EQ(GgufNameOfSource("/data/llama"), "llama");
}

TEST_F(GgufViewTest, LlamaHasThreeFilesNamedAfterItsDirectory) {
  Put({.dtype = Dtype::BF16}, "models/tiny-llama/");
  Mount();
  EXPECT_THAT(List("models/tiny-llama"), Contains("@gguf"));
  EXPECT_THAT(List("models/tiny-llama/@gguf"),
              ElementsAre("tiny-llama-BF16.gguf", "tiny-llama-Q4_K_M.gguf", "tiny-llama-Q8_0.gguf"));
}

TEST_F(GgufViewTest, F16WeightsGiveAnF16File) {
  Put({.dtype = Dtype::F16});
  Mount();
  EXPECT_THAT(List("m/@gguf"), ElementsAre("m-F16.gguf", "m-Q4_K_M.gguf", "m-Q8_0.gguf"));
}

TEST_F(GgufViewTest, SizesAreKnownBeforeAnyTensorDataIsFetched) {
  const GgufSpec spec{.dtype = Dtype::BF16, .shards = 2};
  Put(spec);
  Mount();
  StatusOr<NodeId> dir = Path("m/@gguf");
  ASSERT_TRUE(dir.ok()) << dir.status().message();
  StatusOr<Namespace::Directory> entries = ns_->ReadDir(*dir);
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->entries.size(), 3u);
  // The heads of the two shards, config.json and the tokenizer files.
  uint64_t side = 0;
  for (const auto& [name, bytes] : testing::GgufCheckpointFiles(spec)) {
    if (!name.ends_with(".safetensors")) side += bytes.size();
  }
  EXPECT_LE(metrics_.bytes_fetched.load(), 2u * (128u << 10) + side + 4096);
  for (const DirEntry& e : entries->entries) {
    StatusOr<std::string> bytes = ReadAll("m/@gguf/" + e.name);
    ASSERT_TRUE(bytes.ok()) << e.name << ": " << bytes.status().message();
    EXPECT_EQ(bytes->size(), e.attr.size);
    const Parsed p = ParseGguf(*bytes);
    uint64_t end = p.data_start;
    for (const TensorRecord& t : p.tensors) end = p.data_start + (t.offset + TensorSize(t) + 31) / 32 * 32;
    EXPECT_EQ(e.attr.size, end) << e.name;
  }
}

// The metadata keys and tensors of every architecture, as llama.cpp's loader
// reads them: every tensor it creates and no other, of its shape.
struct ArchCase {
  std::string architecture;
  std::string arch;
  uint64_t kv_heads;
  uint64_t head_dim;
  std::vector<std::string> block_tensors;  // of blk.N.
};

class GgufArchTest : public GgufViewTest, public ::testing::WithParamInterface<ArchCase> {};

TEST_P(GgufArchTest, HeaderHoldsTheLoadersKeysAndTensors) {
  const ArchCase& c = GetParam();
  const GgufSpec spec{.architecture = c.architecture, .kv_heads = c.kv_heads, .head_dim = c.head_dim,
                      .dtype = Dtype::BF16};
  Put(spec);
  Mount();
  for (const std::string file : {"BF16", "Q8_0", "Q4_K_M"}) {
    StatusOr<std::string> bytes = ReadAll("m/@gguf/m-" + file + ".gguf");
    ASSERT_TRUE(bytes.ok()) << file << ": " << bytes.status().message();
    const Parsed p = ParseGguf(*bytes);
    EXPECT_EQ(p.version, 3u);
    const std::string& a = c.arch;
    auto u32 = [&](const std::string& key) -> std::optional<uint64_t> {
      auto it = p.kv.find(key);
      if (it == p.kv.end()) return std::nullopt;
      EXPECT_EQ(it->second.type, kU32) << key;
      return it->second.u;
    };
    auto f32 = [&](const std::string& key) -> std::optional<double> {
      auto it = p.kv.find(key);
      if (it == p.kv.end()) return std::nullopt;
      EXPECT_EQ(it->second.type, kF32) << key;
      return it->second.f;
    };
    EXPECT_EQ(At(p, "general.architecture").s, a);
    EXPECT_EQ(At(p, "general.name").s, "m");
    EXPECT_EQ(u32("general.file_type"), file == "BF16" ? 32u : file == "Q8_0" ? 7u : 15u);
    EXPECT_EQ(u32("general.quantization_version"), 2u);
    EXPECT_EQ(u32(a + ".block_count"), spec.layers);
    EXPECT_EQ(u32(a + ".context_length"), 4096u);
    EXPECT_EQ(u32(a + ".embedding_length"), spec.hidden);
    EXPECT_EQ(u32(a + ".feed_forward_length"), spec.intermediate);
    EXPECT_EQ(u32(a + ".attention.head_count"), spec.heads);
    EXPECT_EQ(u32(a + ".attention.head_count_kv"), spec.kv_heads);
    EXPECT_FLOAT_EQ(*f32(a + ".attention.layer_norm_rms_epsilon"), 1e-5f);
    EXPECT_FLOAT_EQ(*f32(a + ".rope.freq_base"), 500000.0f);
    if (a == "llama") {
      EXPECT_EQ(u32(a + ".rope.dimension_count"), spec.head_size());
      EXPECT_EQ(u32(a + ".vocab_size"), spec.vocab());
    }
    if (a == "qwen3" || a == "llama") {
      EXPECT_EQ(u32(a + ".attention.key_length"), spec.head_size());
    }
    if (a == "phi3") {
      EXPECT_EQ(u32(a + ".rope.dimension_count"), spec.hidden / spec.heads);
      EXPECT_EQ(u32(a + ".attention.sliding_window"), 2047u);
      EXPECT_EQ(u32(a + ".rope.scaling.original_context_length"), 4096u);
    }
    // The tokenizer, as gguf-core converts it: the array types the loader takes.
    const Value& tokens = At(p, "tokenizer.ggml.tokens");
    EXPECT_EQ(tokens.type, kArray);
    EXPECT_EQ(tokens.element_type, kString);
    EXPECT_EQ(tokens.count, spec.vocab());
    EXPECT_EQ(At(p, "tokenizer.ggml.token_type").element_type, kI32);
    EXPECT_EQ(At(p, "tokenizer.ggml.model").s, "gpt2");
    EXPECT_EQ(At(p, "tokenizer.ggml.pre").s, a == "qwen2" || a == "qwen3" ? "qwen2" : "llama-bpe");
    EXPECT_EQ(u32("tokenizer.ggml.bos_token_id"), spec.vocab() - 2);

    // Tensors: exactly the loader's, in the source's storage order.
    std::vector<std::string> want = {"token_embd.weight", "output_norm.weight", "output.weight"};
    for (uint64_t i = 0; i < spec.layers; ++i) {
      for (const std::string& t : c.block_tensors) want.push_back("blk." + std::to_string(i) + "." + t);
    }
    std::vector<std::string> got;
    for (const TensorRecord& t : p.tensors) got.push_back(t.name);
    EXPECT_THAT(got, ::testing::UnorderedElementsAreArray(want)) << file;
    uint64_t offset = 0;
    const uint64_t hd = spec.head_size();
    const uint64_t q_rows = a == "qwen2" || a == "phi3" ? spec.hidden : spec.heads * hd;
    for (const TensorRecord& t : p.tensors) {
      EXPECT_EQ(t.offset, offset) << t.name;
      offset = (offset + TensorSize(t) + 31) / 32 * 32;
      EXPECT_EQ(t.type, ExpectedType(t.name, t.ne, file, kBF16Type, spec.layers)) << file << " " << t.name;
      std::vector<uint64_t> ne;
      if (t.name == "token_embd.weight" || t.name == "output.weight") ne = {spec.hidden, spec.vocab()};
      if (t.name.ends_with("norm.weight")) ne = {t.name.find("_q_norm") != std::string::npos ||
                                                         t.name.find("_k_norm") != std::string::npos
                                                     ? hd
                                                     : spec.hidden};
      if (t.name.ends_with("attn_q.weight")) ne = {spec.hidden, q_rows};
      if (t.name.ends_with("attn_k.weight") || t.name.ends_with("attn_v.weight")) ne = {spec.hidden, c.kv_heads * hd};
      if (t.name.ends_with("attn_q.bias")) ne = {q_rows};
      if (t.name.ends_with("attn_k.bias") || t.name.ends_with("attn_v.bias")) ne = {c.kv_heads * hd};
      if (t.name.ends_with("attn_output.weight")) ne = {q_rows, spec.hidden};
      if (t.name.ends_with("attn_qkv.weight")) ne = {spec.hidden, spec.hidden + 2 * c.kv_heads * hd};
      if (t.name.ends_with("ffn_gate.weight")) ne = {spec.hidden, spec.intermediate};
      if (t.name.ends_with("ffn_up.weight")) ne = {spec.hidden, (a == "phi3" ? 2 : 1) * spec.intermediate};
      if (t.name.ends_with("ffn_down.weight")) ne = {spec.intermediate, spec.hidden};
      EXPECT_EQ(t.ne, ne) << t.name;
    }
  }
}

const std::vector<std::string> kLlamaBlock = {"attn_norm.weight", "attn_q.weight",      "attn_k.weight",
                                              "attn_v.weight",    "attn_output.weight", "ffn_norm.weight",
                                              "ffn_gate.weight",  "ffn_up.weight",      "ffn_down.weight"};

std::vector<std::string> With(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, GgufArchTest,
    ::testing::Values(
        ArchCase{"LlamaForCausalLM", "llama", 2, 0, kLlamaBlock},
        ArchCase{"MistralForCausalLM", "llama", 2, 0, kLlamaBlock},
        ArchCase{"Qwen2ForCausalLM", "qwen2", 2, 0,
                 With(kLlamaBlock, {"attn_q.bias", "attn_k.bias", "attn_v.bias"})},
        ArchCase{"Qwen3ForCausalLM", "qwen3", 2, 128, With(kLlamaBlock, {"attn_q_norm.weight", "attn_k_norm.weight"})},
        ArchCase{"Phi3ForCausalLM", "phi3", 4, 0,
                 {"attn_norm.weight", "attn_qkv.weight", "attn_output.weight", "ffn_norm.weight", "ffn_up.weight",
                  "ffn_down.weight"}}),
    [](const ::testing::TestParamInfo<ArchCase>& info) { return info.param.architecture; });

TEST_F(GgufViewTest, TiedEmbeddingsHaveNoOutputTensor) {
  Put({.tied = true});
  Mount();
  StatusOr<std::string> bytes = ReadAll("m/@gguf/m-Q4_K_M.gguf");
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  const Parsed p = ParseGguf(*bytes);
  EXPECT_EQ(Find(p, "output.weight"), nullptr);
  ASSERT_NE(Find(p, "token_embd.weight"), nullptr);
  // llama-quantize gives the tied embedding the output's Q6_K.
  EXPECT_EQ(Find(p, "token_embd.weight")->type, kQ6_KType);
}

// The tensors' bytes: norms passed through as F32, llama's q/k rows permuted
// as the converter permutes them, Q8_0 as ggml's reference quantizes.
TEST_F(GgufViewTest, TensorBytesAreTheConvertersForF32F16AndQ8_0) {
  const GgufSpec spec{.dtype = Dtype::F16};
  Put(spec);
  Mount();
  StatusOr<std::string> f16 = ReadAll("m/@gguf/m-F16.gguf");
  StatusOr<std::string> q8 = ReadAll("m/@gguf/m-Q8_0.gguf");
  ASSERT_TRUE(f16.ok() && q8.ok());
  const Parsed pf = ParseGguf(*f16);
  const Parsed pq = ParseGguf(*q8);
  const uint64_t h = spec.hidden;
  const uint64_t kv = spec.kv_heads * spec.head_size();
  struct Case {
    std::string hf, gguf;
    std::vector<uint64_t> shape;
    uint64_t permute_heads;
  };
  for (const Case& c : std::vector<Case>{{"model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight", {h, h}, 4},
                                         {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", {kv, h}, 2},
                                         {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight", {kv, h}, 0},
                                         {"lm_head.weight", "output.weight", {spec.vocab(), h}, 0}}) {
    std::vector<float> x = SourceFloats(c.hf, Dtype::F16, c.shape);
    if (c.permute_heads != 0) x = Permuted(x, c.shape[0], c.shape[1], c.permute_heads);
    EXPECT_TRUE(TensorBytes(*f16, pf, c.gguf) == AsHalf(x, /*bf16=*/false)) << c.gguf;
    EXPECT_TRUE(TensorBytes(*q8, pq, c.gguf) == Q8_0(x)) << c.gguf;
  }
  const std::vector<float> norm = SourceFloats("model.layers.1.input_layernorm.weight", Dtype::F16, {h});
  EXPECT_TRUE(TensorBytes(*q8, pq, "blk.1.attn_norm.weight") == AsBytes(norm));
  // Padding between tensors is zeros.
  const TensorRecord* first = &pq.tensors[0];
  const std::string gap = q8->substr(pq.data_start + first->offset + TensorSize(*first),
                                     pq.tensors[1].offset - first->offset - TensorSize(*first));
  EXPECT_EQ(gap, std::string(gap.size(), '\0'));
}

// llama-quantize makes Q4_K_M from the converter's F16 file: an f32
// checkpoint's weights are rounded to F16 before they are quantized, and
// llama's q rows are permuted first.
TEST_F(GgufViewTest, Q4_K_MQuantizesWhatTheF16FileHolds) {
  const GgufSpec spec{.dtype = Dtype::F32};
  Put(spec);
  Mount();
  StatusOr<std::string> bytes = ReadAll("m/@gguf/m-Q4_K_M.gguf");
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  const Parsed p = ParseGguf(*bytes);
  const uint64_t h = spec.hidden;
  for (const auto& [hf, gguf, heads] : std::vector<std::tuple<std::string, std::string, uint64_t>>{
           {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", spec.heads},
           {"model.layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight", 0}}) {
    const std::vector<uint64_t> shape = hf.find("q_proj") != std::string::npos ? std::vector<uint64_t>{h, h}
                                                                                : std::vector<uint64_t>{spec.intermediate, h};
    std::vector<float> x = SourceFloats(hf, Dtype::F32, shape);
    if (heads != 0) x = Permuted(x, shape[0], shape[1], heads);
    for (float& v : x) v = Fp16ToFp32(Fp32ToFp16(v));
    std::string want(x.size() / 256 * 144, '\0');
    QuantizeBlocks(GgmlType::kQ4_K, x, std::as_writable_bytes(std::span<char>(want)));
    ASSERT_NE(Find(p, gguf), nullptr) << gguf;
    EXPECT_EQ(Find(p, gguf)->type, kQ4_KType);
    EXPECT_TRUE(TensorBytes(*bytes, p, gguf) == want) << gguf;
  }
}

TEST_F(GgufViewTest, BiasesOfLlamasQAndKArePermutedToo) {
  const GgufSpec spec{.dtype = Dtype::BF16, .config_patch = {{"attention_bias", true}}};
  // A Llama with attention biases: the generator writes none, so add them.
  std::map<std::string, std::string> files = testing::GgufCheckpointFiles(spec);
  std::vector<testing::RawTensor> raw;
  for (const testing::TensorSpec& t : testing::GgufSpecTensors(spec)) raw.push_back({.name = t.name, .dtype = t.dtype, .shape = t.shape});
  raw.push_back({.name = "model.layers.0.self_attn.q_proj.bias", .dtype = Dtype::BF16, .shape = {spec.hidden}});
  files["model.safetensors"] = testing::BuildSafetensorsFile(raw, {{"format", "pt"}});
  for (const auto& [name, bytes] : files) store_.Put("m/" + name, bytes);
  Mount();
  StatusOr<std::string> bytes = ReadAll("m/@gguf/m-BF16.gguf");
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  const Parsed p = ParseGguf(*bytes);
  std::vector<float> b = SourceFloats("model.layers.0.self_attn.q_proj.bias", Dtype::BF16, {spec.hidden});
  const std::string want = AsBytes(Permuted(b, spec.hidden, 1, spec.heads));
  EXPECT_TRUE(TensorBytes(*bytes, p, "blk.0.attn_q.bias") == want);
}

TEST_F(GgufViewTest, Llama31RopeScalingGivesRopeFreqs) {
  Put({.config_patch = {{"rope_scaling",
                         {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}}}});
  Mount();
  StatusOr<std::string> bytes = ReadAll("m/@gguf/m-Q8_0.gguf");
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  const Parsed p = ParseGguf(*bytes);
  const TensorRecord* freqs = Find(p, "rope_freqs.weight");
  ASSERT_NE(freqs, nullptr);
  EXPECT_EQ(freqs->type, kF32Type);
  ASSERT_EQ(freqs->ne, std::vector<uint64_t>{32});  // head_dim 64 / 2
  EXPECT_FALSE(p.kv.contains("llama.rope.scaling.type"));
  // The factors: 1 for short wavelengths, 8 for long, smoothed between.
  const std::string raw = TensorBytes(*bytes, p, "rope_freqs.weight");
  std::vector<float> f(32);
  std::memcpy(f.data(), raw.data(), 128);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[31], 8.0f);
  for (int i = 0; i < 32; ++i) {
    const double freq = 1.0 / std::pow(500000.0, 2.0 * i / 64);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen > 2048 && wavelen < 8192) {
      const double smooth = (8192 / wavelen - 1) / 3;
      EXPECT_NEAR(f[i], 1 / ((1 - smooth) / 8 + smooth), 1e-5) << i;
    }
  }
}

TEST_F(GgufViewTest, LinearAndYarnRopeScalingWriteTheirKeys) {
  Put({.config_patch = {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}}, "lin/");
  Put({.architecture = "Qwen2ForCausalLM",
       .config_patch = {{"rope_scaling",
                         {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}}},
      "yarn/");
  Mount();
  StatusOr<std::string> lin = ReadAll("lin/@gguf/lin-BF16.gguf");
  StatusOr<std::string> yarn = ReadAll("yarn/@gguf/yarn-BF16.gguf");
  ASSERT_TRUE(lin.ok() && yarn.ok());
  Parsed pl = ParseGguf(*lin);
  Parsed py = ParseGguf(*yarn);
  EXPECT_EQ(At(pl, "llama.rope.scaling.type").s, "linear");
  EXPECT_EQ(At(pl, "llama.rope.scaling.factor").type, kF32);
  EXPECT_FLOAT_EQ(At(pl, "llama.rope.scaling.factor").f, 2.0f);
  EXPECT_EQ(At(py, "qwen2.rope.scaling.type").s, "yarn");
  EXPECT_FLOAT_EQ(At(py, "qwen2.rope.scaling.factor").f, 4.0f);
  EXPECT_EQ(At(py, "qwen2.rope.scaling.original_context_length").type, kU32);
  EXPECT_EQ(At(py, "qwen2.rope.scaling.original_context_length").u, 32768u);
}

TEST_F(GgufViewTest, Phi3LongropeFactorsBecomeTensors) {
  const GgufSpec spec{.architecture = "Phi3ForCausalLM", .kv_heads = 4};
  std::vector<double> longf, shortf;
  for (int i = 0; i < 32; ++i) {
    longf.push_back(1.0 + i * 0.25);
    shortf.push_back(1.0 + i * 0.01);
  }
  GgufSpec with = spec;
  with.config_patch = {{"max_position_embeddings", 131072},
                       {"rope_scaling", {{"type", "longrope"}, {"long_factor", longf}, {"short_factor", shortf}}}};
  Put(with);
  Mount();
  StatusOr<std::string> bytes = ReadAll("m/@gguf/m-BF16.gguf");
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  Parsed p = ParseGguf(*bytes);
  const std::string raw = TensorBytes(*bytes, p, "rope_factors_long.weight");
  ASSERT_EQ(raw.size(), 128u);
  float first;
  std::memcpy(&first, raw.data() + 4 * 5, 4);
  EXPECT_EQ(first, 2.25f);
  ASSERT_NE(Find(p, "rope_factors_short.weight"), nullptr);
  EXPECT_EQ(At(p, "phi3.rope.scaling.attn_factor").type, kF32);
  EXPECT_NEAR(At(p, "phi3.rope.scaling.attn_factor").f, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-6);
}

// ---- What cannot be converted: no @gguf/, the reason in inspect, the rest
// of the mount unaffected.

struct Refusal {
  std::string name;
  std::function<void(std::map<std::string, std::string>&)> damage;  // of the good checkpoint's files
  std::string reason;  // a part of the one line inspect prints
};

class GgufRefusalTest : public GgufViewTest, public ::testing::WithParamInterface<Refusal> {};

TEST_P(GgufRefusalTest, NoGgufViewAndInspectSaysWhy) {
  const Refusal& r = GetParam();
  std::map<std::string, std::string> files = testing::GgufCheckpointFiles({});
  r.damage(files);
  for (const auto& [name, bytes] : files) store_.Put("m/" + name, bytes);
  Put({}, "good/");
  Mount({ViewKind::kGguf, ViewKind::kTensors});
  EXPECT_THAT(List("m"), Not(Contains("@gguf")));
  EXPECT_THAT(List("m"), Contains("@tensors"));
  EXPECT_THAT(List("good"), Contains("@gguf"));
  StatusOr<std::string> tensor = ReadAll("m/@tensors/model.norm.weight.safetensors");
  EXPECT_TRUE(tensor.ok()) << tensor.status().message();
  const std::string why = DescribeGgufOf(store_, "m/", "m");
  EXPECT_THAT(why, ::testing::StartsWith("none: "));
  EXPECT_THAT(why, HasSubstr(r.reason));
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_THAT(DescribeGgufOf(store_, "good/", "good"), HasSubstr("good-BF16.gguf, good-Q8_0.gguf, good-Q4_K_M.gguf"));
}

nlohmann::json Config(const std::map<std::string, std::string>& files) { return nlohmann::json::parse(files.at("config.json")); }

INSTANTIATE_TEST_SUITE_P(
    BadInput, GgufRefusalTest,
    ::testing::Values(
        Refusal{"ConfigWithoutHeadCount",
                [](std::map<std::string, std::string>& f) {
                  auto c = Config(f);
                  c.erase("num_attention_heads");
                  f["config.json"] = c.dump();
                },
                "num_attention_heads"},
        Refusal{"UnknownRopeScaling",
                [](std::map<std::string, std::string>& f) {
                  auto c = Config(f);
                  c["rope_scaling"] = {{"rope_type", "tidal"}, {"factor", 2.0}};
                  f["config.json"] = c.dump();
                },
                "\"tidal\""},
        Refusal{"DynamicRopeScaling",
                [](std::map<std::string, std::string>& f) {
                  auto c = Config(f);
                  c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
                  f["config.json"] = c.dump();
                },
                "dynamic"},
        Refusal{"UnsupportedArchitecture",
                [](std::map<std::string, std::string>& f) {
                  auto c = Config(f);
                  c["architectures"] = {"GPTNeoXForCausalLM"};
                  f["config.json"] = c.dump();
                },
                "GPTNeoXForCausalLM"},
        Refusal{"DuplicateTokens",
                [](std::map<std::string, std::string>& f) {
                  auto t = nlohmann::json::parse(f["tokenizer.json"]);
                  // An added token whose text a vocabulary token already has, at another id.
                  t["added_tokens"][1]["content"] = t["model"]["merges"][0].get<std::string>().erase(1, 1);
                  f["tokenizer.json"] = t.dump();
                },
                "both as token"},
        Refusal{"VocabularyLargerThanTheEmbedding",
                [](std::map<std::string, std::string>& f) {
                  auto c = Config(f);
                  c["vocab_size"] = 300;
                  f["config.json"] = c.dump();
                },
                "tokens, more than the"},
        Refusal{"TruncatedTokenizerModel",
                [](std::map<std::string, std::string>& f) {
                  // A SentencePiece model whose first piece is cut short.
                  f["tokenizer.model"] = std::string("\x0a\x20\x0a\x05<unk>\x15", 7);
                },
                "tokenizer.model"},
        Refusal{"NoTokenizer", [](std::map<std::string, std::string>& f) { f.erase("tokenizer.json"); }, "tokenizer"},
        Refusal{"TensorOfAnotherShape",
                [](std::map<std::string, std::string>& f) {
                  auto c = Config(f);
                  c["intermediate_size"] = 640;
                  f["config.json"] = c.dump();
                },
                "expects blk.0.ffn_down.weight {640, 256}"},
        Refusal{"MissingTensor",
                [](std::map<std::string, std::string>& f) {
                  auto c = Config(f);
                  c["num_hidden_layers"] = 3;
                  f["config.json"] = c.dump();
                },
                "blk.2."},
        Refusal{"NoConfig", [](std::map<std::string, std::string>& f) { f.erase("config.json"); }, "config.json"}),
    [](const ::testing::TestParamInfo<Refusal>& info) { return info.param.name; });

// llama.cpp looks up Phi-3's special tokens in any model whose name says
// Phi-3: a Llama vocabulary in a directory named so would fail to load.
TEST_F(GgufViewTest, AModelNamedLikePhi3NeedsPhi3sTokens) {
  Put({}, "my-phi3-finetune/");
  Put({.architecture = "Phi3ForCausalLM", .kv_heads = 4}, "phi3-mini/");
  Mount();
  EXPECT_THAT(List("my-phi3-finetune"), Not(Contains("@gguf")));
  EXPECT_THAT(DescribeGgufOf(store_, "my-phi3-finetune/", "my-phi3-finetune"),
              HasSubstr("named like Phi-3 (\"my-phi3-finetune\") attributes of the token </s>"));
  EXPECT_THAT(List("phi3-mini"), Contains("@gguf"));
}

// A shard replaced under a mount whose metadata TTL has passed: the @gguf/ of
// the new listing is another directory, whose files read the new bytes.
TEST_F(GgufViewTest, AReplacedShardGivesANewGgufVersion) {
  const GgufSpec spec{.dtype = Dtype::F16};
  Put(spec);
  testing::ManualClock clock;
  Mount({ViewKind::kGguf}, Freshness{.metadata_ttl = std::chrono::seconds(1), .negative_ttl = std::chrono::seconds(1),
                                     .clock = &clock});
  StatusOr<NodeId> before = Path("m/@gguf/m-F16.gguf");
  ASSERT_TRUE(before.ok());
  StatusOr<std::string> old_bytes = ReadAll("m/@gguf/m-F16.gguf");
  ASSERT_TRUE(old_bytes.ok());
  // The same tensors, new values: the norms of the new file are zeros.
  std::vector<testing::RawTensor> raw;
  for (const testing::TensorSpec& t : testing::GgufSpecTensors(spec)) {
    testing::RawTensor r{.name = t.name, .dtype = t.dtype, .shape = t.shape};
    if (t.shape.size() == 1) r.bytes = std::string(t.size(), '\0');
    raw.push_back(std::move(r));
  }
  std::sort(raw.begin(), raw.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  store_.Put("m/model.safetensors", testing::BuildSafetensorsFile(raw, {{"format", "pt"}}));
  clock.Advance(std::chrono::seconds(2));
  StatusOr<NodeId> after = Path("m/@gguf/m-F16.gguf");
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_NE(after->value, before->value);
  StatusOr<std::string> new_bytes = ReadAll("m/@gguf/m-F16.gguf");
  ASSERT_TRUE(new_bytes.ok());
  const Parsed p = ParseGguf(*new_bytes);
  EXPECT_EQ(TensorBytes(*new_bytes, p, "output_norm.weight"), std::string(4 * spec.hidden, '\0'));
  // The old node reads its version while the store has it, then not at all:
  // never the new bytes.
  std::promise<StatusOr<ReadResult>> result;
  ns_->Read(*before, 0, 64, [&](StatusOr<ReadResult> r) { result.set_value(std::move(r)); });
  StatusOr<ReadResult> r = result.get_future().get();
  ASSERT_TRUE(r.ok());  // the header is the old file's own
  const Parsed po = ParseGguf(*old_bytes);
  const TensorRecord* norm = Find(po, "output_norm.weight");
  std::promise<StatusOr<ReadResult>> data;
  ns_->Read(*before, po.data_start + norm->offset, 4 * spec.hidden,
            [&](StatusOr<ReadResult> d) { data.set_value(std::move(d)); });
  StatusOr<ReadResult> d = data.get_future().get();
  if (d.ok()) {
    std::string got;
    for (auto piece : d->pieces) got.append(reinterpret_cast<const char*>(piece.data()), piece.size());
    EXPECT_EQ(got, TensorBytes(*old_bytes, po, "output_norm.weight"));
  } else {
    EXPECT_EQ(d.status().code(), ErrorCode::kStale) << d.status().message();
  }
}

}  // namespace
}  // namespace tensorfs
