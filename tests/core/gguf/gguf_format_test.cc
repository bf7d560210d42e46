#include "core/gguf/gguf_format.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tensorfs {
namespace {

// ---- A small independent GGUF reader, from the format's description ----

struct ReadValue {
  uint32_t type = 0;        // GGUF value type
  uint32_t elem_type = 0;   // for arrays
  uint64_t u = 0;           // integers and bools
  float f = 0;
  std::string s;
  std::vector<std::string> strings;
  std::vector<uint64_t> ints;  // integer array elements, as read
  std::vector<float> floats;
};

struct ReadTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;  // relative to the data section
};

struct ReadFile {
  uint32_t version = 0;
  std::vector<std::pair<std::string, ReadValue>> kv;
  std::vector<ReadTensor> tensors;
  uint64_t end_of_records = 0;  // where the padding starts
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : b_(bytes) {}
  uint64_t pos() const { return pos_; }
  uint64_t Le(int n) {
    if (pos_ + n > b_.size()) throw std::runtime_error("truncated at " + std::to_string(pos_));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string Str() {
    const uint64_t n = Le(8);
    if (pos_ + n > b_.size()) throw std::runtime_error("string past the end");
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  ReadValue Value(uint32_t type) {
    ReadValue v;
    v.type = type;
    switch (type) {
      case 0: case 1: case 7: v.u = Le(1); break;
      case 2: case 3: v.u = Le(2); break;
      case 4: case 5: v.u = Le(4); break;
      case 6: v.f = std::bit_cast<float>(static_cast<uint32_t>(Le(4))); break;
      case 8: v.s = Str(); break;
      case 10: case 11: case 12: v.u = Le(8); break;
      case 9: {
        v.elem_type = static_cast<uint32_t>(Le(4));
        const uint64_t n = Le(8);
        for (uint64_t i = 0; i < n; ++i) {
          ReadValue e = Value(v.elem_type);
          if (v.elem_type == 8) {
            v.strings.push_back(e.s);
          } else if (v.elem_type == 6) {
            v.floats.push_back(e.f);
          } else {
            v.ints.push_back(e.u);
          }
        }
        break;
      }
      default:
        throw std::runtime_error("unknown value type " + std::to_string(type));
    }
    return v;
  }

 private:
  const std::string& b_;
  uint64_t pos_ = 0;
};

ReadFile Parse(const std::string& header) {
  Reader r(header);
  ReadFile f;
  if (header.substr(0, 4) != "GGUF") throw std::runtime_error("no GGUF magic");
  r.Le(4);
  f.version = static_cast<uint32_t>(r.Le(4));
  const uint64_t n_tensors = r.Le(8);
  const uint64_t n_kv = r.Le(8);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.Str();
    const uint32_t type = static_cast<uint32_t>(r.Le(4));
    f.kv.emplace_back(key, r.Value(type));
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    ReadTensor t;
    t.name = r.Str();
    const uint32_t dims = static_cast<uint32_t>(r.Le(4));
    for (uint32_t d = 0; d < dims; ++d) t.ne.push_back(r.Le(8));
    t.type = static_cast<uint32_t>(r.Le(4));
    t.offset = r.Le(8);
    f.tensors.push_back(t);
  }
  f.end_of_records = r.pos();
  return f;
}

const ReadValue& Kv(const ReadFile& f, const std::string& key) {
  for (const auto& [k, v] : f.kv) {
    if (k == key) return v;
  }
  throw std::runtime_error("no key " + key);
}

GgufMetadata SomeMetadata() {
  GgufMetadata m;
  m.SetString("general.architecture", "llama");
  m.SetU32("llama.block_count", 2);
  m.SetF32("llama.rope.freq_base", 500000.0f);
  m.SetBool("tokenizer.ggml.add_bos_token", true);
  m.SetI32("some.signed", -7);
  m.SetStringArray("tokenizer.ggml.tokens", {"a", "", "\xe2\x96\x81the"});
  m.SetI32Array("tokenizer.ggml.token_type", {1, 3, -1});
  m.SetF32Array("tokenizer.ggml.scores", {0.0f, -1000.0f, 1.5f});
  return m;
}

std::vector<GgufTensorRecord> SomeTensors() {
  return {
      {"token_embd.weight", {64, 10}, GgmlType::kQ8_0},       // 2 * 34 * 10 = 680 bytes
      {"blk.0.attn_norm.weight", {64}, GgmlType::kF32},        // 256
      {"blk.0.ffn_down.weight", {256, 3}, GgmlType::kQ4_K},    // 3 * 144 = 432
      {"output.weight", {256, 10, 1}, GgmlType::kQ6_K},        // 2100
      {"blk.0.attn_q.weight", {3, 2}, GgmlType::kF16},         // 12
  };
}

// ---- Layout ----

TEST(LayOutGgufTest, HeaderReadsBackAsGgufV3) {
  const StatusOr<GgufLayout> layout = LayOutGguf(SomeMetadata(), SomeTensors());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const ReadFile f = Parse(layout->header);
  EXPECT_EQ(f.version, 3u);
  ASSERT_EQ(f.kv.size(), 8u);
  ASSERT_EQ(f.tensors.size(), 5u);
}

TEST(LayOutGgufTest, KeysKeepTheirOrderAndExactTypes) {
  const ReadFile f = Parse(LayOutGguf(SomeMetadata(), SomeTensors())->header);
  const std::vector<std::string> keys = {"general.architecture", "llama.block_count", "llama.rope.freq_base",
                                         "tokenizer.ggml.add_bos_token", "some.signed", "tokenizer.ggml.tokens",
                                         "tokenizer.ggml.token_type", "tokenizer.ggml.scores"};
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(f.kv[i].first, keys[i]);
  EXPECT_EQ(Kv(f, "general.architecture").type, 8u);
  EXPECT_EQ(Kv(f, "general.architecture").s, "llama");
  EXPECT_EQ(Kv(f, "llama.block_count").type, 4u);  // UINT32, as the loader demands
  EXPECT_EQ(Kv(f, "llama.block_count").u, 2u);
  EXPECT_EQ(Kv(f, "llama.rope.freq_base").type, 6u);
  EXPECT_EQ(Kv(f, "llama.rope.freq_base").f, 500000.0f);
  EXPECT_EQ(Kv(f, "tokenizer.ggml.add_bos_token").type, 7u);
  EXPECT_EQ(Kv(f, "tokenizer.ggml.add_bos_token").u, 1u);
  EXPECT_EQ(Kv(f, "some.signed").type, 5u);
  EXPECT_EQ(static_cast<int32_t>(Kv(f, "some.signed").u), -7);
}

TEST(LayOutGgufTest, ArraysCarryTheirElementType) {
  const ReadFile f = Parse(LayOutGguf(SomeMetadata(), SomeTensors())->header);
  const ReadValue& tokens = Kv(f, "tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.type, 9u);
  EXPECT_EQ(tokens.elem_type, 8u);
  EXPECT_EQ(tokens.strings, (std::vector<std::string>{"a", "", "\xe2\x96\x81the"}));
  const ReadValue& types = Kv(f, "tokenizer.ggml.token_type");
  EXPECT_EQ(types.elem_type, 5u);  // INT32: the only integer array llama.cpp reads
  ASSERT_EQ(types.ints.size(), 3u);
  EXPECT_EQ(static_cast<int32_t>(types.ints[2]), -1);
  const ReadValue& scores = Kv(f, "tokenizer.ggml.scores");
  EXPECT_EQ(scores.elem_type, 6u);
  EXPECT_EQ(scores.floats, (std::vector<float>{0.0f, -1000.0f, 1.5f}));
}

TEST(LayOutGgufTest, TensorRecordsCarryNameShapeAndType) {
  const ReadFile f = Parse(LayOutGguf(SomeMetadata(), SomeTensors())->header);
  const std::vector<GgufTensorRecord> want = SomeTensors();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(f.tensors[i].name, want[i].name);
    EXPECT_EQ(f.tensors[i].ne, want[i].ne);  // as given: a trailing 1 is written too
    EXPECT_EQ(f.tensors[i].type, static_cast<uint32_t>(want[i].type));
  }
}

TEST(LayOutGgufTest, OffsetsAreDenseAndAligned) {
  const StatusOr<GgufLayout> layout = LayOutGguf(SomeMetadata(), SomeTensors());
  const ReadFile f = Parse(layout->header);
  const std::vector<uint64_t> sizes = {680, 256, 432, 2100, 12};
  EXPECT_EQ(layout->sizes, sizes);
  uint64_t expected = 0;  // the reader's rule: each offset is the sum of the padded sizes before it
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(f.tensors[i].offset, expected) << f.tensors[i].name;
    EXPECT_EQ(layout->offsets[i], layout->header.size() + expected);
    EXPECT_EQ(layout->offsets[i] % 32, 0u);
    expected += (sizes[i] + 31) / 32 * 32;
  }
  EXPECT_EQ(layout->file_size, layout->header.size() + expected);
}

