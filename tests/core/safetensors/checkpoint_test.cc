#include "core/safetensors/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/memory_store.h"

namespace tensorfs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::BuildSafetensorsFile;
using testing::CheckpointPlan;
using testing::ExpectedTensorBytes;
using testing::MemoryStore;
using testing::ModelSpec;
using testing::PutCheckpoint;
using testing::RawTensor;
using testing::WriteOptions;

std::string ReadRange(MemoryStore& store, const CatalogEntry& e) {
  std::string bytes(e.range.length, '\0');
  Status st = store.Read(e.object, e.range.offset, std::as_writable_bytes(std::span<char>(bytes)));
  EXPECT_TRUE(st.ok()) << st.ToString();
  return bytes;
}

TEST(CheckpointTest, ShardsOfSeveralAreToldByTheirNames) {
  EXPECT_TRUE(IsOneOfSeveralShards("model-00001-of-00005.safetensors"));
  EXPECT_TRUE(IsOneOfSeveralShards("models/x/model-00002-of-00002.safetensors"));
  EXPECT_TRUE(IsOneOfSeveralShards("diffusion_pytorch_model-1-of-12.safetensors"));
  EXPECT_TRUE(IsOneOfSeveralShards("model-00001-of-00010.safetensors"));
  EXPECT_FALSE(IsOneOfSeveralShards("model-00001-of-00001.safetensors")) << "one shard of one";
  EXPECT_FALSE(IsOneOfSeveralShards("model-00001-of-00000.safetensors"));
  EXPECT_FALSE(IsOneOfSeveralShards("model.safetensors"));
  EXPECT_FALSE(IsOneOfSeveralShards("model-00001-of-00005.bin"));
  EXPECT_FALSE(IsOneOfSeveralShards("model-of-00005.safetensors")) << "no shard number";
  EXPECT_FALSE(IsOneOfSeveralShards("model-00001-of-.safetensors"));
  EXPECT_FALSE(IsOneOfSeveralShards("model-00001-of-0000x.safetensors"));
  EXPECT_FALSE(IsOneOfSeveralShards("model.safetensors.index.json"));
}

TEST(CheckpointTest, LoadsSingleFileCheckpoint) {
  MemoryStore store;
  ModelSpec spec;
  ASSERT_TRUE(PutCheckpoint(store, "", spec, WriteOptions{}).ok());
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->files().size(), 1u);
  EXPECT_EQ(c->files()[0].object.name, "model.safetensors");
  EXPECT_TRUE(c->indexes().empty());
  EXPECT_EQ(c->tensors().size(), testing::ModelTensors(spec).size());
  EXPECT_EQ(c->total_tensor_bytes(), testing::ModelTensorBytes(spec));
}

TEST(CheckpointTest, CatalogRangesHoldTheTensorBytes) {
  MemoryStore store;
  ModelSpec spec{.arch = testing::Arch::kQwen2, .dtype = Dtype::BF16};
  ASSERT_TRUE(PutCheckpoint(store, "models/qwen/", spec, WriteOptions{.num_shards = 3}).ok());
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "models/qwen");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->dir_prefix(), "models/qwen/");
  for (const testing::TensorSpec& t : testing::ModelTensors(spec)) {
    const CatalogEntry* e = c->Find(t.name);
    ASSERT_NE(e, nullptr) << t.name;
    EXPECT_EQ(e->dtype, Dtype::BF16);
    EXPECT_EQ(e->shape, t.shape);
    EXPECT_EQ(ReadRange(store, *e), ExpectedTensorBytes(t)) << t.name;
  }
}

