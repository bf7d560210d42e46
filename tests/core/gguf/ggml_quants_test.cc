#include "core/gguf/ggml_quants.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/gguf/ggml_quants_paths.h"
#include "core/gguf/ggml_types.h"
#include "tests/core/gguf/ggml_reference.h"

namespace tensorfs {
namespace {

namespace ref = testing::ggml_ref;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFloat = std::numeric_limits<float>::max();
constexpr float kMinSubnormal = std::numeric_limits<float>::denorm_min();

float FromBits(uint32_t bits) { return std::bit_cast<float>(bits); }

// ---- Types ----

TEST(GgmlTypesTest, BlockGeometryIsGgmlCommonsLayouts) {
  // {elements, bytes}: a half d (2) plus the quants, as ggml-common.h lays out
  // each block: Q4_0 16 nibble bytes, Q5_0 4 high-bit bytes + 16, Q8_0 32
  // int8, Q4_K d+dmin, 12 scale bytes, 128 nibble bytes, Q5_K also 32 high-bit
  // bytes, Q6_K 128 + 64 + 16 scales + d.
  struct Row {
    GgmlType type;
    uint64_t elements;
    uint64_t bytes;
    const char* name;
    uint32_t id;
  };
  const Row rows[] = {
      {GgmlType::kF32, 1, 4, "F32", 0},          {GgmlType::kF16, 1, 2, "F16", 1},
      {GgmlType::kQ4_0, 32, 2 + 16, "Q4_0", 2},  {GgmlType::kQ5_0, 32, 2 + 4 + 16, "Q5_0", 6},
      {GgmlType::kQ5_1, 32, 2 + 2 + 4 + 16, "Q5_1", 7},
      {GgmlType::kQ8_0, 32, 2 + 32, "Q8_0", 8},  {GgmlType::kQ4_K, 256, 4 + 12 + 128, "Q4_K", 12},
      {GgmlType::kQ5_K, 256, 4 + 12 + 32 + 128, "Q5_K", 13},
      {GgmlType::kQ6_K, 256, 128 + 64 + 16 + 2, "Q6_K", 14},
      {GgmlType::kBF16, 1, 2, "BF16", 30},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    EXPECT_EQ(BlockElements(row.type), row.elements);
    EXPECT_EQ(BlockBytes(row.type), row.bytes);
    EXPECT_EQ(GgmlTypeName(row.type), row.name);
    EXPECT_EQ(static_cast<uint32_t>(row.type), row.id);
    EXPECT_EQ(GgmlTypeFromId(row.id), row.type);
  }
}

TEST(GgmlTypesTest, RowBytesCountsWholeBlocks) {
  EXPECT_EQ(RowBytes(GgmlType::kQ8_0, 4096), 4096 / 32 * 34);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_K, 4096), 16 * 144);
  EXPECT_EQ(RowBytes(GgmlType::kQ6_K, 14336), 56 * 210);
  EXPECT_EQ(RowBytes(GgmlType::kF16, 4097), 8194);
  EXPECT_EQ(RowBytes(GgmlType::kF32, 0), 0);
}

TEST(GgmlTypesTest, UnknownIdsAreNotTypes) {
  EXPECT_FALSE(GgmlTypeFromId(3).has_value());  // Q4_1: not written by tensorfs
  EXPECT_FALSE(GgmlTypeFromId(39).has_value());
}

TEST(GgmlTypesDeathTest, RowNotAMultipleOfTheBlockIsABug) {
  EXPECT_DEATH(RowBytes(GgmlType::kQ4_K, 4000), "check failed");
}

// ---- Half and bfloat16 ----

TEST(HalfTest, RoundsToNearestEvenAcrossAllFloatsNearHalves) {
  // Every half's value, the midpoints to its neighbours, and one float either
  // side of each: the rounding decisions that matter.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = ref::HalfToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(Fp32ToFp16(v), h);
    ASSERT_EQ(Fp32ToFp16(-v), h | 0x8000);
    const double next = h + 1 < 0x7c00 ? ref::HalfValue(static_cast<uint16_t>(h + 1)) : 65536.0;
    const float mid = static_cast<float>((ref::HalfValue(static_cast<uint16_t>(h)) + next) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      ASSERT_EQ(Fp32ToFp16(f), ref::NearestHalf(f)) << "f = " << f;
    }
  }
}

