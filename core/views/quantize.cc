#include "core/views/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TENSORFS_QUANT_AVX2 1
#endif

#include "core/util/status.h"

// Built with -ffp-contract=off (core/views/CMakeLists.txt): bnb's results depend
// on every product and sum being rounded to float32 on its own, and a fused
// multiply-add would round once.
//
// The hot loops have an SSE2 path (the x86-64 baseline, so no dispatch), NF4
// also an AVX2 one picked at run time, and all have a portable one; every path
// does the same float32 operations, so results do not depend on which one runs.
// All rely on the default floating-point environment (round to nearest even,
// no flush-to-zero). The 8-bit search is a table look-up (ThresholdCounter)
// that gives exactly bnb's answer.

namespace tensorfs::quant {
namespace {

constexpr std::array<float, 16> kNf4 = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// The split points of dQuantizeNF4's decision tree, as float32 literals exactly
// as bnb writes them, ascending. The tree is a binary search with `y > t` at
// every node, so its answer is the number of thresholds below y; counting them
// gives the same code without branches. NaN compares false with all: code 0.
constexpr std::array<float, 15> kNf4Thresholds = {
    -0.8480964004993439f,  -0.6106329262256622f, -0.4599952697753906f,
    -0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f,
    -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,
    0.2035212516784668f,   0.2920137718319893f,   0.3893125355243683f,
    0.5016634166240692f,   0.6427869200706482f,   0.8614784181118011f,
};

inline uint32_t Nf4Index(float y) {
  uint32_t code = 0;
  for (float t : kNf4Thresholds) code += y > t ? 1u : 0u;
  return code;
}

// |x| as an integer that orders like the float; NaN maps to 0 so that the max
// ignores it, as fmaxf does.
inline uint32_t AbsBitsNoNan(float x) {
  const uint32_t a = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
  return a > 0x7f800000u ? 0u : a;
}

// Counts how many of a sorted list of thresholds lie below y, which is what
// bnb's dQuantize computes (see MakeDynamicThresholds), with one
// table look-up and one comparison instead of a search: a loop that runs for
// every element of a checkpoint cannot afford a chain of dependent loads and
// mispredicted branches.
//
// Floats map to integers in the same order (OrderedKey); the top bits of the key
// pick a bucket; below_[bucket] counts the thresholds whose key lies below the
// bucket's first key. kShift is chosen so that no bucket holds two thresholds
// (checked at construction), so besides those only thresholds_[below] can be
// below y, and comparing with it settles the count exactly. NaN counts 0: it
// fails every `y > t` in bnb's searches.
template <int kShift>
class ThresholdCounter {
 public:
  explicit ThresholdCounter(std::span<const float> sorted) {
    TENSORFS_CHECK(sorted.size() < thresholds_.size());
    thresholds_.fill(std::numeric_limits<float>::infinity());  // past the end: never below y
    for (size_t i = 0; i < sorted.size(); ++i) {
      // A zero threshold would break the key order argument (-0 < +0 as keys).
      TENSORFS_CHECK(std::isfinite(sorted[i]) && sorted[i] != 0.0f);
      TENSORFS_CHECK(i == 0 || sorted[i - 1] < sorted[i]);
      TENSORFS_CHECK(i == 0 || (OrderedKey(sorted[i - 1]) >> kShift) != (OrderedKey(sorted[i]) >> kShift));
      thresholds_[i] = sorted[i];
    }
    size_t below = 0;
    for (size_t bucket = 0; bucket < below_.size(); ++bucket) {
      const uint64_t first_key = uint64_t{bucket} << kShift;
      while (below < sorted.size() && OrderedKey(sorted[below]) < first_key) ++below;
      below_[bucket] = static_cast<uint8_t>(below);
    }
  }

  uint32_t Count(float y) const {
    const uint32_t below = below_[OrderedKey(y) >> kShift];
    const uint32_t count = below + static_cast<uint32_t>(y > thresholds_[below]);
    return y == y ? count : 0u;
  }

 private:
  // The float's bits, sign-flipped so that unsigned order is float order
  // (-0 just below +0).
  static uint32_t OrderedKey(float f) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  }

