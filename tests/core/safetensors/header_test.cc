#include "core/safetensors/header.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/support/checkpoint_gen.h"

namespace tensorfs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::BuildSafetensorsFile;
using testing::FileWithHeaderJson;
using testing::RawTensor;

constexpr char kFile[] = "model-00002-of-00004.safetensors";

StatusOr<SafetensorsHeader> Parse(const std::string& bytes) {
  return ParseSafetensorsFile(kFile, std::as_bytes(std::span<const char>(bytes)));
}

// A file whose first 8 bytes declare `n` and which is `file_size` bytes long.
std::string WithDeclaredLength(uint64_t n, size_t file_size) {
  std::string out(file_size, ' ');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out;
}

// ---- Valid files ----

TEST(HeaderTest, ParsesTensorsInStorageOrder) {
  std::string file = FileWithHeaderJson(
      R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
      12);
  StatusOr<SafetensorsHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->tensors[0].name, "a");
  EXPECT_EQ(h->tensors[1].name, "b");
  EXPECT_EQ(h->tensors[1].begin, 4u);
  EXPECT_EQ(h->tensors[1].size(), 8u);
  EXPECT_EQ(h->data_size(), 12u);
  EXPECT_EQ(h->data_start(), file.size() - 12);
}

TEST(HeaderTest, AcceptsEmptyTensors) {
  std::string file = BuildSafetensorsFile({
      RawTensor{"empty", Dtype::BF16, {0, 4096}},
      RawTensor{"w", Dtype::F16, {2, 2}},
      RawTensor{"also_empty", Dtype::I64, {3, 0}},
  });
  StatusOr<SafetensorsHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_NE(h->Find("empty"), nullptr);
  EXPECT_EQ(h->Find("empty")->size(), 0u);
  EXPECT_EQ(h->Find("also_empty")->shape, (std::vector<uint64_t>{3, 0}));
  EXPECT_EQ(h->data_size(), 8u);
}

TEST(HeaderTest, AcceptsScalarWithEmptyShape) {
  std::string file = BuildSafetensorsFile({RawTensor{"step", Dtype::I64, {}}});
  StatusOr<SafetensorsHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_TRUE(h->tensors[0].shape.empty());
  EXPECT_EQ(h->tensors[0].size(), 8u);
}

TEST(HeaderTest, ReadsMetadata) {
  std::string file = BuildSafetensorsFile({RawTensor{"w", Dtype::F32, {1}}},
                                          {{"format", "pt"}, {"note", "hello"}});
  StatusOr<SafetensorsHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hello"}}));
  EXPECT_EQ(h->Find("__metadata__"), nullptr);
}

TEST(HeaderTest, AcceptsNullMetadata) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"__metadata__":null,"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->metadata.empty());
}

TEST(HeaderTest, AcceptsTrailingSpacePadding) {
  const std::string json = R"({"w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(json + "       ", 3));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->header_length, json.size() + 7);
  EXPECT_EQ(h->tensors[0].size(), 3u);
}

TEST(HeaderTest, AcceptsSubByteDtypeWithWholeBytes) {
  std::string file = BuildSafetensorsFile({RawTensor{"q", Dtype::F4, {3, 2}},       // 24 bits
                                           RawTensor{"r", Dtype::F6_E2M3, {4}}});  // 24 bits
  StatusOr<SafetensorsHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->Find("q")->size(), 3u);
  EXPECT_EQ(h->Find("r")->size(), 3u);
}

TEST(HeaderTest, AcceptsHeaderWithoutTensors) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson("{}", 0));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->tensors.empty());
}

TEST(HeaderTest, ParseHeaderLengthReadsLittleEndian) {
  std::string first = WithDeclaredLength(0x0102, 8);
  StatusOr<uint64_t> n =
      ParseHeaderLength(kFile, std::as_bytes(std::span<const char>(first)), 8 + 0x0102);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0x0102u);
}

