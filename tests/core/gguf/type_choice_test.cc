#include "core/gguf/type_choice.h"

#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace tensorfs {

void PrintTo(GgmlType type, std::ostream* os) { *os << GgmlTypeName(type); }

namespace {

TensorTypeQuery Query(std::string name, std::vector<uint64_t> ne, uint32_t blocks = 32) {
  TensorTypeQuery q;
  q.name = std::move(name);
  q.ne = std::move(ne);
  q.block_count = blocks;
  q.arch = "llama";
  q.head_count = 32;
  q.head_count_kv = 8;
  return q;
}

GgmlType Type(GgufFileType file_type, const TensorTypeQuery& q) { return ChooseType(file_type, q); }

constexpr GgufFileType kF32 = GgufFileType::kAllF32;
constexpr GgufFileType kF16 = GgufFileType::kMostlyF16;
constexpr GgufFileType kBF16 = GgufFileType::kMostlyBF16;
constexpr GgufFileType kQ8 = GgufFileType::kMostlyQ8_0;
constexpr GgufFileType kQ4KM = GgufFileType::kMostlyQ4_K_M;

TEST(GgufFileTypeTest, NamesAreLlamaCppsSuffixes) {
  EXPECT_EQ(GgufFileTypeName(kF32), "F32");
  EXPECT_EQ(GgufFileTypeName(kF16), "F16");
  EXPECT_EQ(GgufFileTypeName(kBF16), "BF16");
  EXPECT_EQ(GgufFileTypeName(kQ8), "Q8_0");
  EXPECT_EQ(GgufFileTypeName(kQ4KM), "Q4_K_M");
  EXPECT_EQ(static_cast<uint32_t>(kQ4KM), 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  EXPECT_EQ(static_cast<uint32_t>(kBF16), 32u);
}

// ---- The converter's outtypes ----

TEST(ConverterTypeTest, MatricesTakeTheOuttype) {
  const TensorTypeQuery q = Query("blk.0.attn_q.weight", {4096, 4096});
  EXPECT_EQ(Type(kF32, q), GgmlType::kF32);
  EXPECT_EQ(Type(kF16, q), GgmlType::kF16);
  EXPECT_EQ(Type(kBF16, q), GgmlType::kBF16);
  EXPECT_EQ(Type(kQ8, q), GgmlType::kQ8_0);
}

TEST(ConverterTypeTest, EmbeddingsAndOutputTakeTheOuttypeToo) {
  EXPECT_EQ(Type(kQ8, Query("token_embd.weight", {4096, 128256})), GgmlType::kQ8_0);
  EXPECT_EQ(Type(kQ8, Query("output.weight", {4096, 128256})), GgmlType::kQ8_0);
  EXPECT_EQ(Type(kBF16, Query("token_embd.weight", {4096, 128256})), GgmlType::kBF16);
}

TEST(ConverterTypeTest, OneDimensionalTensorsStayF32) {
  for (GgufFileType ft : {kF16, kBF16, kQ8}) {
    EXPECT_EQ(Type(ft, Query("rope_freqs.weight", {64})), GgmlType::kF32);
    EXPECT_EQ(Type(ft, Query("blk.0.attn_q.weight_scale", {4096})), GgmlType::kF32);
  }
}

TEST(ConverterTypeTest, NormsStayF32) {
  for (GgufFileType ft : {kF16, kBF16, kQ8}) {
    EXPECT_EQ(Type(ft, Query("blk.3.attn_norm.weight", {4096})), GgmlType::kF32);
    EXPECT_EQ(Type(ft, Query("output_norm.weight", {4096})), GgmlType::kF32);
    EXPECT_EQ(Type(ft, Query("blk.3.attn_q_norm.weight", {128})), GgmlType::kF32);
    // A 2-D norm still ends in "_norm.weight".
    EXPECT_EQ(Type(ft, Query("blk.3.attn_k_norm.weight", {128, 8})), GgmlType::kF32);
  }
}

TEST(ConverterTypeTest, BiasesStayF32) {
  EXPECT_EQ(Type(kQ8, Query("blk.0.attn_q.bias", {4096})), GgmlType::kF32);
  // Two-dimensional, yet not ".weight".
  EXPECT_EQ(Type(kF16, Query("blk.0.attn_qkv.bias", {64, 3})), GgmlType::kF32);
}

TEST(ConverterTypeTest, ExpertRouterAndPositionTablesStayF32) {
  EXPECT_EQ(Type(kQ8, Query("blk.7.ffn_gate_inp.weight", {4096, 8})), GgmlType::kF32);
  EXPECT_EQ(Type(kBF16, Query("blk.7.ffn_gate_inp_shexp.weight", {2048, 1})), GgmlType::kF32);
  EXPECT_EQ(Type(kF16, Query("position_embd.weight", {768, 1024})), GgmlType::kF32);
  EXPECT_EQ(Type(kF16, Query("token_types.weight", {768, 2})), GgmlType::kF32);
}

TEST(ConverterTypeTest, ExpertMatricesTakeTheOuttype) {
  EXPECT_EQ(Type(kQ8, Query("blk.7.ffn_gate_exps.weight", {4096, 14336, 8})), GgmlType::kQ8_0);
}

TEST(ConverterTypeTest, Q8_0FallsBackToF16WhenRowsAreNotWholeBlocks) {
  EXPECT_EQ(Type(kQ8, Query("blk.0.ffn_down.weight", {11008, 4096})), GgmlType::kQ8_0);  // 11008 = 344 * 32
  EXPECT_EQ(Type(kQ8, Query("blk.0.ffn_down.weight", {1000, 4096})), GgmlType::kF16);
  EXPECT_EQ(Type(kQ8, Query("token_embd.weight", {2050, 32000})), GgmlType::kF16);
}

// ---- llama-quantize's Q4_K_M ----

TEST(Q4KMTypeTest, MostMatricesAreQ4K) {
  for (const char* name : {"blk.4.attn_q.weight", "blk.4.attn_k.weight", "blk.4.attn_output.weight",
                           "blk.4.ffn_gate.weight", "blk.4.ffn_up.weight"}) {
    EXPECT_EQ(Type(kQ4KM, Query(name, {4096, 4096})), GgmlType::kQ4_K) << name;
  }
}

TEST(Q4KMTypeTest, UntiedTokenEmbeddingIsQ4K) {
  EXPECT_EQ(Type(kQ4KM, Query("token_embd.weight", {4096, 32000})), GgmlType::kQ4_K);
}

TEST(Q4KMTypeTest, OutputIsQ6K) { EXPECT_EQ(Type(kQ4KM, Query("output.weight", {4096, 32000})), GgmlType::kQ6_K); }

TEST(Q4KMTypeTest, TiedTokenEmbeddingIsQ6K) {
  TensorTypeQuery q = Query("token_embd.weight", {2048, 128256}, 16);
  q.has_output = false;
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ6_K);
}

TEST(Q4KMTypeTest, OutputWhoseRowsAreNotWhole256BlocksIsQ8_0) {
  EXPECT_EQ(Type(kQ4KM, Query("output.weight", {2560 + 32, 32000})), GgmlType::kQ8_0);
  TensorTypeQuery tied = Query("token_embd.weight", {896, 151936}, 24);  // 896 = 3.5 * 256
  tied.has_output = false;
  EXPECT_EQ(Type(kQ4KM, tied), GgmlType::kQ8_0);
}

TEST(Q4KMTypeTest, OutputWhoseRowsAreNotWhole32BlocksIsF16) {
  EXPECT_EQ(Type(kQ4KM, Query("output.weight", {1000, 32000})), GgmlType::kF16);
}

// use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2.
const std::set<uint32_t> kMoreBitsOf32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};

