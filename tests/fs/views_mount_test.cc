// The views through a real mount, read by the kernel: every view of the
// grouping tests' checkpoints (and of checkpoints holding the edge values of
// quantization) checked against an independent numpy reference of the
// bitsandbytes algorithms and of numpy.stack (@stacked) with plain reads,
// random preads and numpy.memmap; AirLLM's "already split" check; a corrupt
// shard; and what one layer file fetches.
#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::GcsTestServer;
using testing::RunCommand;
using testing::TensorfsMount;

const std::string kPython = "/usr/bin/python3 ";
const std::string kSupport = TENSORFS_SOURCE_DIR "/tests/support/";

struct Model {
  std::string dir;
  testing::ModelSpec spec;
  int shards;
};

const std::vector<Model>& Models() {
  static const auto* models = new std::vector<Model>{
      {"llama-f32", {.arch = testing::Arch::kLlama, .hidden = 96, .intermediate = 200, .dtype = Dtype::F32}, 3},
      {"llama-f16", {.arch = testing::Arch::kLlama, .dtype = Dtype::F16}, 2},
      {"llama-bf16", {.arch = testing::Arch::kLlama, .dtype = Dtype::BF16}, 3},
      {"qwen2", {.arch = testing::Arch::kQwen2, .dtype = Dtype::BF16}, 2},
      {"mixtral", {.arch = testing::Arch::kMixtral, .dtype = Dtype::BF16}, 3},
      {"gpt2", {.arch = testing::Arch::kGpt2, .dtype = Dtype::F32}, 2},
      {"t5", {.arch = testing::Arch::kT5, .dtype = Dtype::F32}, 3},
      {"llama-tied", {.arch = testing::Arch::kLlamaTied, .dtype = Dtype::BF16}, 2},
      {"deepseek-moe", {.arch = testing::Arch::kDeepseekMoe, .layers = 4, .experts = 3, .dense_layers = 1,
                        .dtype = Dtype::BF16}, 3},
  };
  return *models;
}

class ViewsMountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = testing::SharedData("views_mount_test/models-edge-broken", [](const std::string& dir) {
      const std::string source = dir + "/bucket";
      for (const Model& m : Models()) {
        auto written = testing::WriteCheckpoint(m.spec, {.num_shards = m.shards, .dir = source + "/" + m.dir});
        ASSERT_TRUE(written.ok()) << written.status().ToString();
      }
      for (const std::string dtype : {"bf16", "f16", "f32"}) {
        auto made = RunCommand(kPython + kSupport + "make_edge_checkpoint.py " + source + "/edge-" + dtype +
                               " --dtype " + dtype + " --shards 2");
        ASSERT_EQ(made.exit_code, 0) << made.output;
      }
      // A checkpoint whose second shard has a broken header, with an index that
      // still says which tensors it held.
      auto written = testing::WriteCheckpoint({.dtype = Dtype::BF16}, {.num_shards = 3, .dir = source + "/broken"});
      ASSERT_TRUE(written.ok());
      const std::string broken = source + "/broken/" + written->plan.shards[1].file_name;
      std::fstream f(broken, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(8);
      f.write("[[", 2);
    });
    source_ = data_ + "/bucket";
    // The shard whose header is broken: the generator names it the same way every time.
    StatusOr<testing::CheckpointPlan> plan =
        testing::PlanCheckpoint(testing::ModelSpec{.dtype = Dtype::BF16}, {.num_shards = 3});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    broken_shard_ = plan->shards[1].file_name;
  }
  void SetUp() override {
    std::string error;
    mount_ = TensorfsMount::Start(source_, {}, &error);
    ASSERT_NE(mount_, nullptr) << error;
  }

  void CheckViews(const std::string& dir, const std::string& extra = "", TensorfsMount* mount = nullptr) {
    if (mount == nullptr) mount = mount_.get();
    auto result = RunCommand(kPython + kSupport + "check_views.py --mmap-loader --mount " + mount->path() + "/" + dir +
                             " --source " + source_ + "/" + dir + " " + extra + " 2>&1");
    EXPECT_EQ(result.exit_code, 0) << result.output << "\n" << mount->Log();
    EXPECT_THAT(result.output, HasSubstr(": OK"));
  }

  static nlohmann::json Stats(const std::string& mountpoint) { return testing::MountStats(mountpoint); }

  inline static std::string data_;    // shared, read-only: holds source_, served as a bucket by GcsViews
  inline static std::string source_;
  inline static std::string broken_shard_;
  std::unique_ptr<TensorfsMount> mount_;
};

