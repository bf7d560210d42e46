#include "core/safetensors/inspect.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/memory_store.h"

namespace tensorfs {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MemoryStore;
using testing::ModelSpec;
using testing::PutCheckpoint;
using testing::WriteOptions;

LayerGrouper BuiltIn() {
  StatusOr<LayerGrouper> g = LayerGrouper::Create("");
  TENSORFS_CHECK(g.ok());
  return *g;
}

class InspectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(PutCheckpoint(store_, "models/llama/", ModelSpec{.layers = 2, .dtype = Dtype::BF16},
                              WriteOptions{.num_shards = 2})
                    .ok());
  }
  MemoryStore store_;
};

TEST_F(InspectTest, ReportListsFilesTensorsAndGroups) {
  StatusOr<InspectReport> r = BuildInspectReport(store_, "models/llama/", BuiltIn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok());
  ASSERT_EQ(r->files.size(), 2u);
  EXPECT_EQ(r->files[0].name, "model-00001-of-00002.safetensors");
  EXPECT_GT(r->files[0].header_bytes, 8u);
  EXPECT_EQ(r->files[0].tensor_count + r->files[1].tensor_count, r->tensors.size());
  EXPECT_THAT(r->indexes, ElementsAre("model.safetensors.index.json"));
  EXPECT_EQ(r->groups.size(), 5u);
  EXPECT_EQ(r->groups.front().prefix, "model.embed_tokens.");
  EXPECT_EQ(r->groups.back().prefix, "lm_head.");
  EXPECT_EQ(r->total_tensor_bytes, testing::ModelTensorBytes(ModelSpec{.layers = 2, .dtype = Dtype::BF16}));
}

TEST_F(InspectTest, GroupSplitAcrossShardsListsBothFiles) {
  StatusOr<InspectReport> r = BuildInspectReport(store_, "models/llama/", BuiltIn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  size_t spanning = 0;
  for (const auto& g : r->groups) spanning += g.files.size() == 2 ? 1 : 0;
  EXPECT_GE(spanning, 1u);
}

TEST_F(InspectTest, TextShowsEveryTensorWithItsShapeAndGroup) {
  StatusOr<InspectReport> r = BuildInspectReport(store_, "models/llama/", BuiltIn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string text = RenderInspectText(*r);
  EXPECT_THAT(text, AllOf(HasSubstr("Checkpoint: memory/models/llama/"), HasSubstr("model-00001-of-00002.safetensors"),
                          HasSubstr("LAYER GROUP"), HasSubstr("model.layers.1.")));
  for (const auto& t : r->tensors) EXPECT_THAT(text, HasSubstr(t.name));
  EXPECT_THAT(text, HasSubstr("model.layers.0.mlp.down_proj.weight"));
  EXPECT_THAT(text, HasSubstr("[64, 128]"));
  EXPECT_THAT(text, HasSubstr("BF16"));
}

TEST_F(InspectTest, JsonHoldsTensorsGroupsAndFiles) {
  StatusOr<InspectReport> r = BuildInspectReport(store_, "models/llama/", BuiltIn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  nlohmann::json doc = nlohmann::json::parse(RenderInspectJson(*r));
  EXPECT_TRUE(doc["ok"].get<bool>());
  EXPECT_EQ(doc["files"].size(), 2u);
  EXPECT_EQ(doc["tensors"].size(), r->tensors.size());
  bool found = false;
  for (const auto& t : doc["tensors"]) {
    if (t["name"] == "model.layers.0.mlp.down_proj.weight") {
      found = true;
      EXPECT_EQ(t["dtype"], "BF16");
      EXPECT_EQ(t["shape"], nlohmann::json::array({64, 128}));
      EXPECT_EQ(t["bytes"], 64 * 128 * 2);
      EXPECT_EQ(t["group"], "model.layers.0.");
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(doc["groups"][0]["prefix"], "model.embed_tokens.");
  EXPECT_EQ(doc["groups"][0]["kind"], "embedding");
}

TEST_F(InspectTest, CorruptFileShowsItsReasonAndOthersAreStillReported) {
  // Keep the size, break the offsets: the last tensor now ends past the file.
  std::string json = R"({"w":{"dtype":"F32","shape":[512],"data_offsets":[0,2048]}})";
  std::string file = testing::FileWithHeaderJson(json, 1024);
  store_.Put("models/llama/model-00002-of-00002.safetensors", file);
  StatusOr<InspectReport> r = BuildInspectReport(store_, "models/llama/", BuiltIn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok());
  EXPECT_FALSE(r->AllFilesOk());
  ASSERT_EQ(r->files.size(), 2u);
  EXPECT_TRUE(r->files[0].status.ok());
  EXPECT_EQ(r->files[1].status.code(), ErrorCode::kCorrupt);
  EXPECT_FALSE(r->tensors.empty());

  std::string text = RenderInspectText(*r);
  EXPECT_THAT(text, HasSubstr("models/llama/model-00002-of-00002.safetensors: tensor 'w': "
                              "data_offsets [0, 2048] end past the end of the file"));
  EXPECT_THAT(text, HasSubstr("model.embed_tokens.weight"));
  nlohmann::json doc = nlohmann::json::parse(RenderInspectJson(*r));
  EXPECT_FALSE(doc["ok"].get<bool>());
  EXPECT_EQ(doc["files"][1]["code"], "CORRUPT");
  EXPECT_THAT(doc["files"][1]["error"].get<std::string>(), HasSubstr("tensor 'w'"));
}

TEST_F(InspectTest, CrossFileProblemsAreListed) {
  store_.Remove("models/llama/model-00002-of-00002.safetensors");
  StatusOr<InspectReport> r = BuildInspectReport(store_, "models/llama/", BuiltIn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->AllFilesOk());
  ASSERT_EQ(r->problems.size(), 1u);
  EXPECT_THAT(r->problems[0], HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(RenderInspectText(*r), AllOf(HasSubstr("Problems:"), HasSubstr("no such file")));
}

TEST_F(InspectTest, DirectoryWithoutCheckpointIsNotFound) {
  StatusOr<InspectReport> r = BuildInspectReport(store_, "models/none/", BuiltIn());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
}

TEST_F(InspectTest, InvalidGroupingRegexIsRejected) {
  StatusOr<InspectReport> r = Inspect(store_, "models/llama/", "(");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(InspectTest, RegexGroupingIsUsedAndShown) {
  StatusOr<InspectReport> r = Inspect(store_, "models/llama/", R"(^(model\.layers\.\d+\.(mlp|self_attn)\.))");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(RenderInspectText(*r), AllOf(HasSubstr("regex '"), HasSubstr("model.layers.1.mlp.")));
}

TEST(FormatBytesTest, UsesBinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.00 GiB");
}

}  // namespace
}  // namespace tensorfs
