#include "core/views/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/core/views/views_reference_data.h"

namespace tensorfs::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

float FromBits(uint32_t bits) { return std::bit_cast<float>(bits); }

// The split points of bnb's dQuantizeNF4 tree, ascending.
constexpr float kNf4Thresholds[15] = {
    -0.8480964004993439f,  -0.6106329262256622f, -0.4599952697753906f,
    -0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f,
    -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,
    0.2035212516784668f,   0.2920137718319893f,   0.3893125355243683f,
    0.5016634166240692f,   0.6427869200706482f,   0.8614784181118011f,
};

// Runs QuantizeNf4 over `x` and returns the codes unpacked, one per element
// (plus the padding code when x.size() is odd).
std::vector<uint8_t> Nf4Codes(const std::vector<float>& x, std::vector<float>* absmax = nullptr,
                              size_t blocksize = kNf4BlockSize) {
  std::vector<uint8_t> packed((x.size() + 1) / 2);
  std::vector<float> am((x.size() + blocksize - 1) / blocksize);
  QuantizeNf4(x, blocksize, packed, am);
  std::vector<uint8_t> codes;
  for (uint8_t b : packed) {
    codes.push_back(b >> 4);
    codes.push_back(b & 0x0f);
  }
  if (absmax != nullptr) *absmax = am;
  return codes;
}

std::vector<uint8_t> Blockwise8Codes(const std::vector<float>& x, std::vector<float>* absmax = nullptr,
                                     size_t blocksize = kBlockwise8BlockSize) {
  std::vector<uint8_t> codes(x.size());
  std::vector<float> am((x.size() + blocksize - 1) / blocksize);
  QuantizeBlockwise8(x, blocksize, codes, am);
  if (absmax != nullptr) *absmax = am;
  return codes;
}

// ---- Code tables ----

TEST(Nf4CodeTest, MatchesBitsandbytesNf4Table) {
  const std::array<float, 16> expected = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
      0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
      0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  EXPECT_EQ(Nf4Code(), expected);
}

TEST(DynamicCodeTest, Has256StrictlyAscendingEntries) {
  const std::array<float, 256>& code = DynamicCode();
  ASSERT_EQ(code.size(), 256u);
  for (size_t i = 1; i < code.size(); ++i) EXPECT_LT(code[i - 1], code[i]) << i;
}

TEST(DynamicCodeTest, HoldsZeroAndOneButNotMinusOne) {
  const std::array<float, 256>& code = DynamicCode();
  EXPECT_EQ(code[127], 0.0f);
  EXPECT_EQ(code[255], 1.0f);
  // create_dynamic_map appends 1.0 but not -1.0: the most negative value is the
  // negated largest mean, (1 - 0.9f/64 + 1) / 2.
  EXPECT_EQ(code[0], -0.992968738079071f);
}

TEST(DynamicCodeTest, IsSymmetricBelowOne) {
  const std::array<float, 256>& code = DynamicCode();
  for (size_t i = 0; i < 255; ++i) EXPECT_EQ(code[i], -code[254 - i]) << i;
}

// All 256 entries, bit for bit, against the numpy reference's
// create_dynamic_map (bitsandbytes' algorithm, evaluated in float32 as torch
// does), exported into views_reference_data.h.
TEST(DynamicCodeTest, EqualsBitsandbytesMapEntryForEntry) {
  const std::array<float, 256>& code = DynamicCode();
  for (size_t i = 0; i < code.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(code[i]), reference::kDynamicMapBits[i])
        << "entry " << i << ": " << code[i] << ", expected " << FromBits(reference::kDynamicMapBits[i]);
  }
}

TEST(DynamicCodeTest, SpotValuesAreFloat32Arithmetic) {
  const std::array<float, 256>& code = DynamicCode();
  // i = 0: linspace(0.1, 1, 2) = {0.1f, 1.0f}; mean 0.55f times float32(1e-6).
  EXPECT_EQ(code[128], 1e-6f * ((0.1f + 1.0f) / 2.0f));
  EXPECT_EQ(code[128], 5.500000384017767e-07f);
  // i = 6, the top mean: boundaries 1 - 0.9f/64 and 1.
  const float step = (1.0f - 0.1f) / 64.0f;
  EXPECT_EQ(code[254], ((1.0f - step) + 1.0f) / 2.0f);
  EXPECT_EQ(code[191], (0.1f + (0.1f + step * 1.0f)) / 2.0f);  // the smallest mean at i = 6
  // i = 5, the smallest mean at scale 0.1.
  const float step5 = (1.0f - 0.1f) / 32.0f;
  EXPECT_EQ(code[159], 0.1f * ((0.1f + (0.1f + step5 * 1.0f)) / 2.0f));
  EXPECT_NEAR(code[159], 0.0114063, 1e-6);
}

