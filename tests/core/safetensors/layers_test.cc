#include "core/safetensors/layers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>

#include "tests/support/checkpoint_gen.h"

namespace tensorfs {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::Arch;
using testing::ModelSpec;

// Tensor names sorted by name, as safetensors stores them: the grouping must
// not depend on storage order.
std::vector<std::string> SortedNames(const ModelSpec& spec) {
  std::vector<std::string> names;
  for (const testing::TensorSpec& t : testing::ModelTensors(spec)) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> Prefixes(const std::vector<LayerGroup>& groups) {
  std::vector<std::string> out;
  for (const LayerGroup& g : groups) out.push_back(g.prefix);
  return out;
}

LayerGrouper BuiltIn() {
  StatusOr<LayerGrouper> g = LayerGrouper::Create("");
  TENSORFS_CHECK(g.ok());
  return *g;
}

const LayerGroup& GroupNamed(const std::vector<LayerGroup>& groups, std::string_view prefix) {
  auto it = std::find_if(groups.begin(), groups.end(), [&](const LayerGroup& g) { return g.prefix == prefix; });
  TENSORFS_CHECK(it != groups.end());
  return *it;
}

TEST(LayersTest, LlamaGroupsInForwardOrder) {
  std::vector<LayerGroup> groups = BuiltIn().Group(SortedNames(ModelSpec{.layers = 3}));
  EXPECT_THAT(Prefixes(groups), ElementsAre("model.embed_tokens.", "model.layers.0.", "model.layers.1.",
                                            "model.layers.2.", "model.norm.", "lm_head."));
  EXPECT_EQ(groups[0].kind, LayerGroup::Kind::kEmbedding);
  EXPECT_EQ(groups[1].kind, LayerGroup::Kind::kBlock);
  EXPECT_EQ(groups[1].stack, "model.layers.");
  EXPECT_EQ(groups[1].tensors.size(), 9u);
  EXPECT_EQ(groups[4].kind, LayerGroup::Kind::kOther);
  EXPECT_EQ(groups[5].kind, LayerGroup::Kind::kHead);
}

TEST(LayersTest, Qwen2BiasesStayInTheirLayer) {
  std::vector<LayerGroup> groups = BuiltIn().Group(SortedNames(ModelSpec{.arch = Arch::kQwen2}));
  const LayerGroup& layer = GroupNamed(groups, "model.layers.1.");
  EXPECT_EQ(layer.tensors.size(), 12u);
  EXPECT_NE(std::find(layer.tensors.begin(), layer.tensors.end(), "model.layers.1.self_attn.k_proj.bias"),
            layer.tensors.end());
}

TEST(LayersTest, MixtralExpertsAndRouterStayInTheirLayer) {
  ModelSpec spec{.arch = Arch::kMixtral, .layers = 2, .experts = 8};
  std::vector<LayerGroup> groups = BuiltIn().Group(SortedNames(spec));
  EXPECT_THAT(Prefixes(groups), ElementsAre("model.embed_tokens.", "model.layers.0.", "model.layers.1.",
                                            "model.norm.", "lm_head."));
  const LayerGroup& layer = GroupNamed(groups, "model.layers.1.");
  EXPECT_EQ(layer.tensors.size(), 6u + 1u + 3u * 8u);
  EXPECT_EQ(BuiltIn().GroupOf("model.layers.3.block_sparse_moe.experts.7.w1.weight"), "model.layers.3.");
  EXPECT_EQ(BuiltIn().GroupOf("model.layers.3.block_sparse_moe.gate.weight"), "model.layers.3.");
  EXPECT_EQ(BuiltIn().GroupOf("model.layers.3.mlp.experts.12.down_proj.weight"), "model.layers.3.");
}

TEST(LayersTest, Gpt2HasTwoEmbeddingsBlocksAndFinalNormButNoHead) {
  std::vector<LayerGroup> groups = BuiltIn().Group(SortedNames(ModelSpec{.arch = Arch::kGpt2}));
  EXPECT_THAT(Prefixes(groups), ElementsAre("transformer.wte.", "transformer.wpe.", "transformer.h.0.",
                                            "transformer.h.1.", "transformer.ln_f."));
  EXPECT_EQ(groups[0].kind, LayerGroup::Kind::kEmbedding);
  EXPECT_EQ(groups[1].kind, LayerGroup::Kind::kEmbedding);
  EXPECT_EQ(groups[2].tensors.size(), 12u);
  EXPECT_EQ(groups[4].tensors.size(), 2u);
}

TEST(LayersTest, T5EncoderComesBeforeDecoder) {
  std::vector<LayerGroup> groups = BuiltIn().Group(SortedNames(ModelSpec{.arch = Arch::kT5}));
  EXPECT_THAT(Prefixes(groups),
              ElementsAre("shared.", "encoder.block.0.", "encoder.block.1.", "encoder.final_layer_norm.",
                          "decoder.block.0.", "decoder.block.1.", "decoder.final_layer_norm.", "lm_head."));
  // Block 0 carries the relative attention bias; nested "layer.N" stay inside the block.
  EXPECT_EQ(GroupNamed(groups, "encoder.block.0.").tensors.size(), 9u);
  EXPECT_EQ(GroupNamed(groups, "decoder.block.1.").tensors.size(), 13u);
  EXPECT_EQ(GroupNamed(groups, "decoder.block.1.").stack, "decoder.block.");
}

TEST(LayersTest, TiedEmbeddingModelHasNoHeadGroup) {
  std::vector<LayerGroup> groups = BuiltIn().Group(SortedNames(ModelSpec{.arch = Arch::kLlamaTied}));
  EXPECT_THAT(Prefixes(groups),
              ElementsAre("model.embed_tokens.", "model.layers.0.", "model.layers.1.", "model.norm."));
}

TEST(LayersTest, BlocksAreOrderedNumerically) {
  std::vector<LayerGroup> groups = BuiltIn().Group(SortedNames(ModelSpec{.layers = 12}));
  std::vector<std::string> expected = {"model.embed_tokens."};
  for (int i = 0; i < 12; ++i) expected.push_back("model.layers." + std::to_string(i) + ".");
  expected.push_back("model.norm.");
  expected.push_back("lm_head.");
  EXPECT_THAT(Prefixes(groups), ElementsAreArray(expected));
}

TEST(LayersTest, GroupsKeepTheGivenTensorOrder) {
  std::vector<std::string> names = {"model.layers.0.b.weight", "model.layers.0.a.weight",
                                    "model.layers.0.c.weight"};
  std::vector<LayerGroup> groups = BuiltIn().Group(names);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].tensors, names);
}

