#include "core/gguf/ggml_quants.h"
#include "core/gguf/ggml_quants_paths.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/util/status.h"

// Built with -ffp-contract=off (core/gguf/CMakeLists.txt): ggml's reference
// rounds every product and sum to float32 on its own (x86-64 has no fused
// multiply-add in its baseline, which ggml-base is built for), and a contracted
// a*b+c would round once and change bits. Also -Wno-psabi: the lane kernels
// below pass 256-bit vectors between functions that are always inlined, so no
// call ever uses the ABI that warning is about.
//
// How the K types are made fast without changing a byte. Their cost is the
// weighted search for each sub-block's scale (make_qkx2_quants: 21 candidate
// scales for Q4_K; make_qx_quants: 19 for Q6_K), and every candidate sums over
// the sub-block's elements in order, so summing several elements at once would
// round differently. Instead sub-blocks (of 32 for Q4_K and Q5_K, of 16 for
// Q6_K) go in SIMD lanes side by side, lane j doing exactly its sub-block's
// sequence of float32 operations, in ggml's order; branches become per-lane
// selects. Two such lane groups run interleaved, so that one group's chain of
// dependent adds fills the other's wait. The lane types are GCC vector
// extensions (g++ and clang++ both have them): built for baseline x86-64 they
// run as SSE2 (4 lanes), and a second copy of the same code, in functions
// compiled for AVX2 (8 lanes), is picked at run time on CPUs that have it.
// ("#pragma GCC unroll" makes g++ keep each group's sums in registers, as
// clang++ does unasked.) All rely on the default floating-point environment
// (round to nearest even, no flush-to-zero).
//
// Measured against ggml's own scalar code on one core (the same inputs as
// bench/micro_bench.cc's BM_Quantize*): about 5x for Q8_0 and 6x for Q4_K and
// Q6_K with AVX2; about 4x, 3x and 3x on the SSE2 path.

