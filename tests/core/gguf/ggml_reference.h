// An independent rendering of ggml's block formats for the tests: the
// reference quantizers (ggml-quants.c's quantize_row_*_ref, as its algorithm
// reads: plain scalar loops, one sub-block at a time, nothing shared with
// core/gguf), the half-precision rounding from the IEEE definition (the nearest
// representable half, ties to the even one), and decoders that read each
// block layout back to floats.
//
// Deliberately slow and literal. The conversions of out-of-range floats to
// int8_t, which C leaves to the implementation, are written as x86-64 does
// them (truncate to int32, INT32_MIN when out of range, keep the low byte), as
// ggml_quants.h specifies.
#ifndef TENSORFS_TESTS_CORE_GGUF_GGML_REFERENCE_H_
#define TENSORFS_TESTS_CORE_GGUF_GGML_REFERENCE_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace tensorfs::testing::ggml_ref {

// ---- IEEE half ----

// The value of a half bit pattern, by the definition: (-1)^s 2^(e-15) (1 +
// m/1024), subnormals 2^-14 m/1024, e = 31 inf or NaN.
inline double HalfValue(uint16_t h) {
  const int sign = h >> 15;
  const int e = (h >> 10) & 31;
  const int m = h & 1023;
  double v;
  if (e == 31) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else {
    v = std::ldexp(1.0 + m / 1024.0, e - 15);
  }
  return sign ? -v : v;
}

// Round to the nearest half, ties to the one with an even pattern; beyond
// the largest half (65504) by half a step or more: inf. NaN is not rounded
// here (the quantizer tests feed none).
inline uint16_t NearestHalf(float f) {
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (a >= 65520.0) return sign | 0x7c00;
  // Positive finite halves ascend with their bit pattern: find the pair around a.
  uint16_t lo = 0;
  uint16_t hi = 0x7bff;
  while (lo < hi) {  // largest pattern whose value <= a
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (HalfValue(mid) <= a) {
      lo = mid;
    } else {
      hi = static_cast<uint16_t>(mid - 1);
    }
  }
  if (HalfValue(lo) == a || lo == 0x7bff) return sign | lo;
  const double below = a - HalfValue(lo);
  const double above = HalfValue(static_cast<uint16_t>(lo + 1)) - a;
  uint16_t pick = lo;
  if (above < below || (above == below && (lo & 1))) pick = static_cast<uint16_t>(lo + 1);
  return sign | pick;
}

inline float HalfToFloat(uint16_t h) { return static_cast<float>(HalfValue(h)); }

// ---- ggml's helpers, by their definitions ----

// nearest_int: adds 1.5 * 2^23 and reads the low 23 bits of the sum's pattern
// back as an integer (round half to even for |f| <= 4194303).
inline int NearestInt(float fval) {
  const float val = fval + 12582912.f;
  const int32_t i = std::bit_cast<int32_t>(val);
  return (i & 0x007fffff) - 0x00400000;
}

inline int8_t ToInt8(float v) {
  int32_t i = std::numeric_limits<int32_t>::min();
  if (v >= -2147483648.0f && v < 2147483648.0f) i = static_cast<int32_t>(v);
  return static_cast<int8_t>(i);
}

inline void PutHalf(std::vector<uint8_t>& out, uint16_t h) {
  out.push_back(static_cast<uint8_t>(h & 0xff));
  out.push_back(static_cast<uint8_t>(h >> 8));
}

// ---- 32-element blocks ----

inline std::vector<uint8_t> Q8_0(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  std::vector<uint8_t> y;
  PutHalf(y, NearestHalf(d));
  for (int j = 0; j < 32; ++j) y.push_back(static_cast<uint8_t>(ToInt8(std::round(x[j] * id))));
  return y;
}

// Q4_0 (bits 4) and Q5_0 (bits 5).
inline std::vector<uint8_t> Qx0(const float* x, int bits) {
  const int half = bits == 4 ? 8 : 16;
  const int top = bits == 4 ? 15 : 31;
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < 32; j++) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / static_cast<float>(-half);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) {
    const int8_t t = ToInt8(x[j] * id + (static_cast<float>(half) + 0.5f));
    q[j] = static_cast<uint8_t>(std::min<int>(top, t));
  }
  std::vector<uint8_t> y;
  PutHalf(y, NearestHalf(d));
  if (bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    for (int k = 0; k < 4; ++k) y.push_back(static_cast<uint8_t>(qh >> (8 * k)));
  }
  for (int j = 0; j < 16; ++j) {
    // Q4_0's nibbles are never above 15 (MIN above), so ggml packs them unmasked.
    y.push_back(bits == 4 ? static_cast<uint8_t>(q[j] | (q[j + 16] << 4))
                          : static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4)));
  }
  return y;
}