TEST(HalfTest, OverflowsToInfinityFrom65520) {
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);
  EXPECT_EQ(Fp32ToFp16(kMaxFloat), 0x7c00);
  EXPECT_EQ(Fp32ToFp16(-kInf), 0xfc00);
}

TEST(HalfTest, TinyValuesBecomeSubnormalsOrZero) {
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);                            // tie: to even (0)
  EXPECT_EQ(Fp32ToFp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(3.0f, -25)), 0x0002);                            // tie: to even (2)
  EXPECT_EQ(Fp32ToFp16(kMinSubnormal), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-kMinSubnormal), 0x8000);
}

TEST(HalfTest, NanKeepsSignAndTopPayloadAsNumpyDoes) {
  EXPECT_EQ(Fp32ToFp16(FromBits(0x7fc00000)), 0x7e00);
  EXPECT_EQ(Fp32ToFp16(FromBits(0xffc00001)), 0xfe00);
  EXPECT_EQ(Fp32ToFp16(FromBits(0x7fa00000)), 0x7d00);
  EXPECT_EQ(Fp32ToFp16(FromBits(0x7f800001)), 0x7c01);  // payload below the kept bits: still a NaN
}

TEST(HalfTest, WideningIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float f = Fp16ToFp32(half);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
      ASSERT_EQ(Fp32ToFp16(f), h);  // payload kept both ways
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref::HalfValue(half)) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
  }
}

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7f7fffff)), 0x7f80);  // the largest float rounds to inf
  EXPECT_EQ(Fp32ToBf16(-kInf), 0xff80);
  EXPECT_EQ(Fp32ToBf16(kMinSubnormal), 0x0000);
}

TEST(Bf16Test, NanIsMadeQuietKeepingSign) {
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7f800001)), 0x7fc0);  // signalling, payload in the dropped half
  EXPECT_EQ(Fp32ToBf16(FromBits(0xff810000)), 0xffc1);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7fc00000)), 0x7fc0);
}

TEST(Bf16Test, WideningIsExact) {
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    EXPECT_EQ(std::bit_cast<uint32_t>(Bf16ToFp32(static_cast<uint16_t>(h))), h << 16);
  }
}

// ---- Quantizers against the reference ----

struct QuantCase {
  GgmlType type;
  std::vector<uint8_t> (*reference)(const float* block);
  void (*decode)(const uint8_t* block, float* out);
};

std::vector<uint8_t> RefQ4_0(const float* x) { return ref::Qx0(x, 4); }
std::vector<uint8_t> RefQ5_0(const float* x) { return ref::Qx0(x, 5); }
std::vector<uint8_t> RefQ4K(const float* x) { return ref::Q45K(x, 15); }
std::vector<uint8_t> RefQ5K(const float* x) { return ref::Q45K(x, 31); }
void DecodeQ4_0(const uint8_t* b, float* out) { ref::DecodeQx0(b, 4, out); }
void DecodeQ5_0(const uint8_t* b, float* out) { ref::DecodeQx0(b, 5, out); }
void DecodeQ4K(const uint8_t* b, float* out) { ref::DecodeQ45K(b, 15, out); }
void DecodeQ5K(const uint8_t* b, float* out) { ref::DecodeQ45K(b, 31, out); }

void PrintTo(const QuantCase& c, std::ostream* os) { *os << GgmlTypeName(c.type); }

const QuantCase kCases[] = {
    {GgmlType::kQ8_0, ref::Q8_0, ref::DecodeQ8_0}, {GgmlType::kQ4_0, RefQ4_0, DecodeQ4_0},
    {GgmlType::kQ5_0, RefQ5_0, DecodeQ5_0},       {GgmlType::kQ5_1, ref::Q5_1, ref::DecodeQ5_1},
    {GgmlType::kQ4_K, RefQ4K, DecodeQ4K},
    {GgmlType::kQ5_K, RefQ5K, DecodeQ5K},         {GgmlType::kQ6_K, ref::Q6K, ref::DecodeQ6K},
};