namespace tensorfs {
namespace {

#define TFS_LANES_INLINE [[gnu::always_inline]] inline

// Four lanes for SSE2, eight for AVX2: the registers' width, so that a
// kernel's running sums stay in registers.
typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

template <class F>
constexpr int kLanes = static_cast<int>(sizeof(F) / sizeof(float));

constexpr int kQK = 256;              // QK_K
constexpr float kGroupMaxEps = 1e-15f;  // GROUP_MAX_EPS

// ---- Scalar primitives, exactly as ggml-impl.h and ggml-quants.c write them ----

// The scalar helpers the kernels call are always inlined too: an out-of-line
// call from an AVX2 kernel into code built for SSE2 would run legacy-SSE
// instructions with the upper vector halves in use, which some CPUs punish.

// ggml_compute_fp32_to_fp16 (the portable one ggml-base is built with): round to
// nearest even; NaN becomes 0x7e00 with the sign. Used for the blocks' scales.
TFS_LANES_INLINE uint16_t GgmlFp32ToFp16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

// nearest_int: round to nearest even through the float's mantissa (exact for
// |f| <= 4194303; beyond that ggml's result is what these bits give, and so is
// this one's).
TFS_LANES_INLINE int NearestInt(float f) {
  const float val = f + 12582912.f;
  const int32_t i = std::bit_cast<int32_t>(val);
  return (i & 0x007fffff) - 0x00400000;
}

// What x86-64 code does converting a float to an integer type (cvttss2si):
// truncation toward zero; NaN and values outside int32 give INT32_MIN. A
// conversion to int8_t keeps the low byte of that.
TFS_LANES_INLINE int32_t X86Cvtt(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(v);
}
TFS_LANES_INLINE int8_t X86ToInt8(float v) { return static_cast<int8_t>(X86Cvtt(v)); }

// Exact widening of a half to float32.
TFS_LANES_INLINE float HalfToFloat(uint16_t h) {
  const uint32_t sign = (uint32_t{h} & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal (or zero): mantissa * 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}

TFS_LANES_INLINE void StoreLe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// ---- Lane helpers ----

template <class F, class I>
TFS_LANES_INLINE F Select(I mask, F a, F b) {
  return (F)((mask & (I)a) | (~mask & (I)b));
}
template <class I>
TFS_LANES_INLINE I SelectI(I mask, I a, I b) {
  return (mask & a) | (~mask & b);
}
template <class F, class I>
TFS_LANES_INLINE I NearestIntLanes(F f) {
  const I i = (I)(f + 12582912.f);
  return (i & 0x007fffff) - 0x00400000;
}
template <class F, class I>
TFS_LANES_INLINE F AbsLanes(F f) {
  return (F)((I)f & 0x7fffffff);
}
template <class I>
TFS_LANES_INLINE I ClampLanes(I v, int lo, int hi) {
  v = SelectI(v < hi, v, I{} + hi);  // MIN(hi, v)
  return SelectI(v > lo, v, I{} + lo);  // MAX(lo, v)
}

// ---- make_qkx2_quants, lane j = sub-block j ----
//
// Each kernel runs G independent lane groups (G * kLanes<F> sub-blocks)
// statement by statement side by side: every sub-block's sums are a chain of
// dependent adds, and interleaving two chains keeps the adder busy while one
// waits. The loops over g have a constant trip count and unroll.

// x, w: element i of every lane's sub-block (n elements), per group. Writes
// each lane's levels to L, its scale to scale_out and -min to the_min_out.
template <class F, class I, int G, int n>
TFS_LANES_INLINE void MakeQkx2Lanes(const F (&x)[G][n], const F (&w)[G][n], int nmax, float rmin, float rdelta,
                                    int nstep, I (&L)[G][n], F (&scale_out)[G], F (&the_min_out)[G]) {
  F min[G], max[G], sum_w[G], sum_x[G];
  _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
    min[g] = x[g][0];
    max[g] = x[g][0];
    sum_w[g] = w[g][0];
    sum_x[g] = sum_w[g] * x[g][0];
  }
  for (int i = 1; i < n; ++i) {
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      min[g] = Select(x[g][i] < min[g], x[g][i], min[g]);
      max[g] = Select(x[g][i] > max[g], x[g][i], max[g]);
      sum_w[g] += w[g][i];
      sum_x[g] += w[g][i] * x[g][i];
    }
  }
  I flat[G];  // these lanes return at once: L = 0, scale 0
  F iscale[G], scale[G], best_error[G];
  _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
    min[g] = Select(min[g] > 0.0f, F{}, min[g]);
    flat[g] = max[g] == min[g];
    iscale[g] = static_cast<float>(nmax) / (max[g] - min[g]);
    scale[g] = 1.0f / iscale[g];
    best_error[g] = F{};
  }
  for (int i = 0; i < n; ++i) {
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      L[g][i] = ClampLanes(NearestIntLanes<F, I>(iscale[g] * (x[g][i] - min[g])), 0, nmax);
      F diff = scale[g] * __builtin_convertvector(L[g][i], F) + min[g] - x[g][i];
      diff = diff * diff;
      best_error[g] += w[g][i] * diff;
    }
  }
  F laux[G][n];  // the candidate's levels, as floats
  for (int is = 0; is <= nstep; ++is) {
    // min is the best candidate's so far, as in ggml's loop.
    const float numerator = rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax);
    F sum_l[G], sum_l2[G], sum_xl[G];
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      iscale[g] = numerator / (max[g] - min[g]);
      sum_l[g] = F{};
      sum_l2[g] = F{};
      sum_xl[g] = F{};
    }
    for (int i = 0; i < n; ++i) {
      _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
        const F l = __builtin_convertvector(
            ClampLanes(NearestIntLanes<F, I>(iscale[g] * (x[g][i] - min[g])), 0, nmax), F);
        laux[g][i] = l;
        const F wl = w[g][i] * l;
        sum_l[g] += wl;
        sum_l2[g] += wl * l;
        sum_xl[g] += wl * x[g][i];
      }
    }
    I positive[G];
    F this_scale[G], this_min[G], cur_error[G];
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      const F D = sum_w[g] * sum_l2[g] - sum_l[g] * sum_l[g];
      positive[g] = D > 0.0f;
      this_scale[g] = (sum_w[g] * sum_xl[g] - sum_x[g] * sum_l[g]) / D;
      this_min[g] = (sum_l2[g] * sum_x[g] - sum_l[g] * sum_xl[g]) / D;
      const I clamp_min = this_min[g] > 0.0f;
      this_min[g] = Select(clamp_min, F{}, this_min[g]);
      this_scale[g] = Select(clamp_min, sum_xl[g] / sum_l2[g], this_scale[g]);
      cur_error[g] = F{};
    }
    for (int i = 0; i < n; ++i) {
      _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
        F diff = this_scale[g] * laux[g][i] + this_min[g] - x[g][i];
        diff = diff * diff;
        cur_error[g] += w[g][i] * diff;
      }
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      // A flat lane (ggml returned before the search) never gets here: its
      // x - min is 0, every candidate level 0 and D 0.
      const I better = positive[g] & (cur_error[g] < best_error[g]);
      for (int i = 0; i < n; ++i) {
        L[g][i] = SelectI(better, __builtin_convertvector(laux[g][i], I), L[g][i]);
      }
      best_error[g] = Select(better, cur_error[g], best_error[g]);
      scale[g] = Select(better, this_scale[g], scale[g]);
      min[g] = Select(better, this_min[g], min[g]);
    }
  }
  _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
    for (int i = 0; i < n; ++i) L[g][i] = SelectI(flat[g], I{}, L[g][i]);
    scale_out[g] = Select(flat[g], F{}, scale[g]);
    the_min_out[g] = -min[g];
  }
}

