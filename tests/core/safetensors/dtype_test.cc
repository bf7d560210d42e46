#include "core/safetensors/dtype.h"

#include <gtest/gtest.h>

namespace tensorfs {
namespace {

TEST(DtypeTest, EveryNameRoundTrips) {
  for (Dtype d : AllDtypes()) {
    std::optional<Dtype> parsed = ParseDtype(DtypeName(d));
    ASSERT_TRUE(parsed.has_value()) << DtypeName(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(AllDtypes().size(), 22u);
}

TEST(DtypeTest, UnknownAndWrongCaseNamesAreRejected) {
  EXPECT_FALSE(ParseDtype("F17").has_value());
  EXPECT_FALSE(ParseDtype("bf16").has_value());
  EXPECT_FALSE(ParseDtype("").has_value());
}

TEST(DtypeTest, BitsMatchTheFormat) {
  EXPECT_EQ(DtypeBits(Dtype::BOOL), 8u);
  EXPECT_EQ(DtypeBits(Dtype::F4), 4u);
  EXPECT_EQ(DtypeBits(Dtype::F6_E2M3), 6u);
  EXPECT_EQ(DtypeBits(Dtype::F6_E3M2), 6u);
  EXPECT_EQ(DtypeBits(Dtype::F8_E4M3FNUZ), 8u);
  EXPECT_EQ(DtypeBits(Dtype::BF16), 16u);
  EXPECT_EQ(DtypeBits(Dtype::F32), 32u);
  EXPECT_EQ(DtypeBits(Dtype::C64), 64u);
  EXPECT_EQ(DtypeBits(Dtype::U64), 64u);
}

TEST(DtypeTest, FloatClassification) {
  EXPECT_TRUE(IsFloatDtype(Dtype::BF16));
  EXPECT_TRUE(IsFloatDtype(Dtype::F8_E5M2));
  EXPECT_FALSE(IsFloatDtype(Dtype::I32));
  EXPECT_FALSE(IsFloatDtype(Dtype::BOOL));
}

}  // namespace
}  // namespace tensorfs