  std::array<uint8_t, (size_t{1} << (32 - kShift))> below_{};
  std::array<float, 256> thresholds_{};
};

float AbsmaxOf(const float* x, size_t n) {
  size_t i = 0;
  float max = 0.0f;
#if defined(__SSE2__)
  // maxps returns its second operand when either is NaN: with the running max
  // second, a NaN element is skipped, as fmaxf does.
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  __m128 m0 = _mm_setzero_ps();
  __m128 m1 = _mm_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    m0 = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + i), abs_mask), m0);
    m1 = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + i + 4), abs_mask), m1);
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(m0, m1));
  for (float lane : lanes) max = std::max(max, lane);
#endif
  uint32_t bits = std::bit_cast<uint32_t>(max);
  for (; i < n; ++i) bits = std::max(bits, AbsBitsNoNan(x[i]));
  return std::bit_cast<float>(bits);
}

#if defined(TENSORFS_QUANT_AVX2)
// Nf4Pairs on 32 elements at a time with AVX2, for CPUs that have it (chosen at
// run time: the build targets baseline x86-64). Returns how many elements it
// did, a multiple of 32; the caller finishes the rest.
__attribute__((target("avx2"))) size_t Nf4PairsAvx2(const float* x, size_t n, float s, uint8_t* out) {
  const __m256 scale = _mm256_set1_ps(s);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i codes[4];
    for (size_t q = 0; q < 4; ++q) {
      const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * q), scale);
      __m256i code = _mm256_setzero_si256();
      for (float t : kNf4Thresholds) {  // ordered, quiet `>`: NaN counts nothing
        code = _mm256_sub_epi32(code, _mm256_castps_si256(_mm256_cmp_ps(y, _mm256_set1_ps(t), _CMP_GT_OQ)));
      }
      codes[q] = code;
    }
    // The packs work within 128-bit halves; the dword permute restores order.
    __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(codes[0], codes[1]),
                                        _mm256_packs_epi32(codes[2], codes[3]));
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m256i first = _mm256_and_si256(bytes, _mm256_set1_epi16(0x00ff));
    const __m256i second = _mm256_srli_epi16(bytes, 8);
    const __m256i pairs = _mm256_or_si256(_mm256_slli_epi16(first, 4), second);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i / 2), _mm256_castsi256_si128(packed));
  }
  return i;
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// Codes for `n` (even) elements of one block, packed two per byte.
void Nf4Pairs(const float* x, size_t n, float s, uint8_t* out) {
  size_t i = 0;
#if defined(TENSORFS_QUANT_AVX2)
  if (HasAvx2()) i = Nf4PairsAvx2(x, n, s, out);
#endif
#if defined(__SSE2__)
  // Thresholds stay in memory as the comparisons' second operand, so that they
  // do not crowd out the registers. `!(y <= t)` is `y > t` except for NaN,
  // which it counts 15 times; the ordered mask then clears NaN lanes to 0.
  alignas(16) static const std::array<std::array<float, 4>, 15> kT = [] {
    std::array<std::array<float, 4>, 15> t{};
    for (size_t k = 0; k < 15; ++k) t[k].fill(kNf4Thresholds[k]);
    return t;
  }();
  const __m128 scale = _mm_set1_ps(s);
  for (; i + 16 <= n; i += 16) {
    __m128i codes[4];
    for (size_t q = 0; q < 4; ++q) {
      const __m128 y = _mm_mul_ps(_mm_loadu_ps(x + i + 4 * q), scale);
      __m128i code = _mm_setzero_si128();
      for (const auto& t : kT) {
        code = _mm_sub_epi32(code, _mm_castps_si128(_mm_cmpnle_ps(y, _mm_load_ps(t.data()))));
      }
      codes[q] = _mm_and_si128(code, _mm_castps_si128(_mm_cmpord_ps(y, y)));
    }
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(codes[0], codes[1]),
                                           _mm_packs_epi32(codes[2], codes[3]));
    // 16-bit lane k holds code(2k) in its low byte and code(2k+1) in its high one.
    const __m128i first = _mm_and_si128(bytes, _mm_set1_epi16(0x00ff));
    const __m128i second = _mm_srli_epi16(bytes, 8);
    const __m128i pairs = _mm_or_si128(_mm_slli_epi16(first, 4), second);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i / 2), _mm_packus_epi16(pairs, pairs));
  }