// ---- BF16 / F16 ----

TEST(Bf16Test, WideningIsExactForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), h << 16);
    EXPECT_EQ(FloatToBf16(f), std::isnan(f) ? (h | 0x0040) : h) << h;
  }
}

TEST(Bf16Test, RoundsHalfwayToEven) {
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(FloatToBf16(FromBits(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808001)), 0x3f81);  // just past the tie
  EXPECT_EQ(FloatToBf16(FromBits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(FloatToBf16(FromBits(0xbf818000)), 0xbf82);  // sign does not matter
}

TEST(Bf16Test, OverflowRoundsToInfinity) {
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7f7fff)), 0x7f7f);  // largest that stays finite
}

TEST(Bf16Test, InfinityZeroAndSubnormalsKeepTheirClass) {
  EXPECT_EQ(FloatToBf16(kInf), 0x7f80);
  EXPECT_EQ(FloatToBf16(-kInf), 0xff80);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000)), 0x0000);  // subnormal tie to even
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000)), 0x0002);
  EXPECT_EQ(FloatToBf16(FromBits(0x807fffff)), 0x8080);  // rounds up to the smallest normal
}

TEST(Bf16Test, NanStaysQuietNanWithSign) {
  EXPECT_EQ(FloatToBf16(kNan), 0x7fc0);
  EXPECT_EQ(FloatToBf16(-kNan), 0xffc0);
  // A signalling NaN whose payload is only in the dropped half.
  EXPECT_EQ(FloatToBf16(FromBits(0x7f800001)), 0x7fc0);
  EXPECT_EQ(FloatToBf16(FromBits(0xff800001)), 0xffc0);
}

TEST(F16Test, WideningIsExactForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = F16ToFloat(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    EXPECT_EQ(std::isnan(f), nan) << h;
    EXPECT_EQ(FloatToF16(f), nan ? (h | 0x0200) : h) << h;
  }
}

TEST(F16Test, WideningKnownValues) {
  EXPECT_EQ(F16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(F16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(F16ToFloat(0xfc00), -kInf);
  EXPECT_EQ(std::bit_cast<uint32_t>(F16ToFloat(0x8000)), 0x80000000u);
}

TEST(F16Test, RoundsHalfwayToEven) {
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, even below
  EXPECT_EQ(FloatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, even above
  EXPECT_EQ(FloatToF16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  EXPECT_EQ(FloatToF16(-(1.0f + 3 * std::ldexp(1.0f, -11))), 0xbc02);
}

TEST(F16Test, OverflowBecomesInfinity) {
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65519.996f), 0x7bff);  // below the tie
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);    // the tie rounds to even: inf
  EXPECT_EQ(FloatToF16(1e6f), 0x7c00);
  EXPECT_EQ(FloatToF16(-1e30f), 0xfc00);
  EXPECT_EQ(FloatToF16(kInf), 0x7c00);
  EXPECT_EQ(FloatToF16(-kInf), 0xfc00);
}

TEST(F16Test, SubnormalsRoundToNearestEven) {
  const float unit = std::ldexp(1.0f, -24);  // the F16 subnormal step
  EXPECT_EQ(FloatToF16(unit), 0x0001);
  EXPECT_EQ(FloatToF16(unit / 2), 0x0000);          // tie to even (zero)
  EXPECT_EQ(FloatToF16(unit * 1.5f), 0x0002);       // tie to even (two)
  EXPECT_EQ(FloatToF16(unit * 2.5f), 0x0002);       // tie to even (two)
  EXPECT_EQ(FloatToF16(std::nextafter(unit / 2, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToF16(-unit * 3), 0x8003);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToF16(std::ldexp(1023.5f, -24)), 0x0400);  // tie between 0x3ff and 0x400: even
  EXPECT_EQ(FloatToF16(1e-10f), 0x0000);
  EXPECT_EQ(FloatToF16(-1e-10f), 0x8000);
  EXPECT_EQ(FloatToF16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(F16Test, NanStaysQuietNanWithSignAndZeroKeepsSign) {
  EXPECT_EQ(FloatToF16(kNan), 0x7e00);
  EXPECT_EQ(FloatToF16(-kNan), 0xfe00);
  EXPECT_EQ(FloatToF16(FromBits(0x7f800001)), 0x7e00);  // signalling, low payload
  EXPECT_EQ(FloatToF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToF16(0.0f), 0x0000);
}

TEST(DecodeFloatsTest, ReadsLittleEndianElements) {
  const std::vector<std::byte> bf16 = {std::byte{0x80}, std::byte{0x3f}, std::byte{0x00},
                                       std::byte{0xc0}};
  std::vector<float> out(2);
  DecodeFloats(Dtype::BF16, bf16, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f}));
  const std::vector<std::byte> f16 = {std::byte{0x00}, std::byte{0x3c}, std::byte{0x01},
                                      std::byte{0x00}};
  DecodeFloats(Dtype::F16, f16, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, std::ldexp(1.0f, -24)}));
  const std::vector<std::byte> f32 = {std::byte{0x00}, std::byte{0x00}, std::byte{0x80},
                                      std::byte{0x3f}};
  std::vector<float> one(1);
  DecodeFloats(Dtype::F32, f32, one);
  EXPECT_EQ(one[0], 1.0f);
}