TEST(LayersTest, RecognizesCommonBlockNames) {
  LayerGrouper g = BuiltIn();
  EXPECT_EQ(g.GroupOf("model.decoder.layers.3.fc1.weight"), "model.decoder.layers.3.");
  EXPECT_EQ(g.GroupOf("model.language_model.layers.2.mlp.up_proj.weight"), "model.language_model.layers.2.");
  EXPECT_EQ(g.GroupOf("transformer.h.11.attn.c_attn.bias"), "transformer.h.11.");
  EXPECT_EQ(g.GroupOf("encoder.block.0.layer.1.DenseReluDense.wi.weight"), "encoder.block.0.");
  EXPECT_EQ(g.GroupOf("bert.encoder.layer.5.attention.self.query.weight"), "bert.encoder.layer.5.");
  EXPECT_EQ(g.GroupOf("vision_tower.blocks.4.attn.qkv.weight"), "vision_tower.blocks.4.");
}

TEST(LayersTest, TensorsOutsideBlocksAreGroupedByModule) {
  LayerGrouper g = BuiltIn();
  EXPECT_EQ(g.GroupOf("model.embed_tokens.weight"), "model.embed_tokens.");
  EXPECT_EQ(g.GroupOf("model.norm.weight"), "model.norm.");
  EXPECT_EQ(g.GroupOf("lm_head.weight"), "lm_head.");
  EXPECT_EQ(g.GroupOf("model.layers.weight"), "model.layers.");
  EXPECT_EQ(g.GroupOf("logit_scale"), "logit_scale");
}