std::vector<std::byte> Quantize(QuantPath path, GgmlType type, const std::vector<float>& x) {
  std::vector<std::byte> out(RowBytes(type, x.size()));
  QuantizeBlocksOn(path, type, x, out);
  return out;
}

// The reference's bytes for a row: block by block.
std::vector<uint8_t> Reference(const QuantCase& c, const std::vector<float>& x) {
  std::vector<uint8_t> out;
  const size_t n = BlockElements(c.type);
  for (size_t b = 0; b < x.size() / n; ++b) {
    const std::vector<uint8_t> block = c.reference(x.data() + b * n);
    EXPECT_EQ(block.size(), BlockBytes(c.type));
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

// Where two rows of blocks first differ, or success.
::testing::AssertionResult SameBlocks(GgmlType type, const std::vector<std::byte>& got,
                                      const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << ", want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<uint8_t>(got[i]) != want[i]) {
      char hex[64];
      std::snprintf(hex, sizeof hex, "0x%02x, want 0x%02x", static_cast<unsigned>(got[i]), want[i]);
      return ::testing::AssertionFailure() << GgmlTypeName(type) << " block " << i / BlockBytes(type)
                                           << " byte " << i % BlockBytes(type) << ": " << hex;
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<QuantPath> Paths() {
  std::vector<QuantPath> paths = {QuantPath::kBaseline};
  if (QuantPathAvailable(QuantPath::kAvx2)) paths.push_back(QuantPath::kAvx2);
  return paths;
}

std::string PathName(QuantPath path) { return path == QuantPath::kBaseline ? "baseline" : "avx2"; }

class QuantizeTest : public ::testing::TestWithParam<QuantCase> {
 protected:
  // Every path, and QuantizeBlocks itself, gives the reference's bytes.
  void ExpectReference(const std::vector<float>& x) {
    const std::vector<uint8_t> want = Reference(GetParam(), x);
    for (QuantPath path : Paths()) {
      EXPECT_TRUE(SameBlocks(GetParam().type, Quantize(path, GetParam().type, x), want)) << PathName(path);
    }
    std::vector<std::byte> out(want.size());
    QuantizeBlocks(GetParam().type, x, out);
    EXPECT_TRUE(SameBlocks(GetParam().type, out, want)) << "QuantizeBlocks";
  }
  size_t Block() const { return BlockElements(GetParam().type); }
};

std::vector<float> Normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST_P(QuantizeTest, RandomWeightsMatchTheReference) {
  // Rows of 1 to 11 blocks: the K types search several blocks' sub-blocks
  // together and finish a partial last group on its own.
  for (size_t blocks = 1; blocks <= 11; ++blocks) {
    SCOPED_TRACE(blocks);
    ExpectReference(Normal(blocks * Block(), 0.02f, static_cast<uint32_t>(blocks)));
  }
}

TEST_P(QuantizeTest, UniformAndHeavyTailedWeightsMatchTheReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::cauchy_distribution<float> cauchy(0.0f, 0.01f);
  std::vector<float> x(16 * Block());
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 2 ? uniform(rng) : cauchy(rng);
  ExpectReference(x);
}

TEST_P(QuantizeTest, AllZerosMatchTheReference) { ExpectReference(std::vector<float>(3 * Block(), 0.0f)); }

TEST_P(QuantizeTest, NegativeZerosMatchTheReference) { ExpectReference(std::vector<float>(3 * Block(), -0.0f)); }

TEST_P(QuantizeTest, OneOutlierMatchesTheReference) {
  std::vector<float> x = Normal(4 * Block(), 0.01f, 11);
  x[5] = 40.0f;
  x[Block() + 17] = -40.0f;
  x[3 * Block() - 1] = 1e6f;
  ExpectReference(x);
}

TEST_P(QuantizeTest, SubnormalsMatchTheReference) {
  std::mt19937 rng(3);
  std::vector<float> x(8 * Block());
  for (float& v : x) v = FromBits(rng() & 0x807fffffu);  // sign and mantissa only: every subnormal
  x[1] = kMinSubnormal;
  x[2] = -kMinSubnormal;
  ExpectReference(x);
}

TEST_P(QuantizeTest, TinyNormalsMatchTheReference) {
  ExpectReference(Normal(4 * Block(), 1e-30f, 5));
}

TEST_P(QuantizeTest, LargestFiniteFloatsMatchTheReference) {
  // Whole blocks of the largest magnitudes: scales overflow to inf and ggml's
  // arithmetic meets inf and NaN on the way; the bytes must still be ggml's.
  std::mt19937 rng(9);
  std::vector<float> x(6 * Block());
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = FromBits(0x7f000000u + (rng() & 0x7fffffu));
    x[i] = (i / Block()) % 2 ? v : (rng() & 1 ? v : -v);
  }
  x[0] = kMaxFloat;
  x[1] = -kMaxFloat;
  ExpectReference(x);
}

TEST_P(QuantizeTest, NegativeOnlyBlocksMatchTheReference) {
  std::vector<float> x = Normal(4 * Block(), 0.05f, 13);
  for (float& v : x) v = -std::fabs(v) - 0.001f;
  ExpectReference(x);
}

TEST_P(QuantizeTest, ConstantBlocksMatchTheReference) {
  std::vector<float> x;
  for (float c : {0.375f, -2.5f, 1e-3f, 65504.0f}) x.insert(x.end(), Block(), c);
  ExpectReference(x);
}

TEST_P(QuantizeTest, ValuesOnRoundingTiesMatchTheReference) {
  // Multiples of 1/8 in [-4, 4): many products land exactly on .5.
  std::mt19937 rng(17);
  std::vector<float> x(8 * Block());
  for (float& v : x) v = std::ldexp(static_cast<float>(static_cast<int>(rng() % 64) - 32), -3);
  ExpectReference(x);
}

TEST_P(QuantizeTest, ArbitraryFiniteBitPatternsMatchTheReference) {
  std::mt19937 rng(23);
  std::vector<float> x(8 * Block());
  for (float& v : x) {
    do {
      v = FromBits(rng());
    } while (!std::isfinite(v));
  }
  ExpectReference(x);
}

// Decoding each block gives the weights back within the format's step. The
// bounds are the quantization step's half plus the rounding of the block's own
// scales to half (11 bits) and, for the K types, to 6 or 8 bits per sub-block,
// and what a least-squares fit may clip at the ends of the range:
//  - Q8_0: 127 levels over max |x|: half a step (max/254) plus 127 * d * 2^-11.
//  - Q4_0 / Q5_0: levels -8..7 (-16..15) of a step max/8 (max/16) signed
//    toward the largest magnitude: half a step inside, a whole step where the
//    opposite sign's end (+8 steps) is clipped to 7, plus the half's rounding.
//  - Q4_K / Q5_K: 15 / 31 levels over a sub-block's range: the 6-bit scale and
//    min add up to a step, and clipping another: 1.6 steps of range/15 (31).
//  - Q6_K: 63 levels over [-max, max] per sub-block, 8-bit scales: 1.6 steps.
double ErrorBound(GgmlType type, const float* x) {
  const size_t n = BlockElements(type);
  double max_abs = 0;
  double lo = 0;
  double hi = 0;
  for (size_t i = 0; i < n; ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[i])));
    lo = std::min(lo, static_cast<double>(x[i]));
    hi = std::max(hi, static_cast<double>(x[i]));
  }
  switch (type) {
    case GgmlType::kQ8_0:
      return max_abs / 127 * (0.5 + 127.0 / 2048) * 1.01;
    case GgmlType::kQ4_0:
      return max_abs / 8 * (1 + 8.0 / 2048) * 1.01;
    case GgmlType::kQ5_0:
      return max_abs / 16 * (1 + 16.0 / 2048) * 1.01;
    case GgmlType::kQ5_1:  // 31 steps from min to max: half a step, and the halves' rounding
      return ((hi - lo) / 31 * (0.5 + 31.0 / 2048) + std::fabs(lo) / 2048) * 1.01;
    case GgmlType::kQ4_K:
      return (hi - lo) / 15 * 1.6;
    case GgmlType::kQ5_K:
      return (hi - lo) / 31 * 1.6;
    case GgmlType::kQ6_K:
      return max_abs / 32 * 1.6;
    default:
      return 0;
  }
}

