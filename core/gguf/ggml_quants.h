// ggml's block formats, computed from float32 input bit for bit as llama.cpp's
// own tools compute them: a GGUF file that tensorfs serves holds the bytes that
// convert_hf_to_gguf.py (F16, BF16, Q8_0) and llama-quantize (Q4_K_M's Q4_K,
// Q5_K, Q6_K and its fallbacks Q5_0, Q5_1, Q8_0) would have written for the same
// weights.
//
// The reference is ggml/src/ggml-quants.c (quantize_row_*_ref, the path every
// quantization without an importance matrix takes), as built for x86-64 by
// llama.cpp's own build: no -ffast-math, and no fused multiply-add (baseline
// x86-64 has none, and ggml-base is compiled for it). Where that C code has
// implementation-defined results (a float outside int8's range converted to
// int8_t) this follows what the x86-64 build does: the value truncated to int32
// (INT32_MIN when out of range or NaN) and its low byte kept. These matter only
// for blocks of subnormal or non-finite weights; for a block holding NaN the
// Python converter's numpy Q8_0 may differ from ggml's C code, and this follows
// the C code.
//
// Callers decode source elements to float32 first (BF16 and F16 widen
// exactly), then quantize whole blocks. Every block is independent of the
// others (no importance matrix), so any run of whole blocks of a row can be
// computed on its own, in any order, on any thread.
//
// Thread-safety: pure functions over caller-owned buffers; safe from any
// thread. The fastest path the CPU supports (AVX2 or the x86-64 baseline) is
// chosen once, on first use; every path gives the same bytes.
//
// Preconditions (TENSORFS_CHECK, a broken one aborts: it is a bug in the
// caller, never a property of the data): the type is one of ggml_types.h's;
// x.size() is a multiple of BlockElements(type); out.size() ==
// RowBytes(type, x.size()).
#ifndef TENSORFS_CORE_GGUF_GGML_QUANTS_H_
#define TENSORFS_CORE_GGUF_GGML_QUANTS_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/gguf/ggml_types.h"

namespace tensorfs {

// Quantizes x into out, little-endian, in the block layout of ggml-common.h:
//  - F32: the floats as they are.
//  - F16: Fp32ToFp16 of each (numpy's astype(float16), what the converter
//    writes). BF16: Fp32ToBf16 of each (ggml_compute_fp32_to_bf16).
//  - Q8_0: quantize_row_q8_0_ref. Q4_0: quantize_row_q4_0_ref. Q5_0:
//    quantize_row_q5_0_ref. Q5_1: quantize_row_q5_1_ref.
//  - Q4_K, Q5_K, Q6_K: quantize_row_q4_K_ref, _q5_K_ref, _q6_K_ref, with
//    their weighted searches (make_qkx2_quants, make_qx_quants).
void QuantizeBlocks(GgmlType type, std::span<const float> x, std::span<std::byte> out);

// float32 -> IEEE half, round to nearest even; magnitudes from 65520 up become
// inf; results below 2^-14 are half subnormals. NaN keeps its sign and the top
// 10 bits of its payload, made non-zero (0x7c01) if they were all zero, as
// numpy's astype(float16) does.
uint16_t Fp32ToFp16(float x);
// float32 -> bfloat16, round to nearest even; NaN made quiet (the top mantissa
// bit set), its sign and top payload bits kept.
uint16_t Fp32ToBf16(float x);
// Exact widening of a half (bit pattern) to float32.
float Fp16ToFp32(uint16_t h);
// Exact widening of a bfloat16 (bit pattern) to float32.
float Bf16ToFp32(uint16_t h);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_GGUF_GGML_QUANTS_H_
