// The limits on a layer regex (layers.h): a back-reference or count too long
// for std::regex's compiler (which overflows a long on it) and a pattern long
// enough to overflow the stack through its recursion are refused, from the
// mount option and from LayerGrouper::Create, with a message naming the limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/options/mount_options.h"
#include "core/safetensors/layers.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;

TEST(LayerRegexLimitsTest, RefusesBackReferenceTooLongForTheRegexCompiler) {
  // Found by fuzz_mount_options: UBSan reports a signed overflow in libstdc++.
  const std::string pattern = R"(777\`\\\\..\88888888888888883888..07)";
  StatusOr<LayerGrouper> grouper = LayerGrouper::Create(pattern);
  ASSERT_FALSE(grouper.ok());
  EXPECT_EQ(grouper.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(grouper.status().message(), HasSubstr("more than 9 digits"));
  MountOptions options;
  Status applied = ApplyMountOption(options, "layer_regex", pattern);
  ASSERT_FALSE(applied.ok());
  EXPECT_THAT(applied.message(), HasSubstr("over the limit of 9"));
}

TEST(LayerRegexLimitsTest, RefusesRepetitionCountTooLong) {
  EXPECT_FALSE(LayerGrouper::Create("^(a{99999999999999999999})").ok());
}

TEST(LayerRegexLimitsTest, RefusesPatternLongerThanTheLimit) {
  std::string pattern = "^(";
  while (pattern.size() <= kMaxLayerRegexLength) pattern += "a|";
  pattern += "b)";
  StatusOr<LayerGrouper> grouper = LayerGrouper::Create(pattern);
  ASSERT_FALSE(grouper.ok());
  EXPECT_THAT(grouper.status().message(), HasSubstr("over the limit of 1024"));
}

TEST(LayerRegexLimitsTest, AcceptsOrdinaryPatterns) {
  EXPECT_TRUE(LayerGrouper::Create(R"(^(model\.layers\.\d+\.))").ok());
  EXPECT_TRUE(LayerGrouper::Create(R"(^(blocks\.[0-9]{1,3}\.)(x123456789)?)").ok());
  MountOptions options;
  EXPECT_TRUE(ApplyMountOption(options, "layer_regex", R"(^(model\.layers\.\d+\.))").ok());
}

}  // namespace
}  // namespace tensorfs