TEST_F(ViewsMountTest, LlamaF32ViewsEqualTheReference) {
  CheckViews("llama-f32", "--expect-layers model.embed_tokens.,model.layers.0.,model.layers.1.,model.norm.,lm_head.");
}
TEST_F(ViewsMountTest, LlamaF16ViewsEqualTheReference) { CheckViews("llama-f16"); }
TEST_F(ViewsMountTest, LlamaBf16ViewsEqualTheReference) { CheckViews("llama-bf16"); }
TEST_F(ViewsMountTest, Qwen2ViewsEqualTheReference) { CheckViews("qwen2"); }

// config.json of @bnb-nf4 and @bnb-int8 holds every key of the checker's
// reference (the keys transformers' own serialization writes) and no other: a
// run of the demo prints no warning.
TEST_F(ViewsMountTest, BnbConfigsDrawNoWarningFromTheChecker) {
  auto result = RunCommand(kPython + kSupport + "check_views.py --mount " + mount_->path() +
                           "/llama-bf16 --source " + source_ + "/llama-bf16 --views @bnb-nf4,@bnb-int8 2>&1");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr(": OK"));
  EXPECT_THAT(result.output, Not(HasSubstr("warning"))) << result.output;
}
TEST_F(ViewsMountTest, MixtralViewsEqualTheReference) { CheckViews("mixtral"); }
TEST_F(ViewsMountTest, Gpt2ViewsEqualTheReference) {
  CheckViews("gpt2", "--expect-layers transformer.wte.,transformer.wpe.,transformer.h.0.,transformer.h.1.,transformer.ln_f.");
}
TEST_F(ViewsMountTest, T5ViewsEqualTheReference) { CheckViews("t5"); }
TEST_F(ViewsMountTest, TiedLlamaViewsEqualTheReference) {
  CheckViews("llama-tied", "--expect-layers model.embed_tokens.,model.layers.0.,model.layers.1.,model.norm.");
}
// Dense first layer, then MoE layers: @stacked holds runs (model.layers.0-0.mlp.*,
// model.layers.1-3.mlp.experts.*) next to the attention stacked over all four.
TEST_F(ViewsMountTest, DeepseekMoeStackedViewEqualsNumpyStack) { CheckViews("deepseek-moe", "--views @stacked"); }
TEST_F(ViewsMountTest, EdgeValuesBf16EqualTheReference) { CheckViews("edge-bf16"); }
TEST_F(ViewsMountTest, EdgeValuesF16EqualTheReference) { CheckViews("edge-f16"); }
TEST_F(ViewsMountTest, EdgeValuesF32EqualTheReference) { CheckViews("edge-f32"); }

