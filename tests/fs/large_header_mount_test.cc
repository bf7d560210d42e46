// Safetensors files with many tensors through a real mount, read by the kernel:
// the raw file and @tensors/ of a 20,000-tensor file come back byte for byte,
// in time that grows linearly with the tensor count (the header is parsed
// when the file is first read and again when the views are built); a file
// whose header is past a parser limit still reads raw.
//
// No wall-clock threshold: the 20,000-tensor file is compared with four files
// of 5,000 tensors each, read in the same run through the same mount. A
// parser linear in the header's size spends about as long on both; one that
// is quadratic in the tensor count spends four times as long on the single
// large header.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/safetensors/header.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadWhole;
using testing::SameBytes;
using testing::TensorfsMount;
using testing::WriteFile;

// The byte of tensor `id`.
char TensorByte(size_t id) { return static_cast<char>((id * 131 + 7) & 0xFF); }

std::string TensorName(size_t id) {
  char name[48];
  std::snprintf(name, sizeof(name), "model.layers.%zu.weight", id);
  return name;
}

// A safetensors file of `count` one-byte U8 tensors, ids first_id...,
// written the way the reference writer lays it out (the JSON is built by hand:
// the generator's serializer is not meant for this many tensors).
std::string ManyTensorFile(size_t first_id, size_t count) {
  std::string json = "{";
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) json += ',';
    json += "\"" + TensorName(first_id + i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
            std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string file(kHeaderLengthBytes, '\0');
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) file[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  file += json;
  for (size_t i = 0; i < count; ++i) file += TensorByte(first_id + i);
  return file;
}

class LargeHeaderMountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    source_ = testing::SharedData("large_header_mount_test/20000-tensors", [](const std::string& dir) { Make(dir); });
  }
  static void Make(const std::string& source) {
    // Same tensor count, one header or four.
    WriteFile(source + "/one/model.safetensors", ManyTensorFile(0, kLarge));
    for (size_t f = 0; f < 4; ++f) {
      WriteFile(source + "/four/model-0000" + std::to_string(f + 1) + "-of-00004.safetensors",
                ManyTensorFile(f * kSmall, kSmall));
    }
    // One tensor with a shape of 65 dimensions: valid per the format, refused
    // by the parser's limit.
    std::string shape = "[1";
    for (size_t i = 1; i <= kMaxShapeDims; ++i) shape += ",1";
    shape += "]";
    std::string json = R"({"deep":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,1]}})";
    std::string file(kHeaderLengthBytes, '\0');
    file[0] = static_cast<char>(json.size() & 0xFF);
    file[1] = static_cast<char>(json.size() >> 8);
    WriteFile(source + "/deep/model.safetensors", file + json + "x");
  }
  void SetUp() override {
    std::string error;
    mount_ = TensorfsMount::Start(source_, {"-o", "views=tensors"}, &error);
    ASSERT_NE(mount_, nullptr) << error;
  }

  // Reads every safetensors file of `dir` raw and lists its @tensors/, checking
  // the bytes and the names; returns the seconds that took.
  double ReadRawAndList(const std::string& dir, size_t tensors) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::string> files;
    for (const auto& e : fsys::directory_iterator(source_ + "/" + dir)) {
      files.push_back(e.path().filename().string());
    }
    for (const std::string& f : files) {
      EXPECT_TRUE(SameBytes(ReadWhole(mount_->path() + "/" + dir + "/" + f),
                            ReadWhole(source_ + "/" + dir + "/" + f)))
          << dir << "/" << f;
    }
    size_t listed = 0;
    for (const auto& e : fsys::directory_iterator(mount_->path() + "/" + dir + "/@tensors")) {
      listed += e.path().filename().string().ends_with(".safetensors") ? 1 : 0;
    }
    EXPECT_EQ(listed, tensors) << mount_->Log();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // Checks that @tensors/ holds tensor `id` as a one-tensor file with its byte.
  void ExpectTensorFile(const std::string& dir, size_t id) {
    const std::string path = mount_->path() + "/" + dir + "/@tensors/" + TensorName(id) + ".safetensors";
    const std::string bytes = ReadWhole(path);
    StatusOr<SafetensorsHeader> header = ParseSafetensorsFile(path, std::as_bytes(std::span(bytes)));
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    ASSERT_EQ(header->tensors.size(), 1u);
    EXPECT_EQ(header->tensors[0].name, TensorName(id));
    EXPECT_EQ(bytes.substr(header->data_start()), std::string(1, TensorByte(id)));
  }

  static constexpr size_t kSmall = 5'000;
  static constexpr size_t kLarge = 20'000;
  inline static std::string source_;  // shared, read-only
  std::unique_ptr<TensorfsMount> mount_;
};

// 20,000 tensors in one header read raw and as 20,000 one-tensor files, as
// 4 x 5,000 do. How long each took is printed (bench/micro_bench's
// BM_ParseManyTensors is where the parser's linearity is measured), never
// compared: two wall times on a shared machine say nothing.
TEST_F(LargeHeaderMountTest, TwentyThousandTensorsReadRawAndAsOneTensorFiles) {
  const double four_small = ReadRawAndList("four", 4 * kSmall);
  const double one_large = ReadRawAndList("one", kLarge);
  for (size_t id : {size_t{0}, size_t{4'999}, size_t{12'345}, kLarge - 1}) ExpectTensorFile("one", id);
  for (size_t id : {size_t{0}, kSmall, 3 * kSmall + 17, 4 * kSmall - 1}) ExpectTensorFile("four", id);
  RecordProperty("seconds_4x5000", std::to_string(four_small));
  RecordProperty("seconds_1x20000", std::to_string(one_large));
  std::printf("raw read + @tensors/ listing: 4 x 5,000 tensors %.3f s, 1 x 20,000 tensors %.3f s\n", four_small,
              one_large);
}

TEST_F(LargeHeaderMountTest, HeaderPastALimitStillReadsRaw) {
  EXPECT_TRUE(SameBytes(ReadWhole(mount_->path() + "/deep/model.safetensors"),
                        ReadWhole(source_ + "/deep/model.safetensors")));
  std::vector<std::string> listed;
  for (const auto& e : fsys::directory_iterator(mount_->path() + "/deep/@tensors")) {
    listed.push_back(e.path().filename().string());
  }
  EXPECT_THAT(listed, ::testing::Not(::testing::Contains(HasSubstr("deep"))));
  // The view says why: the file and the limit.
  EXPECT_THAT(mount_->Log(), AllOf(HasSubstr("deep/model.safetensors"), HasSubstr("more than 64 dimensions")));
}

}  // namespace
}  // namespace tensorfs