TEST(Q4KMTypeTest, AttnVIsQ6KOnUseMoreBitsLayersOf32) {
  for (uint32_t i = 0; i < 32; ++i) {
    const std::string name = "blk." + std::to_string(i) + ".attn_v.weight";
    EXPECT_EQ(Type(kQ4KM, Query(name, {4096, 1024})), kMoreBitsOf32.count(i) ? GgmlType::kQ6_K : GgmlType::kQ4_K)
        << name;
  }
}

TEST(Q4KMTypeTest, FfnDownIsQ6KOnUseMoreBitsLayersOf32) {
  for (uint32_t i = 0; i < 32; ++i) {
    const std::string name = "blk." + std::to_string(i) + ".ffn_down.weight";
    EXPECT_EQ(Type(kQ4KM, Query(name, {14336, 4096})), kMoreBitsOf32.count(i) ? GgmlType::kQ6_K : GgmlType::kQ4_K)
        << name;
  }
}

TEST(Q4KMTypeTest, UseMoreBitsFollowsTheLayerCount) {
  // 24 layers: i < 3, i >= 21, or (i - 3) % 3 == 2.
  const std::set<uint32_t> more = {0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23};
  for (uint32_t i = 0; i < 24; ++i) {
    const std::string name = "blk." + std::to_string(i) + ".ffn_down.weight";
    EXPECT_EQ(Type(kQ4KM, Query(name, {4864, 896}, 24)), more.count(i) ? GgmlType::kQ6_K : GgmlType::kQ4_K) << i;
  }
}

TEST(Q4KMTypeTest, FusedQkvFollowsTheAttnVRules) {
  EXPECT_EQ(Type(kQ4KM, Query("blk.0.attn_qkv.weight", {3072, 9216})), GgmlType::kQ6_K);
  EXPECT_EQ(Type(kQ4KM, Query("blk.4.attn_qkv.weight", {3072, 9216})), GgmlType::kQ4_K);
  EXPECT_EQ(Type(kQ4KM, Query("blk.6.attn_qkv.weight", {3072, 9216})), GgmlType::kQ6_K);
}