// Q5_1: 31 steps from the block's min to its max, {d, min, qh[4], qs[16]}.
inline std::vector<uint8_t> Q5_1(const float* x) {
  float min = x[0];
  float max = x[0];
  for (int j = 1; j < 32; j++) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 31;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(ToInt8((x[j] - min) * id + 0.5f));
  std::vector<uint8_t> y;
  PutHalf(y, NearestHalf(d));
  PutHalf(y, NearestHalf(min));
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) y.push_back(static_cast<uint8_t>(qh >> (8 * k)));
  for (int j = 0; j < 16; ++j) y.push_back(static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4)));
  return y;
}

// ---- make_qkx2_quants and make_qx_quants ----

// Weighted least squares over nstep + 1 candidate scales, min clamped <= 0.
// Returns the scale; *the_min = -min.
inline float MakeQkx2(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, float rmin,
                      float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  std::vector<uint8_t> aux(n);
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0;
    float sum_l2 = 0;
    float sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      aux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * aux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = aux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// rmse_type 1 (weights x^2), no quant weights: 18 candidate scales around
// -nmax / max. L gets level + nmax.
inline float MakeQx(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = 0;
    suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ---- 256-element blocks ----

// Q4_K (nmax 15) and Q5_K (nmax 31): block {d, dmin, scales[12], (Q5_K:
// qh[32]), qs[128]}.
inline std::vector<uint8_t> Q45K(const float* x, int nmax) {
  uint8_t L[256];
  float scales[8];
  float mins[8];
  float weights[32];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    if (nmax == 15) {
      scales[j] = MakeQkx2(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], -1.f, 0.1f, 20);
    } else {
      scales[j] = MakeQkx2(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], -0.5f, 0.1f, 15);
    }
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t sc[12] = {};
  uint8_t ls6[8];
  uint8_t lm6[8];
  for (int j = 0; j < 8; ++j) {
    ls6[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    lm6[j] = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
  }
  // 6-bit packing: sub-blocks 0-3 whole in bytes 0-3 (scales) and 4-7 (mins);
  // 4-7 low nibbles in bytes 8-11, their top two bits in bits 6-7 of bytes 0-7.
  for (int j = 0; j < 4; ++j) {
    sc[j] = static_cast<uint8_t>(ls6[j] | ((ls6[j + 4] >> 4) << 6));
    sc[j + 4] = static_cast<uint8_t>(lm6[j] | ((lm6[j + 4] >> 4) << 6));
    sc[j + 8] = static_cast<uint8_t>((ls6[j + 4] & 0xF) | ((lm6[j + 4] & 0xF) << 4));
  }
  const uint16_t d16 = NearestHalf(max_scale / 63.f);
  const uint16_t dmin16 = NearestHalf(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    const float d = HalfToFloat(d16) * ls6[j];
    if (d == 0.0f) continue;
    const float dm = HalfToFloat(dmin16) * lm6[j];
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
  std::vector<uint8_t> y;
  PutHalf(y, d16);
  PutHalf(y, dmin16);
  y.insert(y.end(), sc, sc + 12);
  if (nmax == 31) {
    // qh[j] bit 2k: L[64k + j] >= 16; bit 2k+1: L[64k + 32 + j] >= 16.
    for (int j = 0; j < 32; ++j) {
      uint8_t h = 0;
      for (int k = 0; k < 4; ++k) {
        if (L[64 * k + j] > 15) h |= static_cast<uint8_t>(1 << (2 * k));
        if (L[64 * k + 32 + j] > 15) h |= static_cast<uint8_t>(2 << (2 * k));
      }
      y.push_back(h);
    }
  }
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      y.push_back(static_cast<uint8_t>((L[64 * k + l] & 0xF) | ((L[64 * k + 32 + l] & 0xF) << 4)));
    }
  }
  return y;
}

