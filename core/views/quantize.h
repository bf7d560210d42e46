// Quantization and cast kernels behind the transformed views: NF4 and 8-bit
// blockwise (splitted_model.4bit/.8bit, @bnb-nf4), LLM.int8 row-wise
// (@bnb-int8), and the BF16 / F16 casts (@bf16, @f16).
//
// Each kernel reproduces one of bitsandbytes' published algorithms in float32
// arithmetic, so that a view file holds the bytes bitsandbytes would have
// produced on a GPU for the same weights, and loaders (transformers, AirLLM)
// read it without knowing it was made elsewhere. Callers decode the source
// elements to float32 first (DecodeFloats: BF16 and F16 widen exactly), then
// call a kernel over whole blocks (or whole rows for int8).
//
// Blockwise quantizers (NF4, 8-bit) share these rules:
//  - absmax of a block = max |x| over its elements, NaN ignored (CUDA fmaxf);
//    0 for a block that is all zeros or all NaN; inf if the block holds an inf.
//  - s = 1.0f / absmax (float32 division), y = x * s (float32 multiply).
//  - All-zero (or all-NaN) block: s = inf, so every y = 0 * inf = NaN, which
//    both code searches send to code 0 (NF4 -1.0, dynamic map -0.99296875);
//    it dequantizes to code * absmax = -0.0, still zero.
//  - A NaN element gives y = NaN: code 0.
//  - A block holding +-inf: absmax inf, s = 0; finite elements give y = 0
//    (NF4 code 7, 8-bit code 127, both 0.0) and +-inf gives inf * 0 = NaN:
//    code 0.
//  - The last block may be partial: its absmax is over the elements present.
//    NF4 with an odd element count pads the low nibble of the last byte with
//    the code of 0.0f * s: 7, or 0 when that block's absmax is 0 (s = inf).
//
// Thread-safety: pure functions over caller-owned buffers; the code tables are
// immutable and built on first use under the C++ guarantee for function-local
// statics, so every function may be called from any thread at once.
//
// Cost: no allocation, no locks; SIMD where it pays (see quantize.cc). Preconditions
// (sizes, block size) are checked with TENSORFS_CHECK and abort when broken:
// a mismatch is a bug in the caller, never a property of the input data.
#ifndef TENSORFS_CORE_VIEWS_QUANTIZE_H_
#define TENSORFS_CORE_VIEWS_QUANTIZE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/safetensors/dtype.h"

namespace tensorfs::quant {

// bitsandbytes' defaults for the views: quantize_4bit(blocksize=64) and the
// blocksize AirLLM passes to quantize_blockwise.
inline constexpr size_t kNf4BlockSize = 64;
inline constexpr size_t kBlockwise8BlockSize = 2048;

// The 16 NF4 values (bitsandbytes get_4bit_type("nf4")), ascending; code i
// dequantizes to Nf4Code()[i] * absmax.
const std::array<float, 16>& Nf4Code();

// bitsandbytes create_dynamic_map(signed=True, max_exponent_bits=7,
// total_bits=8): 256 values ascending from -0.99296875 to 1.0, with 0.0 at
// index 127. Computed once, in float32, evaluating that Python function with
// the scalar formula of torch's CPU linspace (see quantize.cc).
const std::array<float, 256>& DynamicCode();

// Exact widening of one BF16 / F16 value (bit pattern) to float32. NaN payloads
// and signs are kept; F16 subnormals become normal floats.
float Bf16ToFloat(uint16_t bits);
float F16ToFloat(uint16_t bits);

// Narrowing with round-to-nearest-even. NaN stays a quiet NaN with its sign;
// +-inf stays +-inf. BF16 overflow rounds to +-inf as IEEE rounding does. F16:
// magnitudes from 65520 up become +-inf, results below 2^-14 are F16
// subnormals rounded to nearest even (down to +-0).
uint16_t FloatToBf16(float value);
uint16_t FloatToF16(float value);

// Decodes little-endian F32, F16 or BF16 elements into float32.
// Preconditions: dtype is F32, F16 or BF16; in.size() == out.size() * element
// size.
void DecodeFloats(Dtype dtype, std::span<const std::byte> in, std::span<float> out);

// Writes each float as little-endian BF16 or F16 (FloatToBf16 / FloatToF16).
// Preconditions: `to` is BF16 or F16; out.size() == in.size() * 2.
void EncodeHalf(Dtype to, std::span<const float> in, std::span<std::byte> out);

// absmax[b] = max |x| over block b (elements [b*blocksize, (b+1)*blocksize),
// the last block possibly partial), NaN ignored, 0 when nothing but NaN/zeros.
// Preconditions: blocksize > 0; absmax.size() == ceil(x.size() / blocksize).
void BlockAbsmax(std::span<const float> x, size_t blocksize, std::span<float> absmax);

// bitsandbytes quantize_4bit(quant_type="nf4") without double quantization:
// writes the block absmax values and the packed codes, byte j = code(x[2j]) << 4
// | code(x[2j+1]), where code(x) is the decision tree of bnb's dQuantizeNF4
// applied to x * (1.0f / absmax): comparisons `y > t` against its 15
// thresholds, so a value exactly at a threshold takes the lower code and NaN
// takes code 0.
// x holds whole blocks (the last may be partial), so a call may cover a slice
// of a tensor that starts at a block boundary.
// Preconditions: blocksize > 0 and even; packed.size() == (x.size() + 1) / 2;
// absmax.size() == ceil(x.size() / blocksize).
void QuantizeNf4(std::span<const float> x, size_t blocksize, std::span<uint8_t> packed,
                 std::span<float> absmax);

// bitsandbytes quantize_blockwise with the dynamic map (DynamicCode): per
// element, bnb's dQuantize<0> binary search over the map of x * (1.0f /
// absmax). It picks the nearer of the two neighbouring map values, a tie going
// to the even index; NaN fails every comparison and lands on code 0.
// Preconditions: blocksize > 0; codes.size() == x.size(); absmax.size() ==
// ceil(x.size() / blocksize).
void QuantizeBlockwise8(std::span<const float> x, size_t blocksize, std::span<uint8_t> codes,
                        std::span<float> absmax);

// One row of LLM.int8 row-wise quantization (bnb int8_vectorwise_quant, no
// outlier threshold): r = max |x| (NaN ignored), scale = 127.0f / r,
// out[i] = x[i] * scale rounded half to even, clamped to [-127, 127]; a NaN
// product (NaN input, or 0 * inf in a zero row, or inf * 0 when r is inf)
// gives 0. Returns r, the row's SCB value.
// Precondition: out.size() == row.size().
float QuantizeRowInt8(std::span<const float> row, std::span<int8_t> out);

}  // namespace tensorfs::quant

#endif  // TENSORFS_CORE_VIEWS_QUANTIZE_H_