#endif
  for (; i < n; i += 2) {
    out[i / 2] = static_cast<uint8_t>((Nf4Index(x[i] * s) << 4) | Nf4Index(x[i + 1] * s));
  }
}

// torch.linspace(0.1, 1, steps) in float32 by the scalar formula of torch's
// CPU kernel, which the view format fixes: one step (end - start) / (steps - 1),
// the first half counted up from start and the second half down from end.
// torch's vectorized kernel (the one x86 builds run for steps >= 16) computes
// some elements as base + k * step instead, with or without FMA depending on
// the build, so maps made by real torch differ from this one in the last bit
// of a few entries (12 for an AVX2 build).
void Linspace(float start, float end, int steps, float* out) {
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  for (int j = 0; j < steps; ++j) {
    out[j] = j < halfway ? start + step * static_cast<float>(j)
                         : end - step * static_cast<float>(steps - 1 - j);
  }
}

std::array<float, 256> MakeDynamicCode() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for
  // exponent i, 2^i + 1 boundaries give 2^i means, scaled by 10^(i-6) with and
  // without sign; then 0 and 1.0 (1.0 but not -1.0: the map is asymmetric).
  std::array<float, 256> code{};
  size_t n = 0;
  for (int i = 0; i < 7; ++i) {
    const int steps = (1 << i) + 1;
    float boundaries[65];
    Linspace(0.1f, 1.0f, steps, boundaries);
    // Python's 10 ** (i - 6) is a double (an int for i = 6); torch multiplies a
    // float32 tensor by it in float32.
    const float scale = static_cast<float>(std::pow(10.0, i - 6));
    for (int j = 0; j + 1 < steps; ++j) {
      const float mean = (boundaries[j] + boundaries[j + 1]) / 2.0f;
      code[n++] = scale * mean;
      code[n++] = -scale * mean;
    }
  }
  code[n++] = 0.0f;
  code[n++] = 1.0f;
  TENSORFS_CHECK(n == code.size());
  std::sort(code.begin(), code.end());
  return code;
}

// bnb dQuantize<0> searches the map for an even pivot p with code[p-1] < x <=
// code[p+1] (7 halvings over the odd indices), then returns p + 1 when x >
// mid(p, p+1), p - 1 when x < mid(p-1, p), else p, with mid(j, j+1) =
// (code[j] + code[j+1]) * 0.5f in float32. Its answer is therefore the number
// of midpoints that x has passed, where x passes mid(j, j+1) when x > mid for
// even j and when x >= mid for odd j (a tie stays on the even index). With
// x >= m written as x > (the float just below m), that is the count of
// thresholds below x, which a branch-free lower-bound search finds in 8 steps
// without the mispredictions bnb's branches would cost on a CPU. NaN passes
// nothing: code 0, as in bnb. tests/core/views checks this against bnb's loop.
std::array<float, 255> MakeDynamicThresholds(const std::array<float, 256>& code) {
  std::array<float, 255> t{};
  for (size_t j = 0; j < t.size(); ++j) {
    const float mid = (code[j] + code[j + 1]) * 0.5f;
    t[j] = j % 2 == 0 ? mid : std::nextafter(mid, -std::numeric_limits<float>::infinity());
  }
  return t;
}

// 2^16 one-byte buckets (64 KiB): the map's thresholds crowd near zero and 1.
const ThresholdCounter<16>& DynamicCounter() {
  static const ThresholdCounter<16> counter(MakeDynamicThresholds(DynamicCode()));
  return counter;
}

size_t NumBlocks(size_t n, size_t blocksize) { return (n + blocksize - 1) / blocksize; }

inline uint16_t LoadLe16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = static_cast<uint16_t>((v >> 8) | (v << 8));
  return v;
}

inline void StoreLe16(std::byte* p, uint16_t v) {
  if constexpr (std::endian::native == std::endian::big) v = static_cast<uint16_t>((v >> 8) | (v << 8));
  std::memcpy(p, &v, sizeof v);
}

}  // namespace

const std::array<float, 16>& Nf4Code() { return kNf4; }

const std::array<float, 256>& DynamicCode() {
  static const std::array<float, 256> code = MakeDynamicCode();
  return code;
}

float Bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