TEST(EncodeHalfTest, WritesLittleEndianElements) {
  const std::vector<float> in = {1.0f, -2.0f};
  std::vector<std::byte> out(4);
  EncodeHalf(Dtype::BF16, in, out);
  EXPECT_EQ(out, (std::vector<std::byte>{std::byte{0x80}, std::byte{0x3f}, std::byte{0x00},
                                         std::byte{0xc0}}));
  EncodeHalf(Dtype::F16, in, out);
  EXPECT_EQ(out, (std::vector<std::byte>{std::byte{0x00}, std::byte{0x3c}, std::byte{0x00},
                                         std::byte{0xc0}}));
}

// ---- Block absmax ----

TEST(BlockAbsmaxTest, IgnoresNanAndCoversThePartialLastBlock) {
  const std::vector<float> x = {1.0f, -3.0f, kNan, 2.0f, kNan, kNan, -0.5f};
  std::vector<float> absmax(3);
  BlockAbsmax(x, 3, absmax);
  EXPECT_EQ(absmax, (std::vector<float>{3.0f, 2.0f, 0.5f}));
}

TEST(BlockAbsmaxTest, AllNanOrZeroBlockIsZeroAndInfIsInf) {
  const std::vector<float> x = {kNan, kNan, -0.0f, 0.0f, 1.0f, -kInf};
  std::vector<float> absmax(3);
  BlockAbsmax(x, 2, absmax);
  EXPECT_EQ(absmax, (std::vector<float>{0.0f, 0.0f, kInf}));
}

// ---- NF4 ----

TEST(QuantizeNf4Test, EveryCodeValueMapsToItsCode) {
  std::vector<float> x(Nf4Code().begin(), Nf4Code().end());  // holds 1.0: absmax 1, s = 1
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Nf4Codes(x, &absmax);
  EXPECT_EQ(absmax, std::vector<float>{1.0f});
  for (uint8_t i = 0; i < 16; ++i) EXPECT_EQ(codes[i], i);
}

TEST(QuantizeNf4Test, ValueAtThresholdTakesTheLowerCode) {
  // With 1.0 in the block, y == x, so each threshold is hit exactly.
  std::vector<float> x = {1.0f, 1.0f};
  for (float t : kNf4Thresholds) {
    x.push_back(t);
    x.push_back(std::nextafter(t, 2.0f));
  }
  const std::vector<uint8_t> codes = Nf4Codes(x);
  for (uint8_t k = 0; k < 15; ++k) {
    EXPECT_EQ(codes[2 + 2 * k], k) << "at threshold " << int{k};
    EXPECT_EQ(codes[3 + 2 * k], k + 1) << "just above threshold " << int{k};
  }
}

TEST(QuantizeNf4Test, ScalesByReciprocalOfAbsmax) {
  // absmax 4: y = x * 0.25f. 1.0 -> 0.25 (code 10), -4 -> -1 (code 0),
  // 2.0 -> 0.5 (code 12), 0.16 -> 0.04, just above the 7/8 threshold: 8.
  const std::vector<uint8_t> codes = Nf4Codes({1.0f, -4.0f, 2.0f, 0.16f});
  EXPECT_EQ(codes, (std::vector<uint8_t>{10, 0, 12, 8}));
}