TEST(LayOutGgufTest, HeaderIsPaddedWithZerosToTheAlignment) {
  const GgufLayout layout = *LayOutGguf(SomeMetadata(), SomeTensors());
  const ReadFile f = Parse(layout.header);
  EXPECT_EQ(layout.header.size() % 32, 0u);
  EXPECT_LT(layout.header.size() - f.end_of_records, 32u);
  for (uint64_t i = f.end_of_records; i < layout.header.size(); ++i) EXPECT_EQ(layout.header[i], '\0');
}

TEST(LayOutGgufTest, OtherAlignmentIsWrittenAndUsed) {
  GgufMetadata m = SomeMetadata();
  m.SetU32("general.alignment", 64);
  const StatusOr<GgufLayout> layout = LayOutGguf(m, SomeTensors(), 64);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->header.size() % 64, 0u);
  for (uint64_t offset : layout->offsets) EXPECT_EQ(offset % 64, 0u);
  EXPECT_EQ(Kv(Parse(layout->header), "general.alignment").u, 64u);
}

TEST(LayOutGgufTest, NoTensorsIsAHeaderOnly) {
  const StatusOr<GgufLayout> layout = LayOutGguf(SomeMetadata(), {});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->file_size, layout->header.size());
  EXPECT_TRUE(Parse(layout->header).tensors.empty());
}

