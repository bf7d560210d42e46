#include "tests/support/checkpoint_gen.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <unistd.h>

#include "core/safetensors/checkpoint.h"
#include "core/safetensors/index.h"
#include "core/safetensors/layers.h"
#include "tests/support/memory_store.h"

namespace tensorfs::testing {
namespace {

using ::testing::HasSubstr;

constexpr Arch kArchs[] = {Arch::kLlama, Arch::kQwen2, Arch::kMixtral,      Arch::kGpt2,
                           Arch::kT5,    Arch::kLlamaTied, Arch::kDeepseekMoe};

float DecodeF16(uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  const float sign = (h >> 15) ? -1.0f : 1.0f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
}

TEST(CheckpointGenTest, EveryArchitectureSplitsALayerAcrossTwoShards) {
  for (Arch arch : kArchs) {
    for (int shards : {2, 3, 5}) {
      SCOPED_TRACE(std::string(ArchName(arch)) + " with " + std::to_string(shards) + " shards");
      MemoryStore store;
      StatusOr<CheckpointPlan> plan =
          PutCheckpoint(store, "", ModelSpec{.arch = arch, .layers = 3}, WriteOptions{.num_shards = shards});
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      ASSERT_FALSE(plan->split_group.empty());
      StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      EXPECT_EQ(c->files().size(), static_cast<size_t>(shards));
      std::set<std::string> files;
      for (const CatalogEntry& e : c->tensors()) {
        if (e.name.starts_with(plan->split_group)) files.insert(e.file);
      }
      EXPECT_EQ(files.size(), 2u) << plan->split_group;
    }
  }
}

TEST(CheckpointGenTest, ShardsParseAndMatchTheIndex) {
  ModelSpec spec{.arch = Arch::kMixtral, .dtype = Dtype::BF16};
  StatusOr<std::map<std::string, std::string>> files = BuildCheckpointFiles(spec, WriteOptions{.num_shards = 4});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  StatusOr<SafetensorsIndex> index = ParseIndex("index", files->at("model.safetensors.index.json"));
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->total_size, ModelTensorBytes(spec));
  uint64_t total = 0;
  for (const std::string& name : index->Files()) {
    const std::string& bytes = files->at(name);
    StatusOr<SafetensorsHeader> h = ParseSafetensorsFile(name, std::as_bytes(std::span<const char>(bytes)));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->metadata.at("format"), "pt");
    EXPECT_EQ(h->data_start() % 8, 0u);
    for (const TensorInfo& t : h->tensors) {
      EXPECT_EQ(index->weight_map.at(t.name), name);
      total += t.size();
    }
  }
  EXPECT_EQ(total, ModelTensorBytes(spec));
  EXPECT_TRUE(files->count("config.json"));
  EXPECT_TRUE(files->count("tokenizer.json"));
  EXPECT_TRUE(files->count("generation_config.json"));
}

TEST(CheckpointGenTest, OneShardIsModelSafetensorsWithoutIndex) {
  StatusOr<std::map<std::string, std::string>> files = BuildCheckpointFiles(ModelSpec{}, WriteOptions{});
  ASSERT_TRUE(files.ok());
  EXPECT_TRUE(files->count("model.safetensors"));
  EXPECT_FALSE(files->count("model.safetensors.index.json"));
}