TEST(QuantizeNf4Test, PacksHighNibbleFirst) {
  std::vector<uint8_t> packed(2);
  std::vector<float> absmax(1);
  QuantizeNf4(std::vector<float>{-1.0f, 1.0f, 0.0f, 0.5f}, kNf4BlockSize, packed, absmax);
  EXPECT_EQ(packed, (std::vector<uint8_t>{0x0f, 0x7c}));
}

TEST(QuantizeNf4Test, AllZeroBlockGivesAbsmaxZeroAndCodeZero) {
  std::vector<float> x(kNf4BlockSize, 0.0f);
  x.push_back(1.0f);  // a second, normal block is unaffected
  x.push_back(0.0f);
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Nf4Codes(x, &absmax);
  EXPECT_EQ(absmax, (std::vector<float>{0.0f, 1.0f}));
  for (size_t i = 0; i < kNf4BlockSize; ++i) EXPECT_EQ(codes[i], 0) << i;  // 0 * inf = NaN
  EXPECT_EQ(codes[kNf4BlockSize], 15);
  EXPECT_EQ(codes[kNf4BlockSize + 1], 7);
}

TEST(QuantizeNf4Test, PartialOddLastBlockPadsWithCodeOfZero) {
  std::vector<float> x(kNf4BlockSize, 0.25f);
  x.insert(x.end(), {0.5f, -0.25f, 1.0f});  // 67 elements: 3 in the last block
  std::vector<uint8_t> packed(34);
  std::vector<float> absmax(2);
  QuantizeNf4(x, kNf4BlockSize, packed, absmax);
  EXPECT_EQ(absmax, (std::vector<float>{0.25f, 1.0f}));
  EXPECT_EQ(packed[0], 0xff);
  EXPECT_EQ(packed[32], 0xc4);  // 0.5 -> 12, -0.25 -> 4
  EXPECT_EQ(packed[33], 0xf7);  // 1.0 -> 15, padding 0.0 -> 7
}

TEST(QuantizeNf4Test, OddZeroLastBlockPadsWithCodeZero) {
  std::vector<uint8_t> packed(1);
  std::vector<float> absmax(1);
  QuantizeNf4(std::vector<float>{0.0f}, kNf4BlockSize, packed, absmax);
  EXPECT_EQ(absmax[0], 0.0f);
  EXPECT_EQ(packed[0], 0x00);  // the padding is 0 * inf = NaN too
}

TEST(QuantizeNf4Test, NanElementTakesCodeZero) {
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Nf4Codes({kNan, 1.0f, -kNan, 0.0f}, &absmax);
  EXPECT_EQ(absmax[0], 1.0f);
  EXPECT_EQ(codes, (std::vector<uint8_t>{0, 15, 0, 7}));
}

TEST(QuantizeNf4Test, InfInBlockZeroesFiniteValuesAndCodesInfAsZero) {
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Nf4Codes({kInf, 1.0f, -2.0f, -kInf}, &absmax);
  EXPECT_EQ(absmax[0], kInf);
  EXPECT_EQ(codes, (std::vector<uint8_t>{0, 7, 7, 0}));
}

TEST(QuantizeNf4Test, BlocksizeOtherThan64SplitsBlocks) {
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Nf4Codes({1.0f, 0.5f, 2.0f, -1.0f, 4.0f, 4.0f}, &absmax, 2);
  EXPECT_EQ(absmax, (std::vector<float>{1.0f, 2.0f, 4.0f}));
  EXPECT_EQ(codes, (std::vector<uint8_t>{15, 12, 15, 2, 15, 15}));  // -0.5 -> 2
}

// ---- 8-bit blockwise ----

TEST(QuantizeBlockwise8Test, EveryMapValueMapsToItsIndex) {
  const std::array<float, 256>& code = DynamicCode();
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Blockwise8Codes(std::vector<float>(code.begin(), code.end()), &absmax);
  EXPECT_EQ(absmax, std::vector<float>{1.0f});
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(codes[i], i);
}

TEST(QuantizeBlockwise8Test, PicksTheNearerNeighbour) {
  const std::array<float, 256>& code = DynamicCode();
  std::vector<float> x = {1.0f};
  for (size_t j = 0; j < 255; ++j) {
    const float mid = (code[j] + code[j + 1]) * 0.5f;
    x.push_back(std::nextafter(mid, -2.0f));
    x.push_back(std::nextafter(mid, 2.0f));
  }
  const std::vector<uint8_t> codes = Blockwise8Codes(x);
  for (size_t j = 0; j < 255; ++j) {
    EXPECT_EQ(codes[1 + 2 * j], j) << j;
    EXPECT_EQ(codes[2 + 2 * j], j + 1) << j;
  }
}