TEST(HeaderTest, SerializedHeaderIsPaddedTo8AndParsesBack) {
  std::vector<TensorInfo> tensors = {
      {.name = "x", .dtype = Dtype::BF16, .shape = {3}},
      {.name = "y", .dtype = Dtype::F32, .shape = {2, 2}},
  };
  StatusOr<uint64_t> data = LayOutContiguously(tensors);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, 22u);
  std::string header = SerializeHeader(tensors, {{"format", "pt"}});
  EXPECT_EQ(header.size() % 8, 0u);
  std::string file = header + std::string(*data, '\0');
  StatusOr<SafetensorsHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->tensors, tensors);
  EXPECT_EQ(h->metadata.at("format"), "pt");
  EXPECT_EQ(h->data_start(), header.size());
}

TEST(HeaderTest, TensorByteSizeRefusesPartialBytesAndOverflow) {
  EXPECT_EQ(TensorByteSize(Dtype::F4, std::vector<uint64_t>{2}), 1u);
  EXPECT_EQ(TensorByteSize(Dtype::F4, std::vector<uint64_t>{3}), std::nullopt);
  EXPECT_EQ(TensorByteSize(Dtype::F32, std::vector<uint64_t>{1ull << 62, 8}), std::nullopt);
  EXPECT_EQ(TensorByteSize(Dtype::F32, std::vector<uint64_t>{}), 4u);
}

// ---- Malformed files: one class each ----

TEST(HeaderTest, RejectsFileShorterThan8Bytes) {
  StatusOr<SafetensorsHeader> h = Parse("abc");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("file is 3 bytes, too short")));
}

TEST(HeaderTest, RejectsHeaderLengthOverLimit) {
  StatusOr<SafetensorsHeader> h = Parse(WithDeclaredLength(100'000'001, 64));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("header length is 100000001 bytes"),
                    HasSubstr("over the format's limit of 100000000")));
}

TEST(HeaderTest, RejectsHeaderLengthPastEndOfFile) {
  StatusOr<SafetensorsHeader> h = Parse(WithDeclaredLength(100, 18));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("header length is 100 bytes"),
                    HasSubstr("runs past the end of the 18-byte file")));
}

TEST(HeaderTest, RejectsInvalidUtf8) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      "{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("not valid UTF-8"), HasSubstr("byte 0xff at header offset 3")));
}

TEST(HeaderTest, RejectsOverlongUtf8Encoding) {
  // 0xC0 0xAF is an overlong '/', which strict UTF-8 forbids.
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson("{\"\xc0\xaf\":1}", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("not valid UTF-8")));
}

TEST(HeaderTest, RejectsInvalidJson) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(R"({"w":{"dtype":"F32",)", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("header is not valid JSON")));
}

TEST(HeaderTest, RejectsNulPadding) {
  // The reference accepts only JSON whitespace after the object.
  std::string json = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(json + std::string(3, '\0'), 1));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("NUL byte at header offset " + std::to_string(json.size())),
                    HasSubstr("padding after the JSON must be spaces")));
}

TEST(HeaderTest, RejectsJsonThatIsNotAnObject) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson("[1, 2]", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("header must be a JSON object"), HasSubstr("found an array")));
}

TEST(HeaderTest, RejectsUnknownDtype) {
  StatusOr<SafetensorsHeader> h = Parse(
      FileWithHeaderJson(R"({"w":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", 4));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"), HasSubstr("unknown dtype \"F17\""),
                    HasSubstr("BF16")));
}

TEST(HeaderTest, RejectsMissingDtype) {
  StatusOr<SafetensorsHeader> h =
      Parse(FileWithHeaderJson(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"), HasSubstr("missing \"dtype\"")));
}

TEST(HeaderTest, RejectsNegativeDimension) {
  StatusOr<SafetensorsHeader> h = Parse(
      FileWithHeaderJson(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]}})", 4));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"), HasSubstr("the number -3 at position 1"),
                    HasSubstr("non-negative integers")));
}