TEST(CheckpointGenTest, OutputIsDeterministic) {
  ModelSpec spec{.arch = Arch::kT5, .dtype = Dtype::F16};
  StatusOr<std::map<std::string, std::string>> a = BuildCheckpointFiles(spec, WriteOptions{.num_shards = 2});
  StatusOr<std::map<std::string, std::string>> b = BuildCheckpointFiles(spec, WriteOptions{.num_shards = 2});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(CheckpointGenTest, TensorBytesDependOnTheName) {
  EXPECT_NE(ExpectedTensorBytes("a.weight", Dtype::F32, 64), ExpectedTensorBytes("b.weight", Dtype::F32, 64));
  EXPECT_EQ(ExpectedTensorBytes("a.weight", Dtype::F32, 64), ExpectedTensorBytes("a.weight", Dtype::F32, 64));
}

TEST(CheckpointGenTest, FillAtAnOffsetMatchesTheWholeTensor) {
  const std::string whole = ExpectedTensorBytes("x", Dtype::BF16, 1000);
  std::string part(333, '\0');
  FillTensorBytes("x", Dtype::BF16, 101, std::as_writable_bytes(std::span<char>(part)));
  EXPECT_EQ(part, whole.substr(101, 333));
}

TEST(CheckpointGenTest, FloatValuesAreFiniteAndModest) {
  const std::string f32 = ExpectedTensorBytes("w", Dtype::F32, 4 * 4096);
  const std::string f16 = ExpectedTensorBytes("w", Dtype::F16, 2 * 4096);
  const std::string bf16 = ExpectedTensorBytes("w", Dtype::BF16, 2 * 4096);
  for (size_t i = 0; i < 4096; ++i) {
    float v32;
    std::memcpy(&v32, f32.data() + 4 * i, 4);
    uint16_t h16, b16;
    std::memcpy(&h16, f16.data() + 2 * i, 2);
    std::memcpy(&b16, bf16.data() + 2 * i, 2);
    const float vb = std::bit_cast<float>(static_cast<uint32_t>(b16) << 16);
    const float vh = DecodeF16(h16);
    for (float v : {v32, vh, vb}) {
      ASSERT_TRUE(std::isfinite(v));
      ASSERT_GE(std::fabs(v), 1.0f / 256);
      ASSERT_LT(std::fabs(v), 1.0f);
    }
  }
}

TEST(CheckpointGenTest, KeepsForwardOrderWhenAsked) {
  StatusOr<CheckpointPlan> plan = PlanCheckpoint(ModelSpec{}, WriteOptions{.sort_by_name_in_file = false});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->shards[0].tensors.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(plan->shards[0].tensors.back().name, "lm_head.weight");
}

TEST(CheckpointGenTest, TooManyShardsIsRejected) {
  StatusOr<CheckpointPlan> plan = PlanCheckpoint(ModelSpec{.layers = 1}, WriteOptions{.num_shards = 1000});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("num_shards"));
}

TEST(CheckpointGenTest, InvalidSpecIsRejected) {
  EXPECT_EQ(ValidateSpec(ModelSpec{.hidden = 30, .heads = 4}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ValidateSpec(ModelSpec{.dtype = Dtype::I8}).code(), ErrorCode::kInvalidArgument);
}

TEST(CheckpointGenTest, WritesFilesThatMatchTheInMemoryBuild) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("tensorfs-gen-test-" + std::to_string(::getpid()));
  ModelSpec spec{.arch = Arch::kGpt2, .dtype = Dtype::BF16};
  WriteOptions options{.num_shards = 2, .dir = dir};
  StatusOr<WrittenCheckpoint> written = WriteCheckpoint(spec, options);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  StatusOr<std::map<std::string, std::string>> expected = BuildCheckpointFiles(spec, options);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(written->files.size(), expected->size());
  for (const auto& [name, bytes] : *expected) {
    std::ifstream f(dir / name, std::ios::binary);
    std::string on_disk((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(on_disk, bytes) << name;
  }
  std::filesystem::remove_all(dir);
}

TEST(CheckpointGenTest, BuildSafetensorsFileUsesGivenBytes) {
  std::string file = BuildSafetensorsFile({RawTensor{"a", Dtype::U8, {3}, std::string("xyz")},
                                           RawTensor{"b", Dtype::F32, {2}}});
  StatusOr<SafetensorsHeader> h = ParseSafetensorsFile("f", std::as_bytes(std::span<const char>(file)));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(file.substr(h->data_start(), 3), "xyz");
  EXPECT_EQ(file.substr(h->data_start() + 3), ExpectedTensorBytes("b", Dtype::F32, 8));
}

}  // namespace
}  // namespace tensorfs::testing