// ---- make_qx_quants with rmse_type 1 and no quant weights, lane j = sub-block j ----

// One candidate scale of make_qx_quants: each element's level at iscale, and
// the weighted sums sum(w x l) and sum(w l l), in element order.
template <class F, class I, int G, int n>
TFS_LANES_INLINE void QxCandidate(const F (&x)[G][n], const F (&w)[G][n], const F (&iscale)[G], int nmax,
                                  I (&levels)[G][n], F (&sumlx)[G], F (&suml2)[G]) {
  _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
    sumlx[g] = F{};
    suml2[g] = F{};
  }
  for (int i = 0; i < n; ++i) {
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      const I l = ClampLanes(NearestIntLanes<F, I>(iscale[g] * x[g][i]), -nmax, nmax - 1);
      levels[g][i] = l + nmax;
      const F lf = __builtin_convertvector(l, F);
      sumlx[g] += w[g][i] * x[g][i] * lf;
      suml2[g] += w[g][i] * lf * lf;
    }
  }
}

template <class F, class I, int G, int n>
TFS_LANES_INLINE void MakeQxLanes(const F (&x)[G][n], int nmax, I (&L)[G][n], F (&scale_out)[G]) {
  F max[G], amax[G];
  _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
    max[g] = F{};
    amax[g] = F{};
  }
  for (int i = 0; i < n; ++i) {
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      const F ax = AbsLanes<F, I>(x[g][i]);
      const I larger = ax > amax[g];
      amax[g] = Select(larger, ax, amax[g]);
      max[g] = Select(larger, x[g][i], max[g]);
    }
  }
  I zero[G];  // these lanes: L = 0, scale 0
  F w[G][n];  // rmse_type 1: x^2
  F iscale[G], sumlx[G], suml2[G];
  _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
    zero[g] = amax[g] < kGroupMaxEps;
    for (int i = 0; i < n; ++i) w[g][i] = x[g][i] * x[g][i];
    iscale[g] = static_cast<float>(-nmax) / max[g];
  }
  QxCandidate(x, w, iscale, nmax, L, sumlx, suml2);
  F scale[G], best[G];
  _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
    scale[g] = Select(suml2[g] != 0.0f, sumlx[g] / suml2[g], F{});
    best[g] = scale[g] * sumlx[g];
  }
  I candidate[G][n];
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float numerator = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is));
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) iscale[g] = numerator / max[g];
    QxCandidate(x, w, iscale, nmax, candidate, sumlx, suml2);
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      const I better = (suml2[g] > 0.0f) & (sumlx[g] * sumlx[g] > best[g] * suml2[g]);
      for (int i = 0; i < n; ++i) L[g][i] = SelectI(better, candidate[g][i], L[g][i]);
      scale[g] = Select(better, sumlx[g] / suml2[g], scale[g]);
      best[g] = Select(better, scale[g] * sumlx[g], best[g]);
    }
  }
  _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
    for (int i = 0; i < n; ++i) L[g][i] = SelectI(zero[g], I{}, L[g][i]);
    scale_out[g] = Select(zero[g], F{}, scale[g]);
  }
}