// ---- Errors ----

std::string Error(const GgufMetadata& m, const std::vector<GgufTensorRecord>& t, uint32_t alignment = 32) {
  const StatusOr<GgufLayout> layout = LayOutGguf(m, t, alignment);
  EXPECT_FALSE(layout.ok());
  return layout.ok() ? "" : layout.status().message();
}

TEST(LayOutGgufErrorTest, NameOf64BytesIsRefused) {
  const std::string name(64, 'n');
  EXPECT_EQ(Error({}, {{name, {32}, GgmlType::kF32}}),
            "tensor name '" + name + "' is 64 bytes; llama.cpp's names are shorter than 64");
  EXPECT_TRUE(LayOutGguf({}, {{std::string(63, 'n'), {32}, GgmlType::kF32}}).ok());
}

TEST(LayOutGgufErrorTest, EmptyNameIsRefused) {
  EXPECT_EQ(Error({}, {{"", {32}, GgmlType::kF32}}), "a tensor has an empty name");
}

TEST(LayOutGgufErrorTest, DuplicateNameIsRefused) {
  EXPECT_EQ(Error({}, {{"a.weight", {32}, GgmlType::kF32}, {"b", {1}, GgmlType::kF32}, {"a.weight", {2}, GgmlType::kF32}}),
            "tensor name 'a.weight' appears twice (tensors #0 and #2)");
}

TEST(LayOutGgufErrorTest, FiveDimensionsAreRefused) {
  EXPECT_EQ(Error({}, {{"t", {2, 2, 2, 2, 2}, GgmlType::kF32}}),
            "tensor 't' of shape {2, 2, 2, 2, 2} has 5 dimensions; GGUF allows 1 to 4");
}

