// RewriteModelConfig: config.json of the cast and bitsandbytes views, with the
// weights' dtype under "dtype" (transformers >= 4.56), "torch_dtype" (older),
// both, nested in sub-configs, or absent.
#include "core/views/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tensorfs {
namespace {

using Json = nlohmann::ordered_json;

Json Parse(const char* text) { return Json::parse(text); }

Json Cast(const char* text, ConfigRewrite how = ConfigRewrite::kCastBf16) {
  return RewriteModelConfig(Parse(text), how, std::nullopt);
}

TEST(ConfigRewriteTest, CastSetsDtypeKey) {
  Json out = Cast(R"({"model_type": "llama", "dtype": "float32"})");
  EXPECT_EQ(out["dtype"], "bfloat16");
  EXPECT_FALSE(out.contains("torch_dtype"));
}

TEST(ConfigRewriteTest, CastSetsTorchDtypeKey) {
  Json out = Cast(R"({"model_type": "llama", "torch_dtype": "float32"})", ConfigRewrite::kCastF16);
  EXPECT_EQ(out["torch_dtype"], "float16");
  EXPECT_FALSE(out.contains("dtype"));
}

TEST(ConfigRewriteTest, CastSetsBothKeysWhenBothArePresent) {
  Json out = Cast(R"({"dtype": "float32", "torch_dtype": "float32"})");
  EXPECT_EQ(out["dtype"], "bfloat16");
  EXPECT_EQ(out["torch_dtype"], "bfloat16");
}

TEST(ConfigRewriteTest, CastAddsNoKeyToAConfigWithout) {
  const Json in = Parse(R"({"model_type": "gpt2", "n_layer": 4})");
  EXPECT_EQ(RewriteModelConfig(in, ConfigRewrite::kCastBf16, std::nullopt), in);
}

TEST(ConfigRewriteTest, CastSetsNestedSubConfigs) {
  Json out = Cast(R"({"model_type": "llava", "dtype": "float32",
                      "text_config": {"model_type": "llama", "dtype": "float32"},
                      "vision_config": {"model_type": "clip_vision_model", "torch_dtype": "float32"},
                      "audio_config": {"model_type": "whisper"}})",
                  ConfigRewrite::kCastF16);
  EXPECT_EQ(out["dtype"], "float16");
  EXPECT_EQ(out["text_config"]["dtype"], "float16");
  EXPECT_EQ(out["vision_config"]["torch_dtype"], "float16");
  EXPECT_FALSE(out["audio_config"].contains("dtype"));
  EXPECT_FALSE(out["audio_config"].contains("torch_dtype"));
}

TEST(ConfigRewriteTest, CastSetsEachEntryOfAPerSubConfigDtypeMap) {
  Json out = Cast(R"({"dtype": {"text_config": "float32", "vision_config": "float16"}})");
  EXPECT_EQ(out["dtype"]["text_config"], "bfloat16");
  EXPECT_EQ(out["dtype"]["vision_config"], "bfloat16");
}

TEST(ConfigRewriteTest, CastLeavesNullAndNonFloatDtypeValues) {
  // Some vocabularies have a token named "dtype".
  Json out = Cast(R"({"dtype": null, "vocabulary_map": {"dtype": 1234}, "torch_dtype": "int8"})");
  EXPECT_TRUE(out["dtype"].is_null());
  EXPECT_EQ(out["vocabulary_map"]["dtype"], 1234);
  EXPECT_EQ(out["torch_dtype"], "int8");
}

TEST(ConfigRewriteTest, CastKeepsKeyOrderAndOtherValues) {
  Json out = Cast(R"({"b": 1, "dtype": "float32", "a": [1, 2]})");
  EXPECT_EQ(out.dump(), R"({"b":1,"dtype":"bfloat16","a":[1,2]})");
}

TEST(ConfigRewriteTest, DeclaredDtypePrefersDtypeOverTorchDtype) {
  EXPECT_EQ(DeclaredWeightDtype(Parse(R"({"torch_dtype": "float16", "dtype": "bfloat16"})")), "bfloat16");
  EXPECT_EQ(DeclaredWeightDtype(Parse(R"({"torch_dtype": "float16"})")), "float16");
  EXPECT_EQ(DeclaredWeightDtype(Parse(R"({"dtype": null, "torch_dtype": "float16"})")), "float16");
  EXPECT_EQ(DeclaredWeightDtype(Parse(R"({"model_type": "gpt2"})")), std::nullopt);
  EXPECT_EQ(DeclaredWeightDtype(Parse(R"({"dtype": {"text_config": "float16"}})")), std::nullopt);
}