TEST(QuantizeBlockwise8Test, MidpointTieGoesToTheEvenIndex) {
  const std::array<float, 256>& code = DynamicCode();
  std::vector<float> x = {1.0f};
  for (size_t j = 0; j < 255; ++j) x.push_back((code[j] + code[j + 1]) * 0.5f);
  const std::vector<uint8_t> codes = Blockwise8Codes(x);
  for (size_t j = 0; j < 255; ++j) EXPECT_EQ(codes[1 + j], j % 2 == 0 ? j : j + 1) << j;
}

// bnb's dQuantize<0> as written in csrc/kernels.cu, branches and all; the
// library computes the same function differently.
uint8_t ReferenceDQuantize(const std::array<float, 256>& code, float x) {
  int pivot = 127;
  int upper_pivot = 255;
  int lower_pivot = 0;
  float lower = -1.0f;
  float upper = 1.0f;
  float val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = code[pivot];
  }
  if (upper_pivot == 255) upper = code[upper_pivot];
  if (lower_pivot == 0) lower = code[lower_pivot];
  if (x > val) {
    const float midpoint = (upper + val) * 0.5f;
    return static_cast<uint8_t>(x > midpoint ? upper_pivot : pivot);
  }
  const float midpoint = (lower + val) * 0.5f;
  return static_cast<uint8_t>(x < midpoint ? lower_pivot : pivot);
}

TEST(QuantizeBlockwise8Test, AgreesWithBitsandbytesSearchLoop) {
  const std::array<float, 256>& code = DynamicCode();
  // 1.0 first so that absmax is 1 and y == x: every probe is searched as is.
  std::vector<float> x = {1.0f, -1.0f, 0.0f, -0.0f, kNan};
  auto probe = [&](float v) {
    for (float p : {v, std::nextafter(v, -2.0f), std::nextafter(v, 2.0f)}) {
      if (std::fabs(p) <= 1.0f) x.push_back(p);
    }
  };
  for (size_t j = 0; j < 256; ++j) {
    probe(code[j]);
    if (j < 255) probe((code[j] + code[j + 1]) * 0.5f);
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 0);
  while (x.size() < 100000) x.push_back(std::ldexp(uniform(rng), exponent(rng)));
  const std::vector<uint8_t> codes = Blockwise8Codes(x, nullptr, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(codes[i], ReferenceDQuantize(code, x[i])) << x[i];
}

TEST(QuantizeBlockwise8Test, MinusOneMapsToTheMostNegativeCode) {
  const std::vector<uint8_t> codes = Blockwise8Codes({-1.0f, 0.0f, 1.0f});
  EXPECT_EQ(codes, (std::vector<uint8_t>{0, 127, 255}));
}

TEST(QuantizeBlockwise8Test, AllZeroBlockGivesAbsmaxZeroAndCodeZero) {
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Blockwise8Codes(std::vector<float>(10, 0.0f), &absmax);
  EXPECT_EQ(absmax, std::vector<float>{0.0f});
  EXPECT_EQ(codes, std::vector<uint8_t>(10, 0));
}

TEST(QuantizeBlockwise8Test, PartialLastBlockUsesItsOwnAbsmax) {
  std::vector<float> x(kBlockwise8BlockSize, 8.0f);
  x.insert(x.end(), {0.5f, -1.0f, 0.0f});
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Blockwise8Codes(x, &absmax);
  EXPECT_EQ(absmax, (std::vector<float>{8.0f, 1.0f}));
  EXPECT_EQ(codes[0], 255);
  EXPECT_EQ(codes[kBlockwise8BlockSize + 1], 0);
  EXPECT_EQ(codes[kBlockwise8BlockSize + 2], 127);
  const float y = 0.5f;
  const uint8_t c = codes[kBlockwise8BlockSize];
  EXPECT_LE(std::fabs(DynamicCode()[c] - y), 0.0140625f / 2);
}

TEST(QuantizeBlockwise8Test, NanAndInfFollowTheSearch) {
  std::vector<float> absmax;
  // NaN fails every `x > val`: the search walks to index 0.
  EXPECT_EQ(Blockwise8Codes({kNan, 1.0f}), (std::vector<uint8_t>{0, 255}));
  // inf: absmax inf, s = 0, finite -> 0.0 (127), inf * 0 = NaN -> 0.
  EXPECT_EQ(Blockwise8Codes({kInf, 3.0f, -kInf}, &absmax), (std::vector<uint8_t>{0, 127, 0}));
  EXPECT_EQ(absmax[0], kInf);
}

// ---- int8 row-wise ----

TEST(QuantizeRowInt8Test, RoundsHalfToEven) {
  const std::vector<float> row = {127.0f, 63.5f, -0.5f, 0.5f, 1.5f, 2.5f, -2.5f, -3.5f};
  std::vector<int8_t> out(row.size());
  EXPECT_EQ(QuantizeRowInt8(row, out), 127.0f);
  EXPECT_EQ(out, (std::vector<int8_t>{127, 64, 0, 0, 2, 2, -2, -4}));
}

TEST(QuantizeRowInt8Test, ScalesBy127OverAbsmax) {
  const std::vector<float> row = {-2.0f, 1.0f, 0.25f};
  std::vector<int8_t> out(row.size());
  EXPECT_EQ(QuantizeRowInt8(row, out), 2.0f);
  EXPECT_EQ(out, (std::vector<int8_t>{-127, 64, 16}));  // 63.5 -> 64, 15.875 -> 16
}

TEST(QuantizeRowInt8Test, ZeroRowGivesZerosAndScbZero) {
  const std::vector<float> row(5, 0.0f);
  std::vector<int8_t> out(row.size(), 99);
  EXPECT_EQ(QuantizeRowInt8(row, out), 0.0f);
  EXPECT_EQ(out, std::vector<int8_t>(5, 0));
}

TEST(QuantizeRowInt8Test, NanGivesZeroAndIsIgnoredByAbsmax) {
  const std::vector<float> row = {kNan, 4.0f, -2.0f};
  std::vector<int8_t> out(row.size());
  EXPECT_EQ(QuantizeRowInt8(row, out), 4.0f);
  EXPECT_EQ(out, (std::vector<int8_t>{0, 127, -64}));  // -63.5 -> -64
}

TEST(QuantizeRowInt8Test, InfRowGivesZeros) {
  const std::vector<float> row = {kInf, 1.0f, -kInf};
  std::vector<int8_t> out(row.size());
  EXPECT_EQ(QuantizeRowInt8(row, out), kInf);
  EXPECT_EQ(out, (std::vector<int8_t>{0, 0, 0}));
}

TEST(QuantizeRowInt8Test, ExtremesStayWithinPlusMinus127) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int e = -140; e <= 127; e += 3) {
    const float r = std::ldexp(mantissa(rng), e);
    if (!std::isfinite(r)) continue;
    const std::vector<float> row = {r, -r, std::nextafter(r, 0.0f)};
    std::vector<int8_t> out(row.size());
    QuantizeRowInt8(row, out);
    EXPECT_EQ(out[0], 127) << r;
    EXPECT_EQ(out[1], -127) << r;
    EXPECT_GE(out[2], 126) << r;
  }
}