float F16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t magnitude = bits & 0x7fffu;
  // Shifted into float position the exponent is still biased by 15; a multiply
  // by 2^112 rebiases it, exactly, for normals and subnormals alike (an F16
  // subnormal is a float subnormal before it). Inf and NaN only need the float
  // exponent field filled in.
  const float finite = std::bit_cast<float>(magnitude << 13) * 0x1p112f;
  const float special = std::bit_cast<float>((magnitude << 13) | 0x7f800000u);
  const float value = magnitude >= 0x7c00u ? special : finite;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(value) | sign);
}

uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  // Setting the top mantissa bit quiets a NaN and keeps it a NaN even when its
  // payload sat in the dropped half.
  const uint32_t nan = (bits >> 16) | 0x0040u;
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

uint16_t FloatToF16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t a = bits & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  // Normal range: rebias the exponent (127 -> 15) and round the 13 dropped bits
  // to nearest even; a carry into the exponent is the right result.
  const uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14: adding 0.5 leaves the float's ulp at 2^-24, the F16 subnormal
  // step, so the FPU's own round-to-nearest-even does the rounding; 2^-14 - tiny
  // may round up to 0x400, the smallest normal, as it should.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  uint32_t result;
  if (a > 0x7f800000u) {
    result = nan;
  } else if (a >= 0x477ff000u) {  // 65520 and up, inf included: the tie at 65520 goes to even, inf
    result = 0x7c00u;
  } else if (a >= 0x38800000u) {  // 2^-14
    result = normal;
  } else {
    result = subnormal;
  }
  return static_cast<uint16_t>(sign | result);
}

void DecodeFloats(Dtype dtype, std::span<const std::byte> in, std::span<float> out) {
  const std::byte* src = in.data();
  float* dst = out.data();
  const size_t n = out.size();
  switch (dtype) {
    case Dtype::F32:
      TENSORFS_CHECK(in.size() == n * 4);
      if constexpr (std::endian::native == std::endian::little) {
        if (n != 0) std::memcpy(dst, src, n * 4);
      } else {
        for (size_t i = 0; i < n; ++i) {
          uint32_t v;
          std::memcpy(&v, src + 4 * i, 4);
          dst[i] = std::bit_cast<float>((v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24));
        }
      }
      return;
    case Dtype::BF16:
      TENSORFS_CHECK(in.size() == n * 2);
      {
        size_t i = 0;
#if defined(__SSE2__)
        // Interleaving zero below each element is the 16-bit shift into place.
        const __m128i zero = _mm_setzero_si128();
        for (; i + 8 <= n; i += 8) {
          const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
          _mm_storeu_ps(dst + i, _mm_castsi128_ps(_mm_unpacklo_epi16(zero, h)));
          _mm_storeu_ps(dst + i + 4, _mm_castsi128_ps(_mm_unpackhi_epi16(zero, h)));
        }
#endif
        for (; i < n; ++i) dst[i] = Bf16ToFloat(LoadLe16(src + 2 * i));
      }
      return;
    case Dtype::F16:
      TENSORFS_CHECK(in.size() == n * 2);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToFloat(LoadLe16(src + 2 * i));
      return;
    default:
      TENSORFS_CHECK(dtype == Dtype::F32 || dtype == Dtype::F16 || dtype == Dtype::BF16);
  }
}

void EncodeHalf(Dtype to, std::span<const float> in, std::span<std::byte> out) {
  TENSORFS_CHECK(to == Dtype::BF16 || to == Dtype::F16);
  TENSORFS_CHECK(out.size() == in.size() * 2);
  const float* src = in.data();
  std::byte* dst = out.data();
  const size_t n = in.size();
  if (to == Dtype::BF16) {
    for (size_t i = 0; i < n; ++i) StoreLe16(dst + 2 * i, FloatToBf16(src[i]));
  } else {
    for (size_t i = 0; i < n; ++i) StoreLe16(dst + 2 * i, FloatToF16(src[i]));
  }
}

void BlockAbsmax(std::span<const float> x, size_t blocksize, std::span<float> absmax) {
  TENSORFS_CHECK(blocksize > 0);
  TENSORFS_CHECK(absmax.size() == NumBlocks(x.size(), blocksize));
  for (size_t b = 0; b < absmax.size(); ++b) {
    const size_t begin = b * blocksize;
    absmax[b] = AbsmaxOf(x.data() + begin, std::min(blocksize, x.size() - begin));
  }
}