// Q6_K: block {ql[128], qh[64], scales[16] (int8), d}.
inline std::vector<uint8_t> Q6K(const float* x) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0;
  float max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = MakeQx(16, 32, x + 16 * ib, L + 16 * ib);
    if (std::fabs(scales[ib]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < 1e-15f) return std::vector<uint8_t>(210, 0);
  const float iscale = -128.f / max_scale;
  const uint16_t d16 = NearestHalf(1 / iscale);
  int8_t sc[16];
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = HalfToFloat(d16) * sc[j];
    if (d == 0.0f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
    }
  }
  std::vector<uint8_t> y(210, 0);
  // Per half of 128: ql[l] = L[l] low | L[l+64] low << 4; ql[l+32] = L[l+32]
  // low | L[l+96] low << 4; qh[l] = the four high pairs.
  for (int half = 0; half < 2; ++half) {
    const int8_t* q = L + 128 * half;
    uint8_t* ql = y.data() + 64 * half;
    uint8_t* qh = y.data() + 128 + 32 * half;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>(((q[l] >> 4) & 3) | (((q[l + 32] >> 4) & 3) << 2) | (((q[l + 64] >> 4) & 3) << 4) |
                                   (((q[l + 96] >> 4) & 3) << 6));
    }
  }
  std::memcpy(y.data() + 192, sc, 16);
  y[208] = static_cast<uint8_t>(d16 & 0xff);
  y[209] = static_cast<uint8_t>(d16 >> 8);
  return y;
}

// ---- Decoders (dequantize_row_* by the layouts above) ----

inline uint16_t Half(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

inline void DecodeQ8_0(const uint8_t* b, float* out) {
  const float d = HalfToFloat(Half(b));
  for (int j = 0; j < 32; ++j) out[j] = static_cast<int8_t>(b[2 + j]) * d;
}

inline void DecodeQx0(const uint8_t* b, int bits, float* out) {
  const float d = HalfToFloat(Half(b));
  const int half = bits == 4 ? 8 : 16;
  uint32_t qh = 0;
  if (bits == 5) qh = b[2] | (b[3] << 8) | (b[4] << 16) | (static_cast<uint32_t>(b[5]) << 24);
  const uint8_t* qs = b + (bits == 4 ? 2 : 6);
  for (int j = 0; j < 16; ++j) {
    int q0 = qs[j] & 0xF;
    int q1 = qs[j] >> 4;
    if (bits == 5) {
      q0 |= ((qh >> j) & 1) << 4;
      q1 |= ((qh >> (j + 16)) & 1) << 4;
    }
    out[j] = (q0 - half) * d;
    out[j + 16] = (q1 - half) * d;
  }
}

inline void DecodeQ5_1(const uint8_t* b, float* out) {
  const float d = HalfToFloat(Half(b));
  const float m = HalfToFloat(Half(b + 2));
  const uint32_t qh = b[4] | (b[5] << 8) | (b[6] << 16) | (static_cast<uint32_t>(b[7]) << 24);
  for (int j = 0; j < 16; ++j) {
    out[j] = ((b[8 + j] & 0xF) | (((qh >> j) & 1) << 4)) * d + m;
    out[j + 16] = ((b[8 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) * d + m;
  }
}

inline void DecodeQ45K(const uint8_t* b, int nmax, float* out) {
  const float d = HalfToFloat(Half(b));
  const float dmin = HalfToFloat(Half(b + 2));
  const uint8_t* sc = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (nmax == 15 ? 16 : 48);
  for (int j = 0; j < 8; ++j) {
    int s;
    int m;
    if (j < 4) {
      s = sc[j] & 63;
      m = sc[j + 4] & 63;
    } else {
      s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
      m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
    for (int i = 0; i < 32; ++i) {
      const int k = j / 2;                // which 64: bytes 32k..32k+31
      const bool high = (j % 2) == 1;     // second 32 of the 64: high nibbles
      int q = high ? qs[32 * k + i] >> 4 : qs[32 * k + i] & 0xF;
      if (nmax == 31 && (qh[i] >> j) & 1) q += 16;
      out[32 * j + i] = d * s * q - dmin * m;
    }
  }
}

inline void DecodeQ6K(const uint8_t* b, float* out) {
  const float d = HalfToFloat(Half(b + 208));
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    for (int l = 0; l < 32; ++l) {
      const int q[4] = {(ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4), (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                        (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4), (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
      for (int k = 0; k < 4; ++k) {
        const int idx = 128 * half + 32 * k + l;
        out[idx] = d * sc[idx / 16] * (q[k] - 32);
      }
    }
  }
}

}  // namespace tensorfs::testing::ggml_ref

#endif  // TENSORFS_TESTS_CORE_GGUF_GGML_REFERENCE_H_