// ---- Round trip ----

TEST(RoundTripTest, DequantizedNf4IsWithinHalfTheLargestGap) {
  const std::array<float, 16>& code = Nf4Code();
  float gap = 0;
  for (size_t i = 1; i < code.size(); ++i) gap = std::max(gap, code[i] - code[i - 1]);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> x(64 * 100 + 17);
  for (float& v : x) v = dist(rng);
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Nf4Codes(x, &absmax);
  for (size_t i = 0; i < x.size(); ++i) {
    const float am = absmax[i / kNf4BlockSize];
    const float deq = code[codes[i]] * am;
    EXPECT_LE(std::fabs(x[i] - deq), (gap / 2) * am * (1 + 1e-5f)) << i;
  }
}

TEST(RoundTripTest, DequantizedBlockwise8IsWithinHalfTheLargestGap) {
  const std::array<float, 256>& code = DynamicCode();
  // -1.0 lies beyond code[0]; count that distance twice as a gap.
  float gap = 2 * (1.0f + code[0]);
  for (size_t i = 1; i < code.size(); ++i) gap = std::max(gap, code[i] - code[i - 1]);
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(2048 * 5 + 333);
  for (float& v : x) v = dist(rng);
  std::vector<float> absmax;
  const std::vector<uint8_t> codes = Blockwise8Codes(x, &absmax);
  for (size_t i = 0; i < x.size(); ++i) {
    const float am = absmax[i / kBlockwise8BlockSize];
    // The slack covers the float32 rounding of x * s and of code * absmax.
    EXPECT_LE(std::fabs(x[i] - code[codes[i]] * am), (gap / 2) * am * (1 + 1e-5f)) << i;
  }
}

}  // namespace
}  // namespace tensorfs::quant