TEST(CheckpointTest, EntriesNameTheirShardAndItsGeneration) {
  MemoryStore store;
  ASSERT_TRUE(PutCheckpoint(store, "", ModelSpec{}, WriteOptions{.num_shards = 2}).ok());
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const CatalogEntry* e = c->Find("lm_head.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->file, "model-00002-of-00002.safetensors");
  StatusOr<ObjectInfo> info = store.Stat(e->file);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(e->object, info->id());
  const CheckpointFile* f = c->FindFile(e->file);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(e->range.offset, f->header.data_start() + f->header.Find(e->name)->begin);
}

TEST(CheckpointTest, TensorsAreInStorageOrder) {
  MemoryStore store;
  ASSERT_TRUE(PutCheckpoint(store, "", ModelSpec{.layers = 3}, WriteOptions{.num_shards = 2}).ok());
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (size_t i = 1; i < c->tensors().size(); ++i) {
    const CatalogEntry& a = c->tensors()[i - 1];
    const CatalogEntry& b = c->tensors()[i];
    if (a.file == b.file) {
      EXPECT_EQ(a.range.end(), b.range.offset) << a.name << " then " << b.name;
    } else {
      EXPECT_LT(a.file, b.file);
    }
  }
}

TEST(CheckpointTest, ReadsAShortHeaderWithOneRead) {
  MemoryStore store;
  store.Put("model.safetensors", BuildSafetensorsFile({RawTensor{"w", Dtype::F32, {4}}}));
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(store.read_count(), 1);
}

TEST(CheckpointTest, ReadsAHeaderLongerThanTheSpeculativeReadWithTwoReads) {
  std::vector<RawTensor> tensors;
  for (int i = 0; i < 2000; ++i) {
    tensors.push_back(RawTensor{"model.layers." + std::to_string(i) + ".a_rather_long_tensor_name.weight",
                                Dtype::U8, {1}});
  }
  std::string file = BuildSafetensorsFile(tensors);
  MemoryStore store;
  store.Put("model.safetensors", file);
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_GT(c->files()[0].header.header_length, kSpeculativeHeaderBytes);
  EXPECT_EQ(c->tensors().size(), 2000u);
  EXPECT_EQ(store.read_count(), 2);
}

TEST(CheckpointTest, IgnoresOtherFilesAndSubdirectories) {
  MemoryStore store;
  ASSERT_TRUE(PutCheckpoint(store, "", ModelSpec{}, WriteOptions{}).ok());
  store.Put("sub/model.safetensors", BuildSafetensorsFile({RawTensor{"other", Dtype::F32, {1}}}));
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->files().size(), 1u);
  EXPECT_EQ(c->Find("other"), nullptr);
}

TEST(CheckpointTest, DirectoryWithoutSafetensorsIsNotFound) {
  MemoryStore store;
  store.Put("models/x/config.json", "{}");
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "models/x/");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr("no .safetensors files"), HasSubstr("models/x/")));
}

TEST(CheckpointTest, CorruptShardFailsLoadNamingTheFile) {
  MemoryStore store;
  ASSERT_TRUE(PutCheckpoint(store, "", ModelSpec{}, WriteOptions{.num_shards = 2}).ok());
  store.Put("model-00002-of-00002.safetensors", "short");
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(c.status().message(), HasSubstr("model-00002-of-00002.safetensors: file is 5 bytes"));
}

TEST(CheckpointTest, IndexNamingAMissingFileIsAnError) {
  MemoryStore store;
  ASSERT_TRUE(PutCheckpoint(store, "", ModelSpec{}, WriteOptions{.num_shards = 2}).ok());
  store.Remove("model-00002-of-00002.safetensors");
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("model-00002-of-00002.safetensors"),
                    HasSubstr("no such file")));
}

TEST(CheckpointTest, IndexPlacingATensorInAShardThatLacksItIsAnError) {
  MemoryStore store;
  store.Put("a.safetensors", BuildSafetensorsFile({RawTensor{"x", Dtype::F32, {1}}}));
  store.Put("b.safetensors", BuildSafetensorsFile({RawTensor{"y", Dtype::F32, {1}}}));
  store.Put("model.safetensors.index.json",
            R"({"weight_map": {"x": "b.safetensors", "y": "b.safetensors"}})");
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("model.safetensors.index.json places tensor 'x' in b.safetensors"),
                    HasSubstr("header of b.safetensors has no such tensor"),
                    HasSubstr("it is in a.safetensors")));
}

TEST(CheckpointTest, TensorInTwoShardsIsAnError) {
  MemoryStore store;
  store.Put("a.safetensors", BuildSafetensorsFile({RawTensor{"x", Dtype::F32, {1}}}));
  store.Put("b.safetensors", BuildSafetensorsFile({RawTensor{"x", Dtype::F32, {1}}}));
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kCorrupt);
  EXPECT_THAT(c.status().message(),
              HasSubstr("tensor 'x' is in both a.safetensors and b.safetensors"));
}

