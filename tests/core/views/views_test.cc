// The views through the Namespace over an in-memory store: what appears,
// exact sizes before data, bytes equal to their sources, what a read fetches,
// and what a corrupt shard breaks.
#include "core/views/views.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <map>

#include "core/safetensors/header.h"
#include "core/views/quantize.h"
#include "core/vfs/namespace.h"
#include "tests/core/views/views_reference_data.h"
#include "tests/support/test_util.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/controlled_store.h"
#include "tests/support/memory_store.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Names(const std::vector<DirEntry>& entries) {
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  return names;
}

class ViewsTest : public ::testing::Test {
 protected:
  // The safetensors views by default (@gguf, whose listing reads the
  // tokenizer too, has gguf_view_test). consumed_keep: bytes of chunks the
  // reads consumed that stay cached (a mount over a local directory keeps one
  // chunk's).
  void Mount(std::vector<ViewKind> kinds = {kEveryCheckpointViews.begin(), kEveryCheckpointViews.end()},
             uint64_t segment_bytes = 4 << 20,
             uint64_t consumed_keep = 64 << 20) {
    engine_ = std::make_unique<ReadEngine>(recorded_,
                                           EngineOptions{.chunk_size = 64 << 10, .cache_size = 64 << 20,
                                                         .max_fetches = 4, .prefetch_window = 1 << 20,
                                                         .head_size = 128 << 10, .consumed_keep = consumed_keep},
                                           metrics_);
    ns_ = std::make_unique<Namespace>(
        recorded_, *engine_,
        ViewOptions{.kinds = std::move(kinds),
                    .grouper = std::make_shared<const LayerGrouper>(*LayerGrouper::Create("")),
                    .prefetch_window = 1 << 20,
                    .segment_bytes = segment_bytes});
  }