template <class F>
TFS_LANES_INLINE F LoadLanes(const float* p) {
  F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Lane j of out[i] is x[j * n + i]: element i of each of kLanes<F>
// consecutive sub-blocks of n elements.
template <class F, int n>
TFS_LANES_INLINE void Transpose(const float* x, F (&out)[n]) {
  float t[n][kLanes<F>];
  for (int j = 0; j < kLanes<F>; ++j) {
    for (int i = 0; i < n; ++i) t[i][j] = x[j * n + i];
  }
  for (int i = 0; i < n; ++i) out[i] = LoadLanes<F>(t[i]);
}

// ---- The K types ----

// quantize_row_q4_K_ref (nmax 15, search -1 + 0.1 * [0, 20]) and
// quantize_row_q5_K_ref (nmax 31, search -0.5 + 0.1 * [0, 15]): the same
// scales and packing of scales, the quants packed as each format does.
template <int kNmax, class F, class I, int G>
TFS_LANES_INLINE void SearchQ45K(const float* x, int subblocks, float* scales, float* mins, uint8_t* L) {
  constexpr int kGroup = G * kLanes<F>;  // sub-blocks of 32 at a time
  TENSORFS_CHECK(subblocks % kGroup == 0);
  for (int first = 0; first < subblocks; first += kGroup) {
    F xt[G][32];
    F w[G][32];
    I levels[G][32];
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      Transpose<F, 32>(x + 32 * (first + g * kLanes<F>), xt[g]);
      F sum_x2 = F{};
      for (int l = 0; l < 32; ++l) sum_x2 += xt[g][l] * xt[g][l];
      float av_x[kLanes<F>];
      for (int j = 0; j < kLanes<F>; ++j) av_x[j] = std::sqrt(sum_x2[j] / 32);
      const F av = LoadLanes<F>(av_x);
      for (int l = 0; l < 32; ++l) w[g][l] = av + AbsLanes<F, I>(xt[g][l]);
    }
    F scale_lanes[G];
    F min_lanes[G];
    if constexpr (kNmax == 15) {
      MakeQkx2Lanes<F, I, G, 32>(xt, w, 15, -1.f, 0.1f, 20, levels, scale_lanes, min_lanes);
    } else {
      MakeQkx2Lanes<F, I, G, 32>(xt, w, 31, -0.5f, 0.1f, 15, levels, scale_lanes, min_lanes);
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      for (int j = 0; j < kLanes<F>; ++j) {
        const int sub = first + g * kLanes<F> + j;
        for (int i = 0; i < 32; ++i) L[32 * sub + i] = static_cast<uint8_t>(levels[g][i][j]);
        scales[sub] = scale_lanes[g][j];
        mins[sub] = min_lanes[g][j];
      }
    }
  }
}

// The rest of the block once its 8 sub-blocks' scales, mins and levels are
// known: the 6-bit scales, the requantized levels, the packing.
template <int kNmax>
TFS_LANES_INLINE void FinishQ45KBlock(const float* x, const float* scales, const float* mins, uint8_t* L, uint8_t* y) {
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t* sc = y + 4;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      sc[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  const uint16_t d16 = GgmlFp32ToFp16(max_scale / 63.f);
  const uint16_t dmin16 = GgmlFp32ToFp16(max_min / 63.f);
  StoreLe16(y, d16);
  StoreLe16(y + 2, dmin16);
  const float d_all = HalfToFloat(d16);
  const float dmin_all = HalfToFloat(dmin16);
  for (int j = 0; j < 8; ++j) {
    uint8_t s;
    uint8_t m;
    if (j < 4) {  // get_scale_min_k4
      s = sc[j] & 63;
      m = sc[j + 4] & 63;
    } else {
      s = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4));
      m = static_cast<uint8_t>((sc[j + 4] >> 4) | ((sc[j - 0] >> 6) << 4));
    }
    const float d = d_all * s;
    if (!d) continue;
    const float dm = dmin_all * m;
    for (int ii = 0; ii < 32; ++ii) {
      int l = NearestInt((x[32 * j + ii] + dm) / d);
      l = l < kNmax ? l : kNmax;
      l = l > 0 ? l : 0;
      L[32 * j + ii] = static_cast<uint8_t>(l);
    }
  }
  if constexpr (kNmax == 15) {
    uint8_t* q = y + 16;
    for (int j = 0; j < kQK; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
  } else {
    uint8_t* qh = y + 16;
    uint8_t* ql = y + 48;
    std::memset(qh, 0, kQK / 8);
    uint8_t m1 = 1;
    uint8_t m2 = 2;
    for (int n = 0; n < kQK; n += 64) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
      ql += 32;
    }
  }
}

