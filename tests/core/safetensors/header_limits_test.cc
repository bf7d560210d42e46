// The header parser's limits (header.h): each is refused with a message that
// names the file and the limit, and what is at the limit is accepted. Also the
// parts of the header the streaming parser reads piece by piece: keys repeated
// within an entry, entries' unknown keys, data_offsets of the wrong length.
#include "core/safetensors/header.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/support/checkpoint_gen.h"

namespace tensorfs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::FileWithHeaderJson;

constexpr char kFile[] = "model-00001-of-00002.safetensors";

StatusOr<SafetensorsHeader> Parse(const std::string& bytes) {
  return ParseSafetensorsFile(kFile, std::as_bytes(std::span<const char>(bytes)));
}

// {"w": a U8 tensor of `dims` dimensions of 1}: one byte of data.
std::string ShapeOfOnes(size_t dims) {
  std::string shape = "[";
  for (size_t i = 0; i < dims; ++i) shape += i == 0 ? "1" : ",1";
  shape += "]";
  return R"({"w":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,1]}})";
}

// `count` empty U8 tensors named "0", "1", ...
std::string EmptyTensors(size_t count, const std::string& metadata = "") {
  std::string json = "{";
  if (!metadata.empty()) json += R"("__metadata__":)" + metadata + ",";
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) json += ',';
    json += "\"" + std::to_string(i) + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  }
  return json + "}";
}

TEST(HeaderLimitsTest, AcceptsShapeWithTheMostDimensions) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(ShapeOfOnes(kMaxShapeDims), 1));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->tensors[0].shape.size(), kMaxShapeDims);
}

TEST(HeaderLimitsTest, RefusesShapeWithMoreDimensionsThanTheLimit) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(ShapeOfOnes(kMaxShapeDims + 1), 1));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"),
                                          HasSubstr("more than 64 dimensions"),
                                          HasSubstr("over the limit of 64 dimensions per shape")));
}

TEST(HeaderLimitsTest, RefusesShapeOfMillionsOfDimensions) {
  // A few MB of shape, refused at its 65th dimension.
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(ShapeOfOnes(2'000'000), 1));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("limit of 64 dimensions per shape")));
}

TEST(HeaderLimitsTest, RefusesMoreTensorsThanTheLimit) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(EmptyTensors(kMaxTensorsPerHeader + 1), 0));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("more than 1000000 tensors"),
                    HasSubstr("over the limit of 1000000 tensors per file")));
}

TEST(HeaderLimitsTest, AcceptsManyTensors) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(EmptyTensors(100'000), 0));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->tensors.size(), 100'000u);
}

TEST(HeaderLimitsTest, AcceptsMetadataAtTheByteLimit) {
  const std::string value(kMaxMetadataBytes - 3, 'x');
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(EmptyTensors(1, R"({"key":")" + value + "\"}"), 0));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->metadata.at("key").size(), value.size());
}

TEST(HeaderLimitsTest, RefusesMetadataOverTheByteLimit) {
  const std::string value(kMaxMetadataBytes - 2, 'x');
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(EmptyTensors(1, R"({"key":")" + value + "\"}"), 0));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("\"__metadata__\" holds more than 16777216 bytes"),
                    HasSubstr("over the limit of 16777216 bytes per file")));
}

TEST(HeaderLimitsTest, RefusesMetadataWithMoreEntriesThanTheLimit) {
  std::string metadata = "{";
  for (size_t i = 0; i <= kMaxMetadataEntries; ++i) {
    metadata += (i > 0 ? ",\"" : "\"") + std::to_string(i) + "\":\"\"";
  }
  metadata += "}";
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(EmptyTensors(1, metadata), 0));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("more than 100000 entries"),
                    HasSubstr("over the limit of 100000 entries per file")));
}

TEST(HeaderLimitsTest, RefusesNestingDeeperThanTheLimitInAnUnknownKey) {
  const std::string json = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":)" + std::string(200, '[') +
                           std::string(200, ']') + "}}";
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(json, 1));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("deeper than 128 levels")));
}

TEST(HeaderLimitsTest, SkipsUnknownKeysOfAnEntry) {
  const std::string json = R"({"w":{"x":{"a":[1,{"b":null}],"c":"d"},"dtype":"U8","y":[[]],"shape":[1],)"
                           R"("data_offsets":[0,1],"z":true}})";
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(json, 1));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->tensors[0].shape, std::vector<uint64_t>{1});
}

TEST(HeaderLimitsTest, RefusesKeyRepeatedWithinAnEntry) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"w":{"dtype":"U8","shape":[1],"dtype":"F32","data_offsets":[0,1]}})", 1));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"),
                                          HasSubstr("has key \"dtype\" twice")));
}

TEST(HeaderLimitsTest, RefusesMetadataTwice) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(R"({"__metadata__":{},"__metadata__":null})", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("\"__metadata__\" twice")));
}

TEST(HeaderLimitsTest, RefusesMetadataKeyTwice) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(R"({"__metadata__":{"a":"1","a":"2"}})", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("has key \"a\" twice")));
}

TEST(HeaderLimitsTest, RefusesDataOffsetsOfThreeValues) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"),
                                          HasSubstr("\"data_offsets\" must be [begin, end]"),
                                          HasSubstr("more than 2 values")));
}

TEST(HeaderLimitsTest, RefusesDataOffsetsOfOneValue) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1]}})", 1));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr("tensor 'w'"), HasSubstr("an array of 1 value")));
}

TEST(HeaderLimitsTest, RefusesEntryThatIsAnArray) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(R"({"w":[1,2]})", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr("tensor 'w'"), HasSubstr("entry must be an object"),
                                          HasSubstr("found an array")));
}

TEST(HeaderLimitsTest, RefusesTextAfterTheHeaderObject) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(R"({} {})", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("header is not valid JSON")));
}

}  // namespace
}  // namespace tensorfs