  testing::CheckpointPlan Put(const testing::ModelSpec& spec, int shards, std::string_view prefix = "m/") {
    auto plan = testing::PutCheckpoint(store_, prefix, spec, testing::WriteOptions{.num_shards = shards});
    TENSORFS_CHECK(plan.ok());
    return *plan;
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

  StatusOr<std::string> ReadAll(NodeId id) {
    ASSIGN_OR_RETURN(NodeAttr attr, ns_->GetAttr(id));
    ASSIGN_OR_RETURN(std::string out, ReadRange(id, 0, attr.size));
    if (out.size() != attr.size) return InternalError("read " + std::to_string(out.size()) + " bytes");
    return out;
  }

  // Bytes [begin, end) of `id`, read 128 KiB at a time as the kernel does.
  StatusOr<std::string> ReadRange(NodeId id, uint64_t begin, uint64_t end) {
    std::string out;
    for (uint64_t off = begin; off < end; off += 128 << 10) {
      std::promise<StatusOr<ReadResult>> result;
      ns_->Read(id, off, std::min<uint64_t>(128 << 10, end - off),
                [&](StatusOr<ReadResult> r) { result.set_value(std::move(r)); });
      ASSIGN_OR_RETURN(ReadResult r, result.get_future().get());
      for (auto p : r.pieces) out.append(reinterpret_cast<const char*>(p.data()), p.size());
    }
    return out;
  }

  // Waits until the engine has no fetch queued or running; fails after kHang,
  // which only a runaway prefetch takes.
  void WaitIdle() {
    ASSERT_TRUE(testing::WaitUntil([&] { return engine_->Idle(); }, "the engine's fetches to stop"));
  }

  // The bytes of the only shard of `plan` that hold the tensors named
  // `prefix`*: one run in storage order.
  // A file of m/splitted_model/, listed first as a loader does, and its size.
  std::pair<NodeId, uint64_t> SplitFile(const std::string& name) {
    EXPECT_TRUE(ns_->ReadDir(Path("m/splitted_model")).ok());
    const NodeId node = Path("m/splitted_model/" + name);
    auto attr = ns_->GetAttr(node);
    EXPECT_TRUE(attr.ok()) << name;
    return {node, attr.ok() ? attr->size : 0};
  }
  static ByteRange SourceOf(const testing::CheckpointPlan& plan, std::string_view prefix) {
    const testing::ShardPlan& shard = plan.shards.at(0);
    uint64_t begin = ~uint64_t{0};
    uint64_t end = 0;
    for (const TensorInfo& t : shard.tensors) {
      if (!t.name.starts_with(prefix)) continue;
      begin = std::min<uint64_t>(begin, shard.header.size() + t.begin);
      end = std::max<uint64_t>(end, shard.header.size() + t.end);
    }
    return ByteRange{begin, end - begin};
  }

  // The largest end of the shard's bytes fetched so far within `range`.
  uint64_t FetchedEndWithin(ByteRange range) const {
    uint64_t end = range.offset;
    for (const testing::RecordedRead& r : recorded_.reads()) {
      if (r.offset < range.end() && r.offset + r.length > range.offset) {
        end = std::max(end, std::min(r.offset + r.length, range.end()));
      }
    }
    return end;
  }

  // Tensor name -> bytes of a view file, after checking it is valid.
  std::map<std::string, std::pair<TensorInfo, std::string>> Tensors(std::string_view path) {
    StatusOr<std::string> bytes = ReadAll(Path(path));
    EXPECT_TRUE(bytes.ok()) << path << ": " << bytes.status().message();
    if (!bytes.ok()) return {};
    StatusOr<SafetensorsHeader> header = ParseSafetensorsFile(path, std::as_bytes(std::span(*bytes)));
    EXPECT_TRUE(header.ok()) << header.status().message();
    if (!header.ok()) return {};
    EXPECT_EQ(header->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
    std::map<std::string, std::pair<TensorInfo, std::string>> out;
    for (const TensorInfo& t : header->tensors) {
      out[t.name] = {t, bytes->substr(header->data_start() + t.begin, t.size())};
    }
    return out;
  }

  testing::MemoryStore store_;
  testing::ControlledStore recorded_{store_, /*hold=*/false};  // records what is fetched
  Metrics metrics_;
  std::unique_ptr<ReadEngine> engine_;
  std::unique_ptr<Namespace> ns_;
};

TEST_F(ViewsTest, CheckpointDirectoryShowsEveryView) {
  Put({}, 2);
  store_.Put("notes/readme.txt", "no checkpoint here");
  Mount();
  auto entries = ns_->ReadDir(Path("m"));
  ASSERT_TRUE(entries.ok());
  for (ViewKind kind : kEveryCheckpointViews) {
    EXPECT_THAT(Names(entries->entries), Contains(std::string(ViewDirName(kind))));
  }
  auto plain = ns_->ReadDir(Path("notes"));
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(Names(plain->entries), ElementsAre("readme.txt"));
}

TEST_F(ViewsTest, ViewsOptionSelectsTheDirectories) {
  Put({}, 1);
  Mount({ViewKind::kSplit4bit});
  auto entries = ns_->ReadDir(Path("m"));
  ASSERT_TRUE(entries.ok());
  EXPECT_THAT(Names(entries->entries), Contains("splitted_model.4bit"));
  EXPECT_THAT(Names(entries->entries), Not(Contains("splitted_model")));
  EXPECT_THAT(Names(entries->entries), Not(Contains("@tensors")));
}

TEST_F(ViewsTest, RealObjectWinsOverAView) {
  Put({}, 1);
  store_.Put("m/splitted_model/mine.safetensors.txt", "user data");
  Mount();
  auto entries = ns_->ReadDir(Path("m/splitted_model"));
  ASSERT_TRUE(entries.ok());
  EXPECT_THAT(Names(entries->entries), ElementsAre("mine.safetensors.txt"));
}

TEST_F(ViewsTest, SizesAreKnownBeforeAnyTensorDataIsFetched) {
  testing::CheckpointPlan plan = Put({.hidden = 256, .intermediate = 1024}, 3);
  Mount();
  uint64_t files = 0;
  for (ViewKind kind : kEveryCheckpointViews) {
    std::string dir = "m/" + std::string(ViewDirName(kind));
    auto entries = ns_->ReadDir(Path(dir));
    ASSERT_TRUE(entries.ok());
    for (const DirEntry& e : entries->entries) files += e.attr.size > 0;
  }
  EXPECT_GT(files, 50u);
  // Only the shards' heads have been fetched.
  EXPECT_LE(metrics_.bytes_fetched.load(), 3u * (128u << 10) + 4096);  // + config.json
  EXPECT_LT(metrics_.bytes_fetched.load(), plan.total_size / 4);
  for (ViewKind kind : kEveryCheckpointViews) {
    std::string dir = "m/" + std::string(ViewDirName(kind));
    auto entries = ns_->ReadDir(Path(dir));
    ASSERT_TRUE(entries.ok());
    for (const DirEntry& e : entries->entries) {
      auto bytes = ReadAll(e.attr.id);
      ASSERT_TRUE(bytes.ok()) << dir << "/" << e.name << ": " << bytes.status().message();
      EXPECT_EQ(bytes->size(), e.attr.size) << dir << "/" << e.name;
    }
  }
}

TEST_F(ViewsTest, LayerFilesHoldTheirTensorsUnchangedInStorageOrder) {
  testing::ModelSpec spec{.dtype = Dtype::BF16};
  Put(spec, 3);
  Mount();
  auto entries = ns_->ReadDir(Path("m/splitted_model"));
  ASSERT_TRUE(entries.ok());
  EXPECT_THAT(Names(entries->entries),
              ElementsAre("lm_head.safetensors", "lm_head.safetensors.done", "model.embed_tokens.safetensors",
                          "model.embed_tokens.safetensors.done", "model.layers.0.safetensors",
                          "model.layers.0.safetensors.done", "model.layers.1.safetensors",
                          "model.layers.1.safetensors.done", "model.norm.safetensors",
                          "model.norm.safetensors.done"));
  size_t seen = 0;
  for (const std::string layer : {"model.embed_tokens.", "model.layers.0.", "model.layers.1.", "model.norm.", "lm_head."}) {
    for (const auto& [name, t] : Tensors("m/splitted_model/" + layer + "safetensors")) {
      EXPECT_TRUE(name.starts_with(layer)) << name;
      EXPECT_EQ(t.second, testing::ExpectedTensorBytes(name, t.first.dtype, t.first.size())) << name;
      ++seen;
    }
  }
  EXPECT_EQ(seen, testing::ModelTensors(spec).size());
}

TEST_F(ViewsTest, TiedHeadHasNoLayerFile) {
  Put({.arch = testing::Arch::kLlamaTied}, 2);
  Mount();
  auto entries = ns_->ReadDir(Path("m/splitted_model"));
  ASSERT_TRUE(entries.ok());
  EXPECT_THAT(Names(entries->entries), Not(Contains("lm_head.safetensors")));
  EXPECT_THAT(Names(entries->entries), Contains("model.norm.safetensors.done"));
}

TEST_F(ViewsTest, PerTensorFilesAreSingleTensorCheckpoints) {
  testing::ModelSpec spec{.dtype = Dtype::F16};
  Put(spec, 2);
  Mount();
  for (const testing::TensorSpec& t : testing::ModelTensors(spec)) {
    auto tensors = Tensors("m/@tensors/" + t.name + ".safetensors");
    ASSERT_EQ(tensors.size(), 1u) << t.name;
    EXPECT_EQ(tensors.begin()->second.first.shape, t.shape);
    EXPECT_EQ(tensors.begin()->second.second, testing::ExpectedTensorBytes(t));
  }
}

// Every tensor of the quantized views of two small single-file checkpoints
// equals what the numpy reference computed (tests/support/views_reference.py,
// exported by export_views_reference.py into views_reference_data.h), whether
// a tensor's computation is one segment or split into many.
TEST_F(ViewsTest, QuantizedViewsEqualTheNumpyReferenceWhateverTheSegments) {
  for (const reference::ReferenceFile& f : reference::kLlamaFiles) store_.Put("m/" + std::string(f.name), std::string(f.bytes));
  for (const uint64_t segment_bytes : {uint64_t{4} << 20, uint64_t{1000}}) {
    SCOPED_TRACE("segment_bytes " + std::to_string(segment_bytes));
    Mount({kEveryCheckpointViews.begin(), kEveryCheckpointViews.end()}, segment_bytes);
    std::map<std::string, std::map<std::string, std::pair<TensorInfo, std::string>>> files;
    size_t checked = 0;
    for (const reference::ReferenceTensor& t : reference::kLlamaViewTensors) {
      const std::string file(t.file);
      if (!files.contains(file)) files[file] = Tensors("m/" + file);
      auto it = files[file].find(std::string(t.tensor));
      ASSERT_NE(it, files[file].end()) << file << " lacks " << t.tensor;
      EXPECT_TRUE(testing::SameBytes(it->second.second, std::string(t.bytes))) << file << ": " << t.tensor;
      ++checked;
    }
    EXPECT_GE(checked, 25u);
    // Nothing beyond what the reference lists, either.
    for (const auto& [file, tensors] : files) {
      size_t listed = 0;
      for (const reference::ReferenceTensor& t : reference::kLlamaViewTensors) listed += t.file == file;
      EXPECT_EQ(tensors.size(), listed) << file;
    }
    ns_.reset();
    engine_.reset();
  }
}

TEST_F(ViewsTest, BnbViewsQuantizeOnlyBlockWeights) {
  Put({.dtype = Dtype::BF16}, 1);
  Mount();
  auto nf4 = Tensors("m/@bnb-nf4/model.safetensors");
  EXPECT_EQ(nf4["model.layers.0.self_attn.q_proj.weight"].first.dtype, Dtype::U8);
  EXPECT_TRUE(nf4.contains("model.layers.0.self_attn.q_proj.weight.absmax"));
  EXPECT_TRUE(nf4.contains("model.layers.0.self_attn.q_proj.weight.quant_map"));
  EXPECT_EQ(nf4["model.layers.0.input_layernorm.weight"].first.dtype, Dtype::BF16);
  EXPECT_EQ(nf4["model.embed_tokens.weight"].first.dtype, Dtype::BF16);
  EXPECT_EQ(nf4["lm_head.weight"].first.dtype, Dtype::BF16);
  auto config = ReadAll(Path("m/@bnb-nf4/config.json"));
  ASSERT_TRUE(config.ok());
  EXPECT_THAT(*config, HasSubstr("\"quant_method\": \"bitsandbytes\""));
  EXPECT_THAT(*config, HasSubstr("\"bnb_4bit_compute_dtype\": \"bfloat16\""));
  auto tokenizer = ReadAll(Path("m/@bnb-nf4/tokenizer.json"));
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ(*tokenizer, testing::TokenizerJson({.dtype = Dtype::BF16}));
}

TEST_F(ViewsTest, ReadingOneLayerFileFetchesAtMostATenthMoreThanItsSource) {
  testing::ModelSpec spec{.layers = 4, .hidden = 256, .intermediate = 1024, .vocab = 512};
  Put(spec, 2);
  for (const std::string view : {"splitted_model", "splitted_model.4bit"}) {
    Mount();
    ASSERT_TRUE(ns_->ReadDir(Path("m/" + view)).ok());
    uint64_t layer_bytes = 0;
    for (const auto& t : testing::ModelTensors(spec)) {
      if (t.name.starts_with("model.layers.2.")) layer_bytes += t.size();
    }
    const uint64_t before = metrics_.bytes_fetched.load();
    ASSERT_TRUE(ReadAll(Path("m/" + view + "/model.layers.2.safetensors")).ok());
    // Let prefetches already issued land before counting.
    WaitIdle();
    const uint64_t fetched = metrics_.bytes_fetched.load() - before;
    EXPECT_GE(fetched, layer_bytes) << view;
    EXPECT_LE(fetched, layer_bytes * 11 / 10) << view << ": fetched " << fetched << " for a layer of " << layer_bytes;
    ns_.reset();
    engine_.reset();
  }
}

// A quantized tensor's segment is computed from its source bytes, which are
// then consumed and dropped. A reader still inside that segment tops up its
// window from where it reads: the segment's source bytes are not fetched
// again (they were, when the segment was larger than the window or its
// compute had finished before the top-up).
TEST_F(ViewsTest, QuantizedLayerFileReadInOrderFetchesEachSourceByteOnce) {
  testing::ModelSpec spec{.layers = 2, .hidden = 512, .intermediate = 2048, .vocab = 512, .dtype = Dtype::BF16};
  Put(spec, 1);
  uint64_t layer_bytes = 0;
  for (const auto& t : testing::ModelTensors(spec)) {
    if (t.name.starts_with("model.layers.1.")) layer_bytes += t.size();
  }
  for (const std::string view : {"splitted_model.4bit", "splitted_model.8bit"}) {
    Mount({ViewKind::kSplit4bit, ViewKind::kSplit8bit}, /*segment_bytes=*/2 << 20, /*consumed_keep=*/64 << 10);
    ASSERT_TRUE(ns_->ReadDir(Path("m/" + view)).ok());
    WaitIdle();
    const uint64_t before = metrics_.bytes_fetched.load();
    ASSERT_TRUE(ReadAll(Path("m/" + view + "/model.layers.1.safetensors")).ok());
    WaitIdle();
    EXPECT_EQ(metrics_.bytes_fetched.load() - before, layer_bytes) << view;
    ns_.reset();
    engine_.reset();
  }
}

// A loader going through the layer files (AirLLM, RabbitLLM) starts with the
// embedding: once half of that file is read, the window runs on into the next
// layer, so the link stays busy while the loader copies the rest. Before, the
// next layer came only when its file was opened.
TEST_F(ViewsTest, FirstLayerFileHalfReadRunsOnIntoTheNextLayer) {
  const testing::CheckpointPlan plan = Put({.layers = 4, .hidden = 256, .intermediate = 512, .vocab = 512}, 1);
  Mount({ViewKind::kSplit});
  const auto [embed, size] = SplitFile("model.embed_tokens.safetensors");
  const ByteRange layer0 = SourceOf(plan, "model.layers.0.");

  ASSERT_TRUE(ReadRange(embed, 0, size / 4).ok());
  WaitIdle();
  EXPECT_EQ(FetchedEndWithin(layer0), layer0.offset) << "a quarter read fetched layer 0";

  ASSERT_TRUE(ReadRange(embed, size / 4, size * 3 / 4).ok());
  WaitIdle();
  const uint64_t window = 1 << 20;  // ViewOptions::prefetch_window in Mount()
  EXPECT_GE(FetchedEndWithin(layer0), layer0.offset + window / 2) << "half read: layer 0 is not on its way";
}

// The window ahead of a reader of a layer file is topped up as it reads, not
// once half of it is consumed: requests then go out a few at a time instead of
// half a window at once that all end together while the link idles.
TEST_F(ViewsTest, LayerFileReaderKeepsMostOfTheWindowRequested) {
  const testing::CheckpointPlan plan = Put({.layers = 3, .hidden = 256, .intermediate = 2048, .vocab = 256}, 1);
  Mount({ViewKind::kSplit});
  const auto [layer, size] = SplitFile("model.layers.1.safetensors");
  const ByteRange source = SourceOf(plan, "model.layers.1.");
  const uint64_t header = size - source.length;  // the layer file is its header, then its source bytes in order
  const uint64_t window = 1 << 20;                // ViewOptions::prefetch_window in Mount()
  ASSERT_GT(source.length, 4 * window);

  // Looked at every 384 KiB read (three kernel reads), out of step with any
  // refill period that is a power of two.
  const uint64_t step = 3 * (128 << 10);
  uint64_t least_ahead = window;
  for (uint64_t at = header; at + step < size - window; at += step) {
    ASSERT_TRUE(ReadRange(layer, at, at + step).ok());
    WaitIdle();
    const uint64_t read_to = source.offset + (at + step - header);
    least_ahead = std::min(least_ahead, FetchedEndWithin(source) - read_to);
  }
  EXPECT_GE(least_ahead, window * 3 / 4);
}

TEST_F(ViewsTest, CorruptShardBreaksOnlyTheFilesThatNeedIt) {
  testing::CheckpointPlan plan = Put({}, 3);
  auto files = testing::BuildCheckpointFiles({}, testing::WriteOptions{.num_shards = 3});
  ASSERT_TRUE(files.ok());
  const std::string broken = "m/" + plan.shards[1].file_name;
  std::string bytes = files->at(plan.shards[1].file_name);
  bytes.replace(8, 2, "[[");  // the header is no JSON object any more
  store_.Put(broken, bytes);
  Mount();

  auto broken_tensor = std::find_if(plan.weight_map.begin(), plan.weight_map.end(),
                                    [&](const auto& e) { return e.second == plan.shards[1].file_name; });
  ASSERT_NE(broken_tensor, plan.weight_map.end());
  Status open = ns_->Open(Path("m/@tensors/" + broken_tensor->first + ".safetensors"));
  EXPECT_EQ(open.code(), ErrorCode::kCorrupt);
  EXPECT_THAT(open.message(), HasSubstr(plan.shards[1].file_name));

  Status mirror = ns_->Open(Path("m/@bf16/" + plan.shards[1].file_name));
  EXPECT_EQ(mirror.code(), ErrorCode::kCorrupt);
  EXPECT_TRUE(ReadAll(Path("m/@bf16/" + plan.shards[0].file_name)).ok());
  EXPECT_TRUE(ReadAll(Path("m/@bf16/" + plan.shards[2].file_name)).ok());
  // The layer split across the broken shard fails; a layer elsewhere reads.
  int failed = 0;
  int readable = 0;
  auto layers = ns_->ReadDir(Path("m/splitted_model"));
  ASSERT_TRUE(layers.ok());
  for (const DirEntry& e : layers->entries) {
    if (e.name.ends_with(".done")) continue;
    if (ns_->Open(e.attr.id).ok()) {
      EXPECT_TRUE(ReadAll(e.attr.id).ok()) << e.name;
      ++readable;
    } else {
      ++failed;
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(readable, 0);
  // The shard itself still reads as a plain file.
  auto raw = ReadAll(Path(broken));
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(*raw, bytes);
}

// GPT-2 keeps its projections in Conv1D modules, stored [in, out];
// transformers quantizes them as the [out, in] weight of a Linear layer. The
// bytes are the numpy reference's, which quantizes the transpose.
TEST_F(ViewsTest, Conv1dWeightsAreQuantizedTransposed) {
  for (const reference::ReferenceFile& f : reference::kGpt2Files) store_.Put("m/" + std::string(f.name), std::string(f.bytes));
  Mount();
  const std::string name = "transformer.h.0.mlp.c_fc.weight";  // [in, out] = [12, 20]
  const uint64_t in = 12;
  const uint64_t out = 20;
  std::map<std::string, std::map<std::string, std::pair<TensorInfo, std::string>>> files;
  size_t checked = 0;
  for (const reference::ReferenceTensor& t : reference::kGpt2ViewTensors) {
    const std::string file(t.file);
    if (!files.contains(file)) files[file] = Tensors("m/" + file);
    auto it = files[file].find(std::string(t.tensor));
    ASSERT_NE(it, files[file].end()) << file << " lacks " << t.tensor;
    EXPECT_TRUE(testing::SameBytes(it->second.second, std::string(t.bytes))) << file << ": " << t.tensor;
    ++checked;
  }
  EXPECT_GE(checked, 15u);
  auto& int8 = files["@bnb-int8/model.safetensors"];
  ASSERT_TRUE(int8.contains(name));
  EXPECT_EQ(int8[name].first.dtype, Dtype::I8);
  EXPECT_EQ(int8[name].first.shape, (std::vector<uint64_t>{out, in}));
  EXPECT_EQ(int8["transformer.h.0.mlp.c_fc.SCB"].first.shape, (std::vector<uint64_t>{out}));
  auto& nf4 = files["@bnb-nf4/model.safetensors"];
  EXPECT_THAT(nf4[name + ".quant_state.bitsandbytes__nf4"].second,
              HasSubstr("\"shape\": [" + std::to_string(out) + ", " + std::to_string(in) + "]"));
  // The AirLLM layout keeps the stored orientation.
  auto& split = files["splitted_model.4bit/transformer.h.0.safetensors"];
  EXPECT_THAT(split[name + ".4bit.quant_state.bitsandbytes__nf4"].second,
              HasSubstr("\"shape\": [" + std::to_string(in) + ", " + std::to_string(out) + "]"));
}

TEST(ParseViewListTest, AcceptsAllNoneAndNames) {
  EXPECT_EQ(ParseViewList("all")->size(), kAllViews.size());
  EXPECT_TRUE(ParseViewList("none")->empty());
  EXPECT_THAT(*ParseViewList("splitted_model:bnb-nf4+@bf16"),
              ElementsAre(ViewKind::kSplit, ViewKind::kBnbNf4, ViewKind::kBf16));
}

TEST(ParseViewListTest, UnknownNameSaysWhatIsKnown) {
  auto views = ParseViewList("splitted_model:nf4");
  ASSERT_FALSE(views.ok());
  EXPECT_THAT(views.status().message(), HasSubstr("unknown view 'nf4'"));
  EXPECT_THAT(views.status().message(), HasSubstr("bnb-nf4"));
}

TEST(TensorFileNameTest, EscapesSlashAndPercent) {
  EXPECT_EQ(TensorFileName("a/b%c.weight"), "a%2Fb%25c.weight");
}

}  // namespace
}  // namespace tensorfs