TEST(LayersTest, EncoderDecoderStacksKeepTheirOwnNorms) {
  std::vector<std::string> names = {
      "model.decoder.layers.0.fc1.weight", "model.decoder.layer_norm.weight",
      "model.decoder.embed_tokens.weight", "model.encoder.layers.1.fc1.weight",
      "model.encoder.layers.0.fc1.weight", "model.encoder.layer_norm.weight",
      "model.encoder.embed_positions.weight", "proj_out.weight"};
  std::vector<LayerGroup> groups = BuiltIn().Group(names);
  EXPECT_THAT(Prefixes(groups),
              ElementsAre("model.encoder.embed_positions.", "model.decoder.embed_tokens.",
                          "model.encoder.layers.0.", "model.encoder.layers.1.", "model.encoder.layer_norm.",
                          "model.decoder.layers.0.", "model.decoder.layer_norm.", "proj_out."));
}

TEST(LayersTest, RegexCaptureGroupOverridesTheRules) {
  StatusOr<LayerGrouper> g = LayerGrouper::Create(R"(^(model\.layers\.\d+\.(self_attn|mlp)\.))");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->GroupOf("model.layers.7.self_attn.q_proj.weight"), "model.layers.7.self_attn.");
  EXPECT_EQ(g->GroupOf("model.layers.7.mlp.up_proj.weight"), "model.layers.7.mlp.");
  // Names the regex does not match fall back to the built-in rules.
  EXPECT_EQ(g->GroupOf("model.layers.7.input_layernorm.weight"), "model.layers.7.");
  EXPECT_EQ(g->GroupOf("lm_head.weight"), "lm_head.");

  std::vector<LayerGroup> groups = g->Group(SortedNames(ModelSpec{.layers = 2}));
  EXPECT_THAT(Prefixes(groups),
              ElementsAre("model.embed_tokens.", "model.layers.0.", "model.layers.0.mlp.",
                          "model.layers.0.self_attn.", "model.layers.1.", "model.layers.1.mlp.",
                          "model.layers.1.self_attn.", "model.norm.", "lm_head."));
}

TEST(LayersTest, RegexWithoutCaptureGroupUsesTheWholeMatch) {
  StatusOr<LayerGrouper> g = LayerGrouper::Create(R"(^model\.layers\.\d+\.)");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->GroupOf("model.layers.12.mlp.up_proj.weight"), "model.layers.12.");
  EXPECT_EQ(g->override_regex(), R"(^model\.layers\.\d+\.)");
}

TEST(LayersTest, InvalidRegexSaysWhatToWrite) {
  StatusOr<LayerGrouper> g = LayerGrouper::Create("model.layers.(\\d+");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("layer grouping regex 'model.layers.(\\d+'"));
  EXPECT_THAT(g.status().message(), HasSubstr("first capture group is the layer prefix"));
}

TEST(LayersTest, ConstMethodsAreSafeFromManyThreads) {
  StatusOr<LayerGrouper> g = LayerGrouper::Create(R"(^(model\.layers\.\d+\.))");
  ASSERT_TRUE(g.ok());
  const std::vector<std::string> names = SortedNames(ModelSpec{.layers = 8});
  const std::vector<LayerGroup> expected = g->Group(names);
  std::vector<std::thread> threads;
  std::vector<bool> same(4, false);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { same[t] = Prefixes(g->Group(names)) == Prefixes(expected); });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(same, ElementsAre(true, true, true, true));
}

}  // namespace
}  // namespace tensorfs