TEST_P(QuantizeTest, DecodedBlocksAreWithinTheFormatsStep) {
  const std::vector<float> x = Normal(64 * Block(), 0.02f, 29);
  const std::vector<std::byte> q = Quantize(Paths().back(), GetParam().type, x);
  const size_t n = Block();
  std::vector<float> back(n);
  double worst = 0;  // the largest error as a fraction of its bound
  for (size_t b = 0; b < x.size() / n; ++b) {
    GetParam().decode(reinterpret_cast<const uint8_t*>(q.data()) + b * BlockBytes(GetParam().type), back.data());
    const double bound = ErrorBound(GetParam().type, x.data() + b * n);
    for (size_t i = 0; i < n; ++i) {
      const double err = std::fabs(static_cast<double>(back[i]) - x[b * n + i]);
      ASSERT_LE(err, bound) << "block " << b << " element " << i << ": " << x[b * n + i] << " decodes to " << back[i];
      worst = std::max(worst, err / bound);
    }
  }
  // Not a step of slack everywhere: the typical worst case uses most of it.
  EXPECT_GT(worst, 0.2);
}

TEST_P(QuantizeTest, DecodedZerosAreZero) {
  const std::vector<std::byte> q = Quantize(Paths().back(), GetParam().type, std::vector<float>(Block(), 0.0f));
  std::vector<float> back(Block());
  GetParam().decode(reinterpret_cast<const uint8_t*>(q.data()), back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

std::string CaseName(const ::testing::TestParamInfo<QuantCase>& info) {
  return std::string(GgmlTypeName(info.param.type));
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeTest, ::testing::ValuesIn(kCases), CaseName);

// ---- The float formats through QuantizeBlocks ----

TEST(QuantizeBlocksTest, F32IsCopiedAsIs) {
  const std::vector<float> x = {1.0f, -0.0f, kInf, FromBits(0x7fa00001), kMinSubnormal};
  std::vector<std::byte> out(x.size() * 4);
  QuantizeBlocks(GgmlType::kF32, x, out);
  EXPECT_EQ(std::memcmp(out.data(), x.data(), out.size()), 0);
}

TEST(QuantizeBlocksTest, F16AndBf16AreLittleEndianConversions) {
  const std::vector<float> x = {1.0f, -2.5f, 65519.0f, 1e-8f};
  std::vector<std::byte> f16(8);
  std::vector<std::byte> bf16(8);
  QuantizeBlocks(GgmlType::kF16, x, f16);
  QuantizeBlocks(GgmlType::kBF16, x, bf16);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(static_cast<uint16_t>(static_cast<uint8_t>(f16[2 * i]) | (static_cast<uint8_t>(f16[2 * i + 1]) << 8)),
              Fp32ToFp16(x[i]));
    EXPECT_EQ(static_cast<uint16_t>(static_cast<uint8_t>(bf16[2 * i]) | (static_cast<uint8_t>(bf16[2 * i + 1]) << 8)),
              Fp32ToBf16(x[i]));
  }
}

TEST(QuantizeBlocksDeathTest, PartialBlockIsABug) {
  std::vector<float> x(300);
  std::vector<std::byte> out(2 * 210);
  EXPECT_DEATH(QuantizeBlocks(GgmlType::kQ6_K, x, out), "check failed");
}

TEST(QuantizeBlocksDeathTest, WrongOutputSizeIsABug) {
  std::vector<float> x(64);
  std::vector<std::byte> out(67);
  EXPECT_DEATH(QuantizeBlocks(GgmlType::kQ8_0, x, out), "check failed");
}

}  // namespace
}  // namespace tensorfs