namespace {

// Stores each block's absmax and calls fn(block, begin, len, 1 / absmax): the
// scale bitsandbytes multiplies by (so absmax 0 gives inf, and 0 * inf NaN).
template <typename Fn>
void ForEachBlock(std::span<const float> x, size_t blocksize, std::span<float> absmax, Fn fn) {
  TENSORFS_CHECK(absmax.size() == NumBlocks(x.size(), blocksize));
  for (size_t b = 0; b < absmax.size(); ++b) {
    const size_t begin = b * blocksize;
    const size_t len = std::min(blocksize, x.size() - begin);
    const float* block = x.data() + begin;
    absmax[b] = AbsmaxOf(block, len);
    fn(block, begin, len, 1.0f / absmax[b]);
  }
}

}  // namespace

void QuantizeNf4(std::span<const float> x, size_t blocksize, std::span<uint8_t> packed,
                 std::span<float> absmax) {
  TENSORFS_CHECK(blocksize > 0 && blocksize % 2 == 0);
  TENSORFS_CHECK(packed.size() == (x.size() + 1) / 2);
  ForEachBlock(x, blocksize, absmax, [&](const float* block, size_t begin, size_t len, float s) {
    const size_t even = len & ~size_t{1};
    uint8_t* out = packed.data() + begin / 2;
    Nf4Pairs(block, even, s, out);
    if (even != len) {  // odd tail: only possible in the last block
      out[even / 2] = static_cast<uint8_t>((Nf4Index(block[even] * s) << 4) | Nf4Index(0.0f * s));
    }
  });
}

void QuantizeBlockwise8(std::span<const float> x, size_t blocksize, std::span<uint8_t> codes,
                        std::span<float> absmax) {
  TENSORFS_CHECK(blocksize > 0);
  TENSORFS_CHECK(codes.size() == x.size());
  const ThresholdCounter<16>& counter = DynamicCounter();
  ForEachBlock(x, blocksize, absmax, [&](const float* block, size_t begin, size_t len, float s) {
    uint8_t* out = codes.data() + begin;
    for (size_t i = 0; i < len; ++i) out[i] = static_cast<uint8_t>(counter.Count(block[i] * s));
  });
}

float QuantizeRowInt8(std::span<const float> row, std::span<int8_t> out) {
  TENSORFS_CHECK(out.size() == row.size());
  const float r = AbsmaxOf(row.data(), row.size());
  const float scale = 127.0f / r;
  // 1.5 * 2^23: adding it leaves no fraction bits, so the FPU rounds to the
  // nearest integer, ties to even (valid for |v| <= 2^22).
  constexpr float kRoundMagic = 12582912.0f;
  const float* src = row.data();
  int8_t* dst = out.data();
  const size_t n = row.size();
  size_t i = 0;
#if defined(__SSE2__)
  // cvtps2dq rounds with the current mode, nearest even; the packs saturate but
  // the clamp has already brought every value into range.
  const __m128 vscale = _mm_set1_ps(scale);
  const __m128 hi = _mm_set1_ps(127.0f);
  const __m128 lo = _mm_set1_ps(-127.0f);
  for (; i + 16 <= n; i += 16) {
    __m128i q[4];
    for (size_t k = 0; k < 4; ++k) {
      __m128 v = _mm_mul_ps(_mm_loadu_ps(src + i + 4 * k), vscale);
      v = _mm_and_ps(v, _mm_cmpord_ps(v, v));  // NaN -> 0
      v = _mm_max_ps(_mm_min_ps(v, hi), lo);
      q[k] = _mm_cvtps_epi32(v);
    }
    const __m128i bytes = _mm_packs_epi16(_mm_packs_epi32(q[0], q[1]), _mm_packs_epi32(q[2], q[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), bytes);
  }
#endif
  for (; i < n; ++i) {
    float v = src[i] * scale;
    v = v > 127.0f ? 127.0f : v;
    v = v < -127.0f ? -127.0f : v;
    v = v == v ? v : 0.0f;  // NaN
    dst[i] = static_cast<int8_t>(static_cast<int32_t>((v + kRoundMagic) - kRoundMagic));
  }
  return r;
}

}  // namespace tensorfs::quant
