#include "core/safetensors/index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tensorfs {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kIndex[] = "models/llama/model.safetensors.index.json";

TEST(IndexTest, ParsesWeightMapAndTotalSize) {
  StatusOr<SafetensorsIndex> index = ParseIndex(kIndex, R"({
    "metadata": {"total_size": 16060522496, "format": "pt"},
    "weight_map": {
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors"
    }})");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->total_size, 16060522496u);
  EXPECT_EQ(index->metadata.at("format"), "pt");
  EXPECT_EQ(index->metadata.at("total_size"), "16060522496");
  EXPECT_EQ(index->weight_map.at("lm_head.weight"), "model-00002-of-00002.safetensors");
  EXPECT_EQ(index->weight_map.size(), 2u);
}

TEST(IndexTest, FilesAreDistinctAndSorted) {
  StatusOr<SafetensorsIndex> index = ParseIndex(kIndex, R"({"weight_map": {
      "a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_THAT(index->Files(),
              ElementsAre("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"));
}

TEST(IndexTest, MetadataAndTotalSizeAreOptional) {
  StatusOr<SafetensorsIndex> index = ParseIndex(kIndex, R"({"weight_map": {"a": "m.safetensors"}})");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_FALSE(index->total_size.has_value());
  EXPECT_TRUE(index->metadata.empty());
}

TEST(IndexTest, AcceptsIntegralFloatTotalSize) {
  StatusOr<SafetensorsIndex> index =
      ParseIndex(kIndex, R"({"metadata": {"total_size": 1024.0}, "weight_map": {}})");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->total_size, 1024u);
}

TEST(IndexTest, RejectsInvalidJson) {
  StatusOr<SafetensorsIndex> index = ParseIndex(kIndex, R"({"weight_map": {"a": )");
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(index.status().message(), AllOf(HasSubstr(kIndex), HasSubstr("not valid JSON")));
}

TEST(IndexTest, RejectsNulByte) {
  std::string json = std::string(R"({"weight_map": {}})") + '\0' + "garbage";
  StatusOr<SafetensorsIndex> index = ParseIndex(kIndex, json);
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(index.status().message(), AllOf(HasSubstr(kIndex), HasSubstr("NUL byte at offset 18")));
}

TEST(IndexTest, RejectsMissingWeightMap) {
  StatusOr<SafetensorsIndex> index = ParseIndex(kIndex, R"({"metadata": {"total_size": 4}})");
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(index.status().message(), AllOf(HasSubstr(kIndex), HasSubstr("has no \"weight_map\"")));
}

TEST(IndexTest, RejectsNonStringShardName) {
  StatusOr<SafetensorsIndex> index = ParseIndex(kIndex, R"({"weight_map": {"lm_head.weight": 2}})");
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(index.status().message(),
              AllOf(HasSubstr(kIndex), HasSubstr("tensor 'lm_head.weight'"), HasSubstr("the number 2")));
}

TEST(IndexTest, RejectsShardPathOutsideTheDirectory) {
  StatusOr<SafetensorsIndex> index =
      ParseIndex(kIndex, R"({"weight_map": {"w": "../other/model.safetensors"}})");
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(index.status().message(),
              AllOf(HasSubstr(kIndex), HasSubstr("tensor 'w'"), HasSubstr("../other/model.safetensors"),
                    HasSubstr("not a file name relative to the index's directory")));
}

TEST(IndexTest, RejectsTensorListedTwice) {
  StatusOr<SafetensorsIndex> index =
      ParseIndex(kIndex, R"({"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}})");
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(index.status().message(), AllOf(HasSubstr(kIndex), HasSubstr("tensor 'w' twice")));
}

TEST(IndexTest, RejectsNegativeTotalSize) {
  StatusOr<SafetensorsIndex> index =
      ParseIndex(kIndex, R"({"metadata": {"total_size": -5}, "weight_map": {}})");
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(index.status().message(),
              AllOf(HasSubstr(kIndex), HasSubstr("\"total_size\" must be a non-negative integer")));
}

TEST(IndexTest, RecognizesIndexFileNames) {
  EXPECT_TRUE(IsIndexFileName("model.safetensors.index.json"));
  EXPECT_TRUE(IsIndexFileName("models/x/diffusion_pytorch_model.safetensors.index.json"));
  EXPECT_FALSE(IsIndexFileName("model.safetensors"));
  EXPECT_FALSE(IsIndexFileName("pytorch_model.bin.index.json"));
  EXPECT_FALSE(IsIndexFileName("dir/.safetensors.index.json"));
}

}  // namespace
}  // namespace tensorfs