TEST(LayOutGgufErrorTest, NoDimensionsAreRefused) {
  EXPECT_EQ(Error({}, {{"t", {}, GgmlType::kF32}}), "tensor 't' of shape {} has 0 dimensions; GGUF allows 1 to 4");
}

TEST(LayOutGgufErrorTest, EmptyDimensionIsRefused) {
  EXPECT_EQ(Error({}, {{"t", {32, 0}, GgmlType::kF32}}), "tensor 't' of shape {32, 0} has an empty dimension");
}

TEST(LayOutGgufErrorTest, RowNotWholeBlocksIsRefused) {
  EXPECT_EQ(Error({}, {{"blk.0.ffn_down.weight", {4000, 2}, GgmlType::kQ4_K}}),
            "tensor 'blk.0.ffn_down.weight' of shape {4000, 2} has 4000 elements per row, not a multiple of "
            "Q4_K's block of 256");
}

TEST(LayOutGgufErrorTest, MoreElementsThanInt64IsRefused) {
  EXPECT_EQ(Error({}, {{"t", {uint64_t{1} << 32, uint64_t{1} << 32}, GgmlType::kF32}}),
            "tensor 't' of shape {4294967296, 4294967296} has more elements than int64 counts");
}

TEST(LayOutGgufErrorTest, EmptyKeyIsRefused) {
  GgufMetadata m;
  m.SetU32("a", 1);
  m.SetU32("", 2);
  EXPECT_EQ(Error(m, {}), "key #1 is empty");
}

TEST(LayOutGgufErrorTest, AlignmentNotAPowerOfTwoIsRefused) {
  EXPECT_EQ(Error({}, {}, 48), "GGUF alignment 48 is not a power of two of at least 8");
}

TEST(LayOutGgufErrorTest, OtherAlignmentWithoutItsKeyIsRefused) {
  EXPECT_EQ(Error({}, {}, 64), "alignment 64 needs a u32 general.alignment key: llama.cpp assumes 32 without one");
}

TEST(LayOutGgufErrorTest, AlignmentKeyOfAnotherValueOrTypeIsRefused) {
  GgufMetadata m;
  m.SetU32("general.alignment", 64);
  EXPECT_EQ(Error(m, {}), "key general.alignment is 64 but the file is laid out at 32");
  m.SetI32("general.alignment", 32);
  EXPECT_EQ(Error(m, {}), "key general.alignment must be a u32, as llama.cpp reads it");
}

// ---- Metadata ----

TEST(GgufMetadataTest, SettingAKeyAgainReplacesItInPlace) {
  GgufMetadata m;
  m.SetU32("a", 1);
  m.SetString("b", "x");
  m.SetF32("a", 2.5f);  // a new type too
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.entries()[0].key, "a");
  ASSERT_NE(m.Get<float>("a"), nullptr);
  EXPECT_EQ(*m.Get<float>("a"), 2.5f);
  EXPECT_EQ(m.Get<uint32_t>("a"), nullptr);
}

TEST(GgufMetadataTest, RemoveKeepsTheOthersFindable) {
  GgufMetadata m;
  m.SetU32("a", 1);
  m.SetU32("b", 2);
  m.SetU32("c", 3);
  m.Remove("a");
  EXPECT_FALSE(m.Has("a"));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(*m.Get<uint32_t>("c"), 3u);
  m.SetU32("b", 5);
  EXPECT_EQ(m.entries()[0].key, "b");
  EXPECT_EQ(*m.Get<uint32_t>("b"), 5u);
}

TEST(GgufMetadataTest, MergeAppendsNewKeysAndReplacesOld) {
  GgufMetadata a;
  a.SetU32("x", 1);
  a.SetU32("y", 2);
  GgufMetadata b;
  b.SetU32("y", 20);
  b.SetBool("z", true);
  a.Merge(b);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a.entries()[1].key, "y");
  EXPECT_EQ(*a.Get<uint32_t>("y"), 20u);
  EXPECT_EQ(a.entries()[2].key, "z");
}

}  // namespace
}  // namespace tensorfs
