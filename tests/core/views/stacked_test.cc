// @stacked through the Namespace over an in-memory store: every layer family
// stacked as numpy.stack of its layers would stack it (layer 0's bytes first,
// experts within a layer), runs where layers differ, passthrough of the other
// tensors, files cut near the source shard size, and what one layer's slice
// fetches.
#include "core/views/stacked.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <future>
#include <map>
#include <thread>

#include "core/safetensors/header.h"
#include "core/vfs/namespace.h"
#include "tests/support/test_util.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/memory_store.h"

namespace tensorfs {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

struct Tensor {
  TensorInfo info;
  std::string bytes;
  std::string file;
  uint64_t offset = 0;  // of its data in `file`
};

class StackedTest : public ::testing::Test {
 protected:
  // Waits until no fetch is in flight; fails after 60 s (a fetch that never ends).
  void WaitNoFetchInFlight() {
    ASSERT_TRUE(testing::WaitUntil([&] { return engine_->Idle(); }, "the engine's fetches to stop"));
  }
  void Mount(uint64_t prefetch_window = 1 << 20) {
    engine_ = std::make_unique<ReadEngine>(store_,
                                           EngineOptions{.chunk_size = 64 << 10, .cache_size = 64 << 20,
                                                         .max_fetches = 4, .prefetch_window = prefetch_window,
                                                         .head_size = 128 << 10},
                                           metrics_);
    ns_ = std::make_unique<Namespace>(
        store_, *engine_,
        ViewOptions{.kinds = {ViewKind::kStacked},
                    .grouper = std::make_shared<const LayerGrouper>(*LayerGrouper::Create("")),
                    .prefetch_window = prefetch_window});
  }

  void Put(const testing::ModelSpec& spec, int shards) {
    ASSERT_TRUE(testing::PutCheckpoint(store_, "m/", spec, testing::WriteOptions{.num_shards = shards}).ok());
  }

  NodeId Path(std::string_view path) {
    NodeId node = kRootNode;
    while (!path.empty()) {
      size_t slash = path.find('/');
      auto attr = ns_->Lookup(node, path.substr(0, slash));
      EXPECT_TRUE(attr.ok()) << path << ": " << attr.status().message();
      if (!attr.ok()) return NodeId{0};
      node = attr->id;
      path = slash == std::string_view::npos ? "" : path.substr(slash + 1);
    }
    return node;
  }

  StatusOr<std::string> Read(NodeId id, uint64_t offset, uint64_t size) {
    std::string out;
    for (uint64_t off = offset; off < offset + size; off += 128 << 10) {
      std::promise<StatusOr<ReadResult>> result;
      ns_->Read(id, off, std::min<uint64_t>(128 << 10, offset + size - off),
                [&](StatusOr<ReadResult> r) { result.set_value(std::move(r)); });
      ASSIGN_OR_RETURN(ReadResult r, result.get_future().get());
      if (r.size() == 0) break;
      for (auto p : r.pieces) out.append(reinterpret_cast<const char*>(p.data()), p.size());
    }
    return out;
  }

  StatusOr<std::string> ReadAll(NodeId id) {
    ASSIGN_OR_RETURN(NodeAttr attr, ns_->GetAttr(id));
    ASSIGN_OR_RETURN(std::string out, Read(id, 0, attr.size));
    if (out.size() != attr.size) return InternalError("read " + std::to_string(out.size()) + " bytes");
    return out;
  }