// quantize_row_q6_K_ref: the searches of make_qx_quants, sub-blocks of 16.
template <class F, class I, int G>
TFS_LANES_INLINE void SearchQ6K(const float* x, int subblocks, float* scales, int8_t* L) {
  constexpr int kGroup = G * kLanes<F>;  // sub-blocks of 16 at a time
  TENSORFS_CHECK(subblocks % kGroup == 0);
  for (int first = 0; first < subblocks; first += kGroup) {
    F xt[G][16];
    I levels[G][16];
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) Transpose<F, 16>(x + 16 * (first + g * kLanes<F>), xt[g]);
    F scale_lanes[G];
    MakeQxLanes<F, I, G, 16>(xt, 32, levels, scale_lanes);
    _Pragma("GCC unroll 4") for (int g = 0; g < G; ++g) {
      for (int j = 0; j < kLanes<F>; ++j) {
        const int sub = first + g * kLanes<F> + j;
        for (int i = 0; i < 16; ++i) L[16 * sub + i] = static_cast<int8_t>(levels[g][i][j]);
        scales[sub] = scale_lanes[g][j];
      }
    }
  }
}

// The rest of the block once its 16 sub-blocks' scales and levels are known.
TFS_LANES_INLINE void FinishQ6KBlock(const float* x, const float* scales, int8_t* L, uint8_t* y) {
  float max_scale = 0;
  float max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = scales[ib];
    const float abs_scale = std::fabs(scale);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scale;
    }
  }
  uint8_t* ql = y;
  uint8_t* qh = y + 128;
  int8_t* block_scales = reinterpret_cast<int8_t*>(y + 192);
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(y, 0, 210);
    StoreLe16(y + 208, GgmlFp32ToFp16(0.f));
    return;
  }
  const float iscale = -128.f / max_scale;
  const uint16_t d16 = GgmlFp32ToFp16(1 / iscale);
  StoreLe16(y + 208, d16);
  for (int ib = 0; ib < 16; ++ib) {
    const int v = NearestInt(iscale * scales[ib]);
    block_scales[ib] = static_cast<int8_t>(v < 127 ? v : 127);
  }
  const float d_all = HalfToFloat(d16);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * block_scales[j];
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) {
      int l = NearestInt(x[16 * j + ii] / d);
      l = l < 31 ? l : 31;
      l = l > -32 ? l : -32;
      L[16 * j + ii] = static_cast<int8_t>(l + 32);
    }
  }
  for (int j = 0; j < kQK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF;
      const uint8_t q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF;
      const uint8_t q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

// ---- Q8_0 ----

// quantize_row_q8_0_ref for one block, as the C code does it (the slow path:
// blocks holding NaN, or whose quants leave int8's range).
TFS_LANES_INLINE void QuantizeQ8_0BlockExact(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = std::fabs(x[j]);
    amax = amax > v ? amax : v;  // MAX(amax, fabsf(v)), NaN included
  }
  const float d = amax / ((1 << 7) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  StoreLe16(y, GgmlFp32ToFp16(d));
  for (int j = 0; j < 32; ++j) y[2 + j] = static_cast<uint8_t>(X86ToInt8(std::round(x[j] * id)));
}

// The same for one block, kLanes<F> elements at a time. Without NaN the
// maximum is the same in any order, and as long as every |x * id| < 127.5 the
// quants fit int8 and the conversion is exact; otherwise the block takes the
// exact path.
template <class F, class I>
TFS_LANES_INLINE void QuantizeQ8_0Block(const float* x, uint8_t* y) {
  constexpr int kVectors = 32 / kLanes<F>;
  F v[kVectors];
  for (int k = 0; k < kVectors; ++k) v[k] = LoadLanes<F>(x + kLanes<F> * k);
  F m = AbsLanes<F, I>(v[0]);
  I nan = v[0] != v[0];
  for (int k = 1; k < kVectors; ++k) {
    const F a = AbsLanes<F, I>(v[k]);
    m = Select(a > m, a, m);
    nan |= v[k] != v[k];
  }
  float amax = 0.0f;
  int any_nan = 0;
  for (int j = 0; j < kLanes<F>; ++j) {
    amax = amax > m[j] ? amax : m[j];
    any_nan |= nan[j];
  }
  const float d = amax / ((1 << 7) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  if (any_nan || !(amax * id < 127.5f)) {
    QuantizeQ8_0BlockExact(x, y);
    return;
  }
  StoreLe16(y, GgmlFp32ToFp16(d));
  int32_t q[32];
  for (int k = 0; k < kVectors; ++k) {
    // roundf: truncate, then step away from zero when the dropped part is >= 0.5
    // (the difference is exact below 2^23).
    const F s = v[k] * id;
    const I t = __builtin_convertvector(s, I);
    const F frac = s - __builtin_convertvector(t, F);
    const I away = AbsLanes<F, I>(frac) >= 0.5f;
    const I step = SelectI(s < 0.0f, I{} - 1, I{} + 1);
    const I r = t + (away & step);
    std::memcpy(q + kLanes<F> * k, &r, sizeof r);
  }
  for (int j = 0; j < 32; ++j) y[2 + j] = static_cast<uint8_t>(q[j]);
}

// ---- Q4_0 and Q5_0 (32-element fallbacks) ----

// quantize_row_q4_0_ref and quantize_row_q5_0_ref: max is the signed value of
// largest magnitude (the first of equal ones), d = max / -8 (-16).
template <int kBits>
void QuantizeQx0Block(const float* x, uint8_t* y) {
  constexpr int kHalf = 1 << (kBits - 1);  // 8 or 16
  constexpr int kTop = (1 << kBits) - 1;   // 15 or 31
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = x[j];
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float d = max / -kHalf;
  const float id = d ? 1.0f / d : 0.0f;
  StoreLe16(y, GgmlFp32ToFp16(d));
  uint32_t qh = 0;
  uint8_t* qs = y + (kBits == 4 ? 2 : 6);
  for (int j = 0; j < 16; ++j) {
    const float x0 = x[0 + j] * id;
    const float x1 = x[16 + j] * id;
    const int8_t t0 = X86ToInt8(x0 + (kHalf + 0.5f));
    const int8_t t1 = X86ToInt8(x1 + (kHalf + 0.5f));
    const uint8_t xi0 = static_cast<uint8_t>(t0 < kTop ? t0 : kTop);
    const uint8_t xi1 = static_cast<uint8_t>(t1 < kTop ? t1 : kTop);
    if constexpr (kBits == 4) {
      qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    } else {
      qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
    }
  }
  if constexpr (kBits == 5) {
    for (int k = 0; k < 4; ++k) y[2 + k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

// quantize_row_q5_1_ref: 31 levels from min to max; d and min stored.
TFS_LANES_INLINE void QuantizeQ5_1Block(const float* x, uint8_t* y) {
  float min = std::numeric_limits<float>::max();
  float max = -std::numeric_limits<float>::max();
  for (int j = 0; j < 32; ++j) {
    const float v = x[j];
    if (v < min) min = v;
    if (v > max) max = v;
  }
  const float d = (max - min) / ((1 << 5) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  StoreLe16(y, GgmlFp32ToFp16(d));
  StoreLe16(y + 2, GgmlFp32ToFp16(min));
  uint32_t qh = 0;
  uint8_t* qs = y + 8;
  for (int j = 0; j < 16; ++j) {
    const float x0 = (x[0 + j] - min) * id;
    const float x1 = (x[16 + j] - min) * id;
    const uint8_t xi0 = static_cast<uint8_t>(X86Cvtt(x0 + 0.5f));
    const uint8_t xi1 = static_cast<uint8_t>(X86Cvtt(x1 + 0.5f));
    qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
    qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
    qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
  }
  for (int k = 0; k < 4; ++k) y[4 + k] = static_cast<uint8_t>(qh >> (8 * k));
}

// ---- Rows ----

// The per-block kernels over a run of blocks, compiled once for baseline
// x86-64 and once (where the compiler targets x86) for AVX2.
struct Kernels {
  void (*q8_0)(const float* x, size_t blocks, uint8_t* y);
  void (*q4_k)(const float* x, size_t blocks, uint8_t* y);
  void (*q5_k)(const float* x, size_t blocks, uint8_t* y);
  void (*q6_k)(const float* x, size_t blocks, uint8_t* y);
};

// The K types search kChunkBlocks blocks' sub-blocks together (lanes may span
// blocks), then finish each block. A last, partial chunk is searched from a
// copy padded with zeros, so that every lane group is whole.
constexpr int kChunkBlocks = 4;

// Calls chunk(src, n, first) for each run of n <= kChunkBlocks blocks from
// block `first`; src holds kChunkBlocks whole blocks (the run's own, or a
// copy of a last, shorter run padded with zeros).
template <typename Chunk>
TFS_LANES_INLINE void ForEachChunk(const float* x, size_t blocks, Chunk&& chunk) {
  for (size_t first = 0; first < blocks; first += kChunkBlocks) {
    const size_t n = blocks - first < kChunkBlocks ? blocks - first : kChunkBlocks;
    const float* src = x + kQK * first;
    float padded[kQK * kChunkBlocks];
    if (n < kChunkBlocks) {
      std::memset(padded, 0, sizeof padded);
      std::memcpy(padded, src, n * kQK * sizeof(float));
      src = padded;
    }
    chunk(src, n, first);
  }
}

// (The lambdas are always inlined too, so that they are compiled for the
// kernel's own target.)
template <int kNmax, class F, class I, int G>
TFS_LANES_INLINE void Q45KRows(const float* x, size_t blocks, uint8_t* y) {
  constexpr size_t kBlockBytes = kNmax == 15 ? 144 : 176;
  ForEachChunk(x, blocks, [&](const float* src, size_t n, size_t first) __attribute__((always_inline)) {
    float scales[8 * kChunkBlocks];
    float mins[8 * kChunkBlocks];
    uint8_t L[kQK * kChunkBlocks];
    SearchQ45K<kNmax, F, I, G>(src, 8 * kChunkBlocks, scales, mins, L);
    for (size_t b = 0; b < n; ++b) {
      FinishQ45KBlock<kNmax>(src + kQK * b, scales + 8 * b, mins + 8 * b, L + kQK * b, y + kBlockBytes * (first + b));
    }
  });
}

template <class F, class I, int G>
TFS_LANES_INLINE void Q6KRows(const float* x, size_t blocks, uint8_t* y) {
  ForEachChunk(x, blocks, [&](const float* src, size_t n, size_t first) __attribute__((always_inline)) {
    float scales[16 * kChunkBlocks];
    int8_t L[kQK * kChunkBlocks];
    SearchQ6K<F, I, G>(src, 16 * kChunkBlocks, scales, L);
    for (size_t b = 0; b < n; ++b) FinishQ6KBlock(src + kQK * b, scales + 16 * b, L + kQK * b, y + 210 * (first + b));
  });
}

#define TFS_DEFINE_KERNELS(suffix, attribute, F, I, kG)                                                   \
  attribute void Q8_0Rows##suffix(const float* x, size_t blocks, uint8_t* y) {                         \
    for (size_t b = 0; b < blocks; ++b) QuantizeQ8_0Block<F, I>(x + 32 * b, y + 34 * b);               \
  }                                                                                                    \
  attribute void Q4KRows##suffix(const float* x, size_t blocks, uint8_t* y) { Q45KRows<15, F, I, kG>(x, blocks, y); } \
  attribute void Q5KRows##suffix(const float* x, size_t blocks, uint8_t* y) { Q45KRows<31, F, I, kG>(x, blocks, y); } \
  attribute void Q6KRows##suffix(const float* x, size_t blocks, uint8_t* y) { Q6KRows<F, I, kG>(x, blocks, y); }      \
  constexpr Kernels kKernels##suffix = {Q8_0Rows##suffix, Q4KRows##suffix, Q5KRows##suffix, Q6KRows##suffix};

TFS_DEFINE_KERNELS(Baseline, , F4, I4, 2)
#if defined(__x86_64__)
TFS_DEFINE_KERNELS(Avx2, __attribute__((target("avx2"))), F8, I8, 2)
#endif

const Kernels* KernelsOf(QuantPath path) {
  switch (path) {
    case QuantPath::kBaseline:
      return &kKernelsBaseline;
    case QuantPath::kAvx2: {
#if defined(__x86_64__)
      static const bool avx2 = __builtin_cpu_supports("avx2");
      return avx2 ? &kKernelsAvx2 : nullptr;
#else
      return nullptr;
#endif
    }
  }
  return nullptr;
}

const Kernels& FastestKernels() {
  static const Kernels* fastest = KernelsOf(QuantPath::kAvx2) != nullptr ? KernelsOf(QuantPath::kAvx2)
                                                                         : KernelsOf(QuantPath::kBaseline);
  return *fastest;
}

void Quantize(const Kernels& kernels, GgmlType type, std::span<const float> x, std::span<std::byte> out) {
  const uint64_t block = BlockElements(type);
  TENSORFS_CHECK(x.size() % block == 0);
  TENSORFS_CHECK(out.size() == RowBytes(type, x.size()));
  const float* src = x.data();
  uint8_t* dst = reinterpret_cast<uint8_t*>(out.data());
  const size_t blocks = x.size() / block;
  switch (type) {
    case GgmlType::kF32:
      if (!x.empty()) std::memcpy(dst, src, x.size() * sizeof(float));
      return;
    case GgmlType::kF16:
      for (size_t i = 0; i < x.size(); ++i) StoreLe16(dst + 2 * i, Fp32ToFp16(src[i]));
      return;
    case GgmlType::kBF16:
      for (size_t i = 0; i < x.size(); ++i) StoreLe16(dst + 2 * i, Fp32ToBf16(src[i]));
      return;
    case GgmlType::kQ4_0:
      for (size_t b = 0; b < blocks; ++b) QuantizeQx0Block<4>(src + 32 * b, dst + 18 * b);
      return;
    case GgmlType::kQ5_0:
      for (size_t b = 0; b < blocks; ++b) QuantizeQx0Block<5>(src + 32 * b, dst + 22 * b);
      return;
    case GgmlType::kQ5_1:
      for (size_t b = 0; b < blocks; ++b) QuantizeQ5_1Block(src + 32 * b, dst + 24 * b);
      return;
    case GgmlType::kQ8_0:
      kernels.q8_0(src, blocks, dst);
      return;
    case GgmlType::kQ4_K:
      kernels.q4_k(src, blocks, dst);
      return;
    case GgmlType::kQ5_K:
      kernels.q5_k(src, blocks, dst);
      return;
    case GgmlType::kQ6_K:
      kernels.q6_k(src, blocks, dst);
      return;
  }
  InternalFatal("QuantizeBlocks: unknown ggml type " + std::to_string(static_cast<uint32_t>(type)));
}

}  // namespace

bool QuantPathAvailable(QuantPath path) { return KernelsOf(path) != nullptr; }

void QuantizeBlocksOn(QuantPath path, GgmlType type, std::span<const float> x, std::span<std::byte> out) {
  const Kernels* kernels = KernelsOf(path);
  TENSORFS_CHECK(kernels != nullptr);
  Quantize(*kernels, type, x, out);
}

uint16_t Fp32ToFp16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // numpy's npy_floatbits_to_halfbits: the payload's top bits, kept a NaN.
    uint32_t half = 0x7c00u + ((bits & 0x007fffffu) >> 13);
    if (half == 0x7c00u) ++half;
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | half);
  }
  return GgmlFp32ToFp16(x);  // the same rounding for every number and inf
}

uint16_t Fp32ToBf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 64);
  return static_cast<uint16_t>((bits + (0x7fffu + ((bits >> 16) & 1u))) >> 16);
}

float Fp16ToFp32(uint16_t h) { return HalfToFloat(h); }

float Bf16ToFp32(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

void QuantizeBlocks(GgmlType type, std::span<const float> x, std::span<std::byte> out) {
  Quantize(FastestKernels(), type, x, out);
}

}  // namespace tensorfs