TEST(ConfigRewriteTest, BnbComputeDtypeFollowsTheDtypeKey) {
  Json out = RewriteModelConfig(Parse(R"({"dtype": "bfloat16"})"), ConfigRewrite::kBnbNf4, Dtype::F32);
  EXPECT_EQ(out["quantization_config"]["bnb_4bit_compute_dtype"], "bfloat16");
  EXPECT_EQ(out["dtype"], "bfloat16") << "unquantized tensors keep their dtype";
}

TEST(ConfigRewriteTest, BnbComputeDtypeFollowsTheTorchDtypeKey) {
  Json out = RewriteModelConfig(Parse(R"({"torch_dtype": "float16"})"), ConfigRewrite::kBnbInt8, Dtype::F32);
  EXPECT_EQ(out["quantization_config"]["bnb_4bit_compute_dtype"], "float16");
  EXPECT_EQ(out["torch_dtype"], "float16");
  EXPECT_FALSE(out.contains("dtype"));
}

TEST(ConfigRewriteTest, BnbComputeDtypeTakesDtypeWhenBothKeysDisagree) {
  Json out = RewriteModelConfig(Parse(R"({"dtype": "float32", "torch_dtype": "bfloat16"})"),
                                ConfigRewrite::kBnbNf4, Dtype::BF16);
  EXPECT_EQ(out["quantization_config"]["bnb_4bit_compute_dtype"], "float32");
}

TEST(ConfigRewriteTest, BnbComputeDtypeFallsBackToTheQuantizedTensorsWithoutAKey) {
  Json out = RewriteModelConfig(Parse(R"({"model_type": "gpt2"})"), ConfigRewrite::kBnbNf4, Dtype::BF16);
  EXPECT_EQ(out["quantization_config"]["bnb_4bit_compute_dtype"], "bfloat16");
  EXPECT_FALSE(out.contains("dtype"));
  EXPECT_FALSE(out.contains("torch_dtype"));
  Json none = RewriteModelConfig(Parse(R"({"model_type": "gpt2"})"), ConfigRewrite::kBnbNf4, std::nullopt);
  EXPECT_EQ(none["quantization_config"]["bnb_4bit_compute_dtype"], "float32");
}

TEST(ConfigRewriteTest, BnbLeavesNestedDtypesAndSetsQuantizationConfigAtTheTop) {
  Json out = RewriteModelConfig(Parse(R"({"text_config": {"dtype": "float32"}})"), ConfigRewrite::kBnbInt8,
                                Dtype::F16);
  EXPECT_EQ(out["text_config"]["dtype"], "float32");
  EXPECT_FALSE(out["text_config"].contains("quantization_config"));
  const Json& q = out["quantization_config"];
  EXPECT_EQ(q["quant_method"], "bitsandbytes");
  EXPECT_EQ(q["load_in_8bit"], true);
  EXPECT_EQ(q["load_in_4bit"], false);
  EXPECT_EQ(q["bnb_4bit_compute_dtype"], "float16");
}

TEST(ConfigRewriteTest, BnbReplacesAnExistingQuantizationConfig) {
  Json out = RewriteModelConfig(Parse(R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})"),
                                ConfigRewrite::kBnbNf4, Dtype::F32);
  EXPECT_EQ(out["quantization_config"]["quant_method"], "bitsandbytes");
  EXPECT_FALSE(out["quantization_config"].contains("bits"));
  EXPECT_EQ(out["quantization_config"]["load_in_4bit"], true);
}

// The keys transformers' save_pretrained() writes for a bitsandbytes model
// (BitsAndBytesConfig.to_dict(): its attributes, the private _load_in_* and
// quant_method included, plus load_in_4bit and load_in_8bit), and no others.
TEST(ConfigRewriteTest, BnbQuantizationConfigHoldsTheKeysTransformersWrites) {
  const std::vector<std::string> want = {
      "_load_in_4bit",        "_load_in_8bit",          "bnb_4bit_compute_dtype",   "bnb_4bit_quant_storage",
      "bnb_4bit_quant_type",  "bnb_4bit_use_double_quant", "llm_int8_enable_fp32_cpu_offload",
      "llm_int8_has_fp16_weight", "llm_int8_skip_modules", "llm_int8_threshold", "load_in_4bit",
      "load_in_8bit",         "quant_method"};
  for (ConfigRewrite how : {ConfigRewrite::kBnbNf4, ConfigRewrite::kBnbInt8}) {
    const Json out = RewriteModelConfig(Parse(R"({"model_type": "llama", "dtype": "bfloat16"})"), how, Dtype::BF16);
    std::vector<std::string> keys;
    for (const auto& [key, _] : out["quantization_config"].items()) keys.push_back(key);
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(keys, want);
    const Json& q = out["quantization_config"];
    EXPECT_EQ(q["_load_in_4bit"], q["load_in_4bit"]);
    EXPECT_EQ(q["_load_in_8bit"], q["load_in_8bit"]);
  }
}

}  // namespace
}  // namespace tensorfs