TEST_F(ViewsMountTest, ViewsOverGcsEqualTheReference) {
  std::string error;
  auto server = GcsTestServer::Start({.data_dir = data_}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto mount = TensorfsMount::Start("gs://bucket", {"-o", "anonymous,endpoint=" + server->endpoint()}, &error);
  ASSERT_NE(mount, nullptr) << error;
  CheckViews("llama-bf16", "", mount.get());
  CheckViews("edge-f16", "", mount.get());
}

TEST_F(ViewsMountTest, LayerRegexNamesTheLayerFiles) {
  std::string error;
  auto mount = TensorfsMount::Start(source_, {"--layer-regex", "^(model\\.layers\\.\\d+\\.(self_attn|mlp)\\.)"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  CheckViews("llama-bf16",
             "--views splitted_model,@stacked --layer-regex '^(model\\.layers\\.\\d+\\.(self_attn|mlp)\\.)' "
             "--expect-layers model.embed_tokens.,model.layers.0.self_attn.,model.layers.0.mlp.,"
             "model.layers.0.,model.layers.1.self_attn.,model.layers.1.mlp.,model.layers.1.,model.norm.,lm_head.",
             mount.get());
}

TEST_F(ViewsMountTest, CorruptShardFailsOnlyTheViewFilesThatNeedIt) {
  const std::string dir = mount_->path() + "/broken/";
  // The mirror of the broken shard cannot be opened; the message is in the log.
  int fd = ::open((dir + "@bf16/" + broken_shard_).c_str(), O_RDONLY);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(errno, EIO);
  if (fd >= 0) ::close(fd);
  // The other shards' mirrors and the shard itself (as a plain file) read.
  EXPECT_EQ(testing::ReadWhole(dir + "@bf16/model-00001-of-00003.safetensors").size(),
            fsys::file_size(dir + "@bf16/model-00001-of-00003.safetensors"));
  EXPECT_EQ(testing::ReadWhole(dir + broken_shard_), testing::ReadWhole(source_ + "/broken/" + broken_shard_));
  int failed = 0;
  int read = 0;
  for (const auto& e : fsys::directory_iterator(dir + "splitted_model")) {
    if (e.path().extension() == ".done") continue;
    int layer = ::open(e.path().c_str(), O_RDONLY);
    if (layer < 0) {
      EXPECT_EQ(errno, EIO) << e.path();
      ++failed;
      continue;
    }
    ::close(layer);
    EXPECT_EQ(testing::ReadWhole(e.path()).size(), e.file_size()) << e.path();
    ++read;
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(read, 0);
  EXPECT_THAT(mount_->Log(), HasSubstr("needs a shard that cannot be read: broken/" + broken_shard_));
}

TEST_F(ViewsMountTest, ReadingOneLayerFileFetchesAtMostATenthMoreThanItsSource) {
  testing::TempDir source;
  testing::ModelSpec spec{.layers = 6, .hidden = 512, .intermediate = 1536, .vocab = 1024, .dtype = Dtype::BF16};
  auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = source.path() + "/m"});
  ASSERT_TRUE(written.ok());
  uint64_t layer = 0;
  for (const auto& t : testing::ModelTensors(spec)) {
    if (t.name.starts_with("model.layers.3.")) layer += t.size();
  }
  for (const std::string view : {"splitted_model", "splitted_model.4bit", "splitted_model.8bit"}) {
    std::string error;
    auto mount = TensorfsMount::Start(source.path(), {"-o", "chunk_size=256K,max_fetches=8,cache_size=64M,prefetch_window=16M"}, &error);
    ASSERT_NE(mount, nullptr) << error;
    const std::string file = mount->path() + "/m/" + view + "/model.layers.3.safetensors";
    ASSERT_TRUE(fsys::exists(file));
    auto idle = [&] {
      return testing::WaitUntil([&] { return Stats(mount->path())["fetches_in_flight"] == 0; },
                                "the fetches in flight to end");
    };
    ASSERT_TRUE(idle());
    const uint64_t before = Stats(mount->path())["bytes_fetched"];
    EXPECT_EQ(testing::ReadWhole(file).size(), fsys::file_size(file));
    ASSERT_TRUE(idle());
    const uint64_t fetched = Stats(mount->path())["bytes_fetched"].get<uint64_t>() - before;
    std::printf("%s/model.layers.3.safetensors: fetched %llu bytes for a layer of %llu (%.3fx)\n", view.c_str(),
                static_cast<unsigned long long>(fetched), static_cast<unsigned long long>(layer),
                static_cast<double>(fetched) / static_cast<double>(layer));
    EXPECT_GE(fetched, layer) << view;
    EXPECT_LE(fetched, layer * 11 / 10) << view << ": fetched " << fetched << " bytes for a layer of " << layer;
  }
}

}  // namespace
}  // namespace tensorfs