  // Every tensor of every @stacked safetensors file.
  std::map<std::string, Tensor> Stacked() {
    std::map<std::string, Tensor> out;
    auto entries = ns_->ReadDir(Path("m/@stacked"));
    EXPECT_TRUE(entries.ok());
    if (!entries.ok()) return out;
    for (const DirEntry& e : entries->entries) {
      if (!e.name.ends_with(".safetensors")) continue;
      StatusOr<std::string> bytes = ReadAll(e.attr.id);
      EXPECT_TRUE(bytes.ok()) << e.name << ": " << bytes.status().message();
      if (!bytes.ok()) continue;
      StatusOr<SafetensorsHeader> header = ParseSafetensorsFile(e.name, std::as_bytes(std::span(*bytes)));
      EXPECT_TRUE(header.ok()) << header.status().message();
      if (!header.ok()) continue;
      EXPECT_EQ(header->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
      for (const TensorInfo& t : header->tensors) {
        EXPECT_FALSE(out.contains(t.name)) << t.name << " is in two files";
        out[t.name] = {t, bytes->substr(header->data_start() + t.begin, t.size()), e.name,
                       header->data_start() + t.begin};
      }
    }
    return out;
  }

  // What numpy.stack of the source tensors `names` (C order, axis 0) holds:
  // their bytes one after the other.
  static std::string StackOf(const std::vector<std::string>& names, const testing::ModelSpec& spec) {
    std::map<std::string, testing::TensorSpec> by_name;
    for (const testing::TensorSpec& t : testing::ModelTensors(spec)) by_name.emplace(t.name, t);
    std::string out;
    for (const std::string& n : names) out += testing::ExpectedTensorBytes(by_name.at(n));
    return out;
  }

  static std::vector<uint64_t> Shape(std::vector<uint64_t> lead, const std::vector<uint64_t>& rest) {
    lead.insert(lead.end(), rest.begin(), rest.end());
    return lead;
  }

  testing::MemoryStore store_;
  Metrics metrics_;
  std::unique_ptr<ReadEngine> engine_;
  std::unique_ptr<Namespace> ns_;
};

std::string Layer(uint64_t i, std::string_view rest) {
  return "model.layers." + std::to_string(i) + "." + std::string(rest);
}

TEST_F(StackedTest, LlamaLayersStackIntoOneTensorPerFamily) {
  const testing::ModelSpec spec{.layers = 3, .dtype = Dtype::BF16};
  Put(spec, 2);
  Mount();
  std::map<std::string, Tensor> got = Stacked();
  size_t expected = 0;
  for (const testing::TensorSpec& t : testing::ModelTensors(spec)) {
    if (!t.name.starts_with("model.layers.")) {
      ++expected;
      ASSERT_TRUE(got.contains(t.name)) << t.name;
      EXPECT_EQ(got[t.name].info.shape, t.shape);
      EXPECT_EQ(got[t.name].bytes, testing::ExpectedTensorBytes(t)) << t.name;
      continue;
    }
    if (!t.name.starts_with("model.layers.0.")) continue;
    ++expected;
    const std::string rest = t.name.substr(std::string_view("model.layers.0.").size());
    const std::string name = "model.layers." + rest;
    ASSERT_TRUE(got.contains(name)) << name;
    EXPECT_EQ(got[name].info.dtype, Dtype::BF16);
    EXPECT_EQ(got[name].info.shape, Shape({3}, t.shape)) << name;
    EXPECT_EQ(got[name].bytes, StackOf({Layer(0, rest), Layer(1, rest), Layer(2, rest)}, spec)) << name;
  }
  EXPECT_EQ(got.size(), expected);
}

TEST_F(StackedTest, MixtralExpertsStackWithinEachLayerThenOverLayers) {
  const testing::ModelSpec spec{.arch = testing::Arch::kMixtral, .layers = 2, .experts = 3, .dtype = Dtype::F16};
  Put(spec, 3);
  Mount();
  std::map<std::string, Tensor> got = Stacked();
  const std::string name = "model.layers.block_sparse_moe.experts.w2.weight";
  ASSERT_TRUE(got.contains(name));
  EXPECT_EQ(got[name].info.shape, (std::vector<uint64_t>{2, 3, spec.hidden, spec.intermediate}));
  std::vector<std::string> order;  // layer-major, expert-minor, as numpy.stack over experts then layers
  for (uint64_t l = 0; l < 2; ++l) {
    for (uint64_t e = 0; e < 3; ++e) {
      order.push_back(Layer(l, "block_sparse_moe.experts." + std::to_string(e) + ".w2.weight"));
    }
  }
  EXPECT_EQ(got[name].bytes, StackOf(order, spec));
  EXPECT_EQ(got["model.layers.block_sparse_moe.gate.weight"].info.shape,
            (std::vector<uint64_t>{2, spec.experts, spec.hidden}));
  for (const auto& [n, t] : got) EXPECT_THAT(n, Not(HasSubstr("experts.0"))) << "an expert left unstacked";
}

TEST_F(StackedTest, DenseFirstLayersAndMoeLayersStackAsNamedRuns) {
  const testing::ModelSpec spec{.arch = testing::Arch::kDeepseekMoe, .layers = 4, .experts = 2,
                                .dense_layers = 1, .dtype = Dtype::BF16};
  Put(spec, 2);
  Mount();
  std::map<std::string, Tensor> got = Stacked();
  const uint64_t mi = spec.intermediate / 2;
  // Attention agrees over all layers: one plain name.
  EXPECT_EQ(got["model.layers.self_attn.q_proj.weight"].info.shape,
            (std::vector<uint64_t>{4, spec.hidden, spec.hidden}));
  // The dense MLP exists in layer 0 only: a run of one layer keeps the layer axis.
  ASSERT_TRUE(got.contains("model.layers.0-0.mlp.gate_proj.weight"));
  EXPECT_EQ(got["model.layers.0-0.mlp.gate_proj.weight"].info.shape,
            (std::vector<uint64_t>{1, spec.intermediate, spec.hidden}));
  EXPECT_EQ(got["model.layers.0-0.mlp.gate_proj.weight"].bytes, StackOf({Layer(0, "mlp.gate_proj.weight")}, spec));
  // The MoE layers 1..3.
  const std::string experts = "model.layers.1-3.mlp.experts.down_proj.weight";
  ASSERT_TRUE(got.contains(experts));
  EXPECT_EQ(got[experts].info.shape, (std::vector<uint64_t>{3, 2, spec.hidden, mi}));
  std::vector<std::string> order;
  for (uint64_t l = 1; l < 4; ++l) {
    for (uint64_t e = 0; e < 2; ++e) {
      order.push_back(Layer(l, "mlp.experts." + std::to_string(e) + ".down_proj.weight"));
    }
  }
  EXPECT_EQ(got[experts].bytes, StackOf(order, spec));
  EXPECT_EQ(got["model.layers.1-3.mlp.shared_experts.up_proj.weight"].bytes,
            StackOf({Layer(1, "mlp.shared_experts.up_proj.weight"), Layer(2, "mlp.shared_experts.up_proj.weight"),
                     Layer(3, "mlp.shared_experts.up_proj.weight")},
                    spec));
  EXPECT_THAT(got, Not(Contains(::testing::Key("model.layers.mlp.gate_proj.weight"))));
}

TEST_F(StackedTest, TiedEmbeddingIsNeitherAddedNorDuplicated) {
  const testing::ModelSpec spec{.arch = testing::Arch::kLlamaTied, .dtype = Dtype::BF16};
  Put(spec, 2);
  Mount();
  std::map<std::string, Tensor> got = Stacked();
  EXPECT_FALSE(got.contains("lm_head.weight"));
  ASSERT_TRUE(got.contains("model.embed_tokens.weight"));
  EXPECT_EQ(got["model.embed_tokens.weight"].bytes,
            testing::ExpectedTensorBytes("model.embed_tokens.weight", Dtype::BF16, spec.vocab * spec.hidden * 2));
  auto config = ReadAll(Path("m/@stacked/config.json"));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(*config, testing::ConfigJson(spec));
}

TEST_F(StackedTest, LayersThatDifferStackAsSeparateRuns) {
  // Layers 0-1 and 3 agree, layer 2 is wider: runs 0-1, 2-2 and 3-3.
  std::vector<testing::RawTensor> tensors;
  for (int l = 0; l < 4; ++l) {
    tensors.push_back({.name = Layer(l, "mlp.w.weight"), .dtype = Dtype::F32,
                       .shape = {4, l == 2 ? uint64_t{8} : uint64_t{4}}});
    tensors.push_back({.name = Layer(l, "norm.weight"), .dtype = Dtype::F32, .shape = {4}});
  }
  store_.Put("m/model.safetensors", testing::BuildSafetensorsFile(tensors, {{"format", "pt"}}));
  Mount();
  std::map<std::string, Tensor> got = Stacked();
  std::vector<std::string> names;
  for (const auto& [n, t] : got) names.push_back(n);
  EXPECT_THAT(names, ElementsAre("model.layers.0-1.mlp.w.weight", "model.layers.2-2.mlp.w.weight",
                                 "model.layers.3-3.mlp.w.weight", "model.layers.norm.weight"));
  EXPECT_EQ(got["model.layers.0-1.mlp.w.weight"].info.shape, (std::vector<uint64_t>{2, 4, 4}));
  EXPECT_EQ(got["model.layers.2-2.mlp.w.weight"].info.shape, (std::vector<uint64_t>{1, 4, 8}));
  EXPECT_EQ(got["model.layers.0-1.mlp.w.weight"].bytes,
            testing::ExpectedTensorBytes(Layer(0, "mlp.w.weight"), Dtype::F32, 64) +
                testing::ExpectedTensorBytes(Layer(1, "mlp.w.weight"), Dtype::F32, 64));
}

TEST_F(StackedTest, StackedNameTakenByAnotherTensorLeavesTheFamilyUnstacked) {
  std::vector<testing::RawTensor> tensors = {
      {.name = Layer(0, "w.weight"), .dtype = Dtype::F32, .shape = {4}},
      {.name = Layer(1, "w.weight"), .dtype = Dtype::F32, .shape = {4}},
      {.name = "model.layers.w.weight", .dtype = Dtype::F32, .shape = {2}},
  };
  store_.Put("m/model.safetensors", testing::BuildSafetensorsFile(tensors, {{"format", "pt"}}));
  Mount();
  std::map<std::string, Tensor> got = Stacked();
  std::vector<std::string> names;
  for (const auto& [n, t] : got) names.push_back(n);
  EXPECT_THAT(names, ElementsAre(Layer(0, "w.weight"), Layer(1, "w.weight"), "model.layers.w.weight"));
  EXPECT_EQ(got["model.layers.w.weight"].info.shape, (std::vector<uint64_t>{2}));
}

TEST_F(StackedTest, FilesAreAsManyAsTheSourceShardsOfAboutTheirSizeAndIndexed) {
  const testing::ModelSpec spec{.layers = 6, .hidden = 128, .intermediate = 256, .dtype = Dtype::BF16};
  Put(spec, 4);
  Mount();
  StatusOr<Checkpoint> source = Checkpoint::Load(store_, "m/");
  ASSERT_TRUE(source.ok());
  auto entries = ns_->ReadDir(Path("m/@stacked"));
  ASSERT_TRUE(entries.ok());
  std::vector<std::string> files;
  for (const DirEntry& e : entries->entries) {
    if (e.name.ends_with(".safetensors")) files.push_back(e.name);
  }
  EXPECT_THAT(files, ElementsAre("model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                 "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"));
  std::map<std::string, Tensor> got = Stacked();
  std::map<std::string, uint64_t> per_file;
  uint64_t total = 0;
  uint64_t largest = 0;  // tensor
  for (const auto& [n, t] : got) {
    per_file[t.file] += t.info.size();
    total += t.info.size();
    largest = std::max(largest, t.info.size());
  }
  EXPECT_EQ(total, source->total_tensor_bytes());
  // A quarter of the total each, give or take the tensor that spans a cut.
  for (const auto& [f, bytes] : per_file) {
    EXPECT_LE(bytes, total / 4 + largest) << f;
    EXPECT_GE(bytes + largest, total / 4) << f;
  }
  auto index_text = ReadAll(Path("m/@stacked/model.safetensors.index.json"));
  ASSERT_TRUE(index_text.ok());
  auto index = nlohmann::json::parse(*index_text);
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_EQ(index["weight_map"].size(), got.size());
  for (const auto& [n, t] : got) EXPECT_EQ(index["weight_map"][n], t.file) << n;
}

TEST_F(StackedTest, ReadingOneLayersSliceFetchesExactlyThatLayersSourceTensor) {
  const testing::ModelSpec spec{.layers = 4, .hidden = 256, .intermediate = 512, .dtype = Dtype::BF16};
  Put(spec, 2);
  Mount(/*prefetch_window=*/0);  // the demand read alone, without read-ahead
  std::map<std::string, Tensor> got = Stacked();
  ns_.reset();
  engine_.reset();
  Mount(0);
  const Tensor& t = got.at("model.layers.mlp.down_proj.weight");
  const uint64_t slice = t.info.size() / 4;
  NodeId file = Path("m/@stacked/" + t.file);
  ASSERT_TRUE(Read(file, 0, 8).ok());  // the header length: the catalog is in by now
  WaitNoFetchInFlight();
  const uint64_t before = metrics_.bytes_fetched.load();
  auto bytes = Read(file, t.offset + 2 * slice, slice);
  ASSERT_TRUE(bytes.ok());
  WaitNoFetchInFlight();
  EXPECT_EQ(*bytes, testing::ExpectedTensorBytes(Layer(2, "mlp.down_proj.weight"), Dtype::BF16, slice));
  EXPECT_EQ(metrics_.bytes_fetched.load() - before, slice);
}

TEST_F(StackedTest, BrokenShardMakesEveryStackedFileUnreadable) {
  auto files = testing::BuildCheckpointFiles({}, testing::WriteOptions{.num_shards = 3});
  ASSERT_TRUE(files.ok());
  for (auto& [name, bytes] : *files) {
    if (name == "model-00002-of-00003.safetensors") bytes.replace(8, 2, "[[");
    store_.Put("m/" + name, bytes);
  }
  Mount();
  auto entries = ns_->ReadDir(Path("m/@stacked"));
  ASSERT_TRUE(entries.ok());
  int unreadable = 0;
  for (const DirEntry& e : entries->entries) {
    Status open = ns_->Open(e.attr.id);
    if (e.name.ends_with(".safetensors")) {
      EXPECT_EQ(open.code(), ErrorCode::kCorrupt) << e.name;
      EXPECT_THAT(open.message(), HasSubstr("model-00002-of-00003.safetensors"));
      ++unreadable;
    } else {
      EXPECT_TRUE(open.ok()) << e.name;
    }
  }
  EXPECT_GT(unreadable, 0);
  EXPECT_TRUE(ReadAll(Path("m/@stacked/config.json")).ok());
}

TEST(StackedViewListTest, ViewsOptionNamesStacked) {
  EXPECT_THAT(*ParseViewList("stacked"), ElementsAre(ViewKind::kStacked));
  EXPECT_EQ(ViewDirName(ViewKind::kStacked), "@stacked");
}

}  // namespace
}  // namespace tensorfs