TEST(Q4KMTypeTest, AttnVOf70BIsQ5KOffUseMoreBitsLayers) {
  TensorTypeQuery q = Query("blk.10.attn_v.weight", {8192, 1024}, 80);  // (10 - 10) % 3 == 0
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ5_K);
  q.name = "blk.12.attn_v.weight";  // (12 - 10) % 3 == 2
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ6_K);
  q.name = "blk.10.attn_v.weight";
  q.arch = "qwen2";
  q.head_count_kv = q.head_count;  // qwen2's 80 layers count as 70B whatever the heads
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ5_K);
}

TEST(Q4KMTypeTest, EightyLlamaLayersWithoutGqaAreNot70B) {
  TensorTypeQuery q = Query("blk.10.attn_v.weight", {8192, 8192}, 80);
  q.head_count_kv = q.head_count;  // 65B
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ4_K);
}

TEST(Q4KMTypeTest, EightExpertsRaiseAttentionAndDownProjections) {
  TensorTypeQuery q = Query("blk.5.attn_v.weight", {4096, 1024});
  q.expert_count = 8;
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ8_0);
  q.name = "blk.5.attn_k.weight";
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ8_0);
  q.name = "blk.5.attn_output.weight";
  q.ne = {4096, 4096};
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ5_K);
  q.name = "blk.5.attn_q.weight";
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ4_K);
  q.name = "blk.5.ffn_down_exps.weight";
  q.ne = {14336, 4096, 8};
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ4_K);  // layer 5 of 32: not a use_more_bits layer
  q.name = "blk.6.ffn_down_exps.weight";
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ6_K);
  q.name = "blk.6.ffn_gate_exps.weight";
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ4_K);
}

TEST(Q4KMTypeTest, OtherExpertCountsKeepTheDenseRules) {
  TensorTypeQuery q = Query("blk.7.attn_v.weight", {2048, 512}, 48);  // 7 >= 48 / 8, (7 - 6) % 3 == 1
  q.expert_count = 128;  // Qwen3-MoE
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ4_K);
  q.name = "blk.7.attn_output.weight";
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ4_K);
}

TEST(Q4KMTypeTest, RowsNotWhole256BlocksFallBackToQ5_0) {
  EXPECT_EQ(Type(kQ4KM, Query("blk.4.ffn_gate.weight", {4096 + 32, 11008})), GgmlType::kQ5_0);
}

TEST(Q4KMTypeTest, Q6KFallsBackToQ8_0) {
  EXPECT_EQ(Type(kQ4KM, Query("blk.0.ffn_down.weight", {11008, 4096})), GgmlType::kQ6_K);  // 43 * 256
  EXPECT_EQ(Type(kQ4KM, Query("blk.0.ffn_down.weight", {11008 + 32, 4096})), GgmlType::kQ8_0);
}

TEST(Q4KMTypeTest, Q5KFallsBackToQ5_1) {
  TensorTypeQuery q = Query("blk.5.attn_output.weight", {4096 + 32, 4096});
  q.expert_count = 8;
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kQ5_1);
}

TEST(Q4KMTypeTest, RowsNotWhole32BlocksFallBackToF16) {
  EXPECT_EQ(Type(kQ4KM, Query("blk.4.ffn_gate.weight", {1000, 11008})), GgmlType::kF16);
  EXPECT_EQ(Type(kQ4KM, Query("blk.0.ffn_down.weight", {1000, 4096})), GgmlType::kF16);
}

TEST(Q4KMTypeTest, WhatIsNotQuantizedKeepsTheSourceFilesType) {
  EXPECT_EQ(Type(kQ4KM, Query("blk.0.attn_norm.weight", {4096})), GgmlType::kF32);
  EXPECT_EQ(Type(kQ4KM, Query("blk.0.attn_q.bias", {4096})), GgmlType::kF32);
  EXPECT_EQ(Type(kQ4KM, Query("rope_freqs.weight", {64})), GgmlType::kF32);
  EXPECT_EQ(Type(kQ4KM, Query("blk.7.ffn_gate_inp.weight", {4096, 8})), GgmlType::kF32);
  EXPECT_EQ(Type(kQ4KM, Query("blk.3.attn_k_norm.weight", {128, 8})), GgmlType::kF32);
}

TEST(Q4KMTypeTest, AMatrixWithATrailingOneIsCopiedFromTheSourceFile) {
  // The converter counts the shape's dimensions (2: F16 or BF16 in its file);
  // llama-quantize counts them without trailing ones (1: not quantized).
  TensorTypeQuery q = Query("blk.0.attn_sinks.weight", {64, 1});
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kF16);
  q.quantize_from = kBF16;
  EXPECT_EQ(Type(kQ4KM, q), GgmlType::kBF16);
}

TEST(ChooseTypeDeathTest, Q4KMOfABlockPastTheBlockCountIsABug) {
  EXPECT_DEATH(Type(kQ4KM, Query("blk.40.ffn_down.weight", {4096, 4096}, 32)), "check failed");
}

}  // namespace
}  // namespace tensorfs