TEST(HeaderTest, RejectsNonIntegerDimension) {
  StatusOr<SafetensorsHeader> h = Parse(
      FileWithHeaderJson(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})", 4));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"), HasSubstr("the number 2.5 at position 0")));
}

TEST(HeaderTest, RejectsMissingDataOffsets) {
  StatusOr<SafetensorsHeader> h =
      Parse(FileWithHeaderJson(R"({"w":{"dtype":"F32","shape":[1]}})", 4));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"), HasSubstr("missing \"data_offsets\"")));
}

TEST(HeaderTest, RejectsDataOffsetsEndingBeforeTheyBegin) {
  StatusOr<SafetensorsHeader> h = Parse(
      FileWithHeaderJson(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"),
                                          HasSubstr("data_offsets [8, 4] end before they begin")));
}

TEST(HeaderTest, RejectsOffsetsNotStartingAtZero) {
  StatusOr<SafetensorsHeader> h = Parse(
      FileWithHeaderJson(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"),
                                          HasSubstr("data_offsets [4, 8] should begin at 0")));
}

TEST(HeaderTest, RejectsGapBetweenTensors) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      12));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'b'"),
                    HasSubstr("data_offsets [8, 12] leave a gap of 4 bytes after tensor 'a'")));
}

TEST(HeaderTest, RejectsOverlappingTensors) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'b'"),
                    HasSubstr("data_offsets [4, 12] overlap tensor 'a', which holds [0, 8]")));
}

TEST(HeaderTest, RejectsSizeThatDoesNotMatchShapeAndDtype) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"model.layers.3.mlp.up_proj.weight":{"dtype":"BF16","shape":[10,20],"data_offsets":[0,100]}})",
      100));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(h.status().message(),
            "model-00002-of-00004.safetensors: tensor 'model.layers.3.mlp.up_proj.weight': "
            "data_offsets [0, 100] hold 100 bytes but shape [10, 20] of BF16 needs 400");
}

TEST(HeaderTest, RejectsSubByteTensorThatIsNotWholeBytes) {
  StatusOr<SafetensorsHeader> h = Parse(
      FileWithHeaderJson(R"({"q":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'q'"),
                    HasSubstr("shape [3] of F4 is 3 x 4 bits, which is not a whole number of bytes")));
}

TEST(HeaderTest, RejectsDataSectionShorterThanTheTensors) {
  StatusOr<SafetensorsHeader> h = Parse(
      FileWithHeaderJson(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"), HasSubstr("end past the end of the file"),
                    HasSubstr("8 data bytes"), HasSubstr("truncated")));
}

TEST(HeaderTest, RejectsTrailingBytesAfterTheLastTensor) {
  StatusOr<SafetensorsHeader> h = Parse(
      FileWithHeaderJson(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"),
                    HasSubstr("4 bytes before the end of the file"), HasSubstr("belong to no tensor")));
}

TEST(HeaderTest, RejectsShapeWhoseProductOverflows) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("tensor 'w'"), HasSubstr("overflows")));
}

TEST(HeaderTest, RejectsNonStringMetadataValue) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"__metadata__":{"format":1},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("\"__metadata__\" key 'format' has the number 1"),
                    HasSubstr("must be strings")));
}

TEST(HeaderTest, RejectsMetadataThatIsNotAnObject) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(R"({"__metadata__":["pt"]})", 0));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(),
              AllOf(HasSubstr(kFile), HasSubstr("\"__metadata__\" must be an object"),
                    HasSubstr("found an array")));
}

TEST(HeaderTest, RejectsTensorListedTwice) {
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(
      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
      R"("w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
      1));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("tensor 'w' twice")));
}

TEST(HeaderTest, RejectsExcessiveNesting) {
  std::string json = R"({"__metadata__":)" + std::string(200, '[') + std::string(200, ']') + "}";
  StatusOr<SafetensorsHeader> h = Parse(FileWithHeaderJson(json, 0));
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), AllOf(HasSubstr(kFile), HasSubstr("deeper than 128 levels")));
}

}  // namespace
}  // namespace tensorfs