TEST(CheckpointTest, TensorsMissingFromTheIndexAreAccepted) {
  MemoryStore store;
  store.Put("a.safetensors", BuildSafetensorsFile({RawTensor{"x", Dtype::F32, {1}},
                                                   RawTensor{"extra", Dtype::F32, {1}}}));
  store.Put("model.safetensors.index.json", R"({"weight_map": {"x": "a.safetensors"}})");
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->Find("extra"), nullptr);
  ASSERT_EQ(c->indexes().size(), 1u);
}

TEST(CheckpointTest, UnparsableIndexFailsLoad) {
  MemoryStore store;
  store.Put("a.safetensors", BuildSafetensorsFile({RawTensor{"x", Dtype::F32, {1}}}));
  store.Put("model.safetensors.index.json", "{not json");
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("not valid JSON")));
}

TEST(CheckpointTest, ScanReportsEachFileAndKeepsTheGoodOnes) {
  MemoryStore store;
  ASSERT_TRUE(PutCheckpoint(store, "", ModelSpec{}, WriteOptions{.num_shards = 3}).ok());
  store.Put("model-00002-of-00003.safetensors", std::string(8, '\xff'));
  StatusOr<CheckpointScan> scan = ScanCheckpoint(store, "");
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  ASSERT_EQ(scan->files.size(), 3u);
  EXPECT_TRUE(scan->files[0].header.ok());
  EXPECT_FALSE(scan->files[1].header.ok());
  EXPECT_THAT(scan->files[1].header.status().message(),
              AllOf(HasSubstr("model-00002-of-00003.safetensors"), HasSubstr("over the format's limit")));
  EXPECT_TRUE(scan->files[2].header.ok());
  // The index names the broken file; that is reported once, as the file's error.
  EXPECT_TRUE(scan->problems.empty());
  EXPECT_EQ(scan->checkpoint.files().size(), 2u);
  EXPECT_NE(scan->checkpoint.Find("lm_head.weight"), nullptr);
  EXPECT_EQ(scan->FirstError().code(), ErrorCode::kCorrupt);
}

// Replaces every object right after the first listing, as a writer updating
// a checkpoint under a mount would.
class ReplaceAfterListStore : public ObjectStore {
 public:
  explicit ReplaceAfterListStore(MemoryStore& inner) : inner_(inner) {}
  StatusOr<ObjectInfo> Stat(std::string_view name) override { return inner_.Stat(name); }
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override {
    StatusOr<Listing> listing = inner_.List(prefix, delimiter);
    if (listing.ok()) {
      for (const ObjectInfo& o : listing->objects) {
        std::string bytes(o.size, '\0');
        EXPECT_TRUE(inner_.Read(o.id(), 0, std::as_writable_bytes(std::span<char>(bytes))).ok());
        inner_.Put(o.name, bytes);
      }
    }
    return listing;
  }
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override {
    return inner_.Read(object, offset, out);
  }
  std::string Describe() const override { return "replacing"; }

 private:
  MemoryStore& inner_;
};

TEST(CheckpointTest, HeaderReadsArePinnedToTheListedGeneration) {
  MemoryStore inner;
  inner.Put("model.safetensors", BuildSafetensorsFile({RawTensor{"w", Dtype::F32, {1}}}));
  ReplaceAfterListStore store(inner);
  StatusOr<Checkpoint> c = Checkpoint::Load(store, "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kStale);
  EXPECT_THAT(c.status().message(), HasSubstr("reading the header of model.safetensors"));
}

TEST(CheckpointTest, RecognizesCheckpointDirectories) {
  Listing with;
  with.objects.push_back(ObjectInfo{.name = "m/config.json"});
  with.objects.push_back(ObjectInfo{.name = "m/model.safetensors"});
  Listing without;
  without.objects.push_back(ObjectInfo{.name = "m/pytorch_model.bin"});
  without.objects.push_back(ObjectInfo{.name = "m/model.safetensors.index.json"});
  EXPECT_TRUE(IsCheckpointDirectory(with));
  EXPECT_FALSE(IsCheckpointDirectory(without));
  EXPECT_FALSE(IsCheckpointDirectory(Listing{}));
}

}  // namespace
}  // namespace tensorfs
