#include "core/vfs/namespace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>

#include "tests/support/memory_store.h"

namespace tensorfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class NamespaceTest : public ::testing::Test {
 protected:
  NamespaceTest() {
    store_.Put("config.json", "{}");
    store_.Put("llama/model.safetensors", std::string(100, 'x'));
    store_.Put("llama/tokenizer.json", "tok");
  }
  StatusOr<ReadResult> ReadSync(NodeId id, uint64_t off, size_t size) {
    std::promise<StatusOr<ReadResult>> result;
    ns_.Read(id, off, size, [&](StatusOr<ReadResult> r) { result.set_value(std::move(r)); });
    return result.get_future().get();
  }
  static std::string Bytes(const ReadResult& r) {
    std::string s;
    for (auto p : r.pieces) s.append(reinterpret_cast<const char*>(p.data()), p.size());
    return s;
  }
  testing::MemoryStore store_;
  Metrics metrics_;
  ReadEngine engine_{store_, EngineOptions{.chunk_size = 64 << 10, .cache_size = 1 << 20, .max_fetches = 2,
                                           .prefetch_window = 256 << 10},
                     metrics_};
  Namespace ns_{store_, engine_};
};

std::vector<std::string> EntryNames(const std::vector<DirEntry>& entries) {
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  return names;
}

TEST_F(NamespaceTest, RootListsFilesAndDirectories) {
  auto entries = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(entries.ok());
  EXPECT_THAT(EntryNames(*entries), ElementsAre("config.json", "llama"));
  EXPECT_FALSE((*entries)[0].attr.is_dir);
  EXPECT_TRUE((*entries)[1].attr.is_dir);
}

TEST_F(NamespaceTest, LookupGivesExactSizeAndStableIds) {
  auto dir = ns_.Lookup(kRootNode, "llama");
  ASSERT_TRUE(dir.ok());
  auto file = ns_.Lookup(dir->id, "model.safetensors");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->size, 100u);
  auto again = ns_.Lookup(dir->id, "model.safetensors");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, file->id);
}

TEST_F(NamespaceTest, DirectoryIsListedOnce) {
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  ASSERT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  ASSERT_TRUE(ns_.Lookup(kRootNode, "missing").status().code() == ErrorCode::kNotFound);
  // A new object does not appear: the mount shows one version of the source.
  store_.Put("late.bin", "x");
  EXPECT_EQ(ns_.Lookup(kRootNode, "late.bin").status().code(), ErrorCode::kNotFound);
}

TEST_F(NamespaceTest, ReadClipsAtEndOfFile) {
  auto file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  auto r = ReadSync(file->id, 1, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Bytes(*r), "}");
  auto past = ReadSync(file->id, 5, 10);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->size(), 0u);
  EXPECT_EQ(store_.read_count(), 1);  // nothing fetched for a read past the end
}

TEST_F(NamespaceTest, ReadOfReplacedObjectIsStale) {
  auto file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  store_.Put("config.json", "{\"new\":1}");
  auto r = ReadSync(file->id, 0, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kStale);
  EXPECT_THAT(r.status().message(), HasSubstr("config.json"));
}

TEST_F(NamespaceTest, OpenOfDirectoryFails) {
  auto dir = ns_.Lookup(kRootNode, "llama");
  ASSERT_TRUE(dir.ok());
  EXPECT_FALSE(ns_.Open(dir->id).ok());
}

TEST_F(NamespaceTest, UnknownNodeIsNotFound) {
  EXPECT_EQ(ns_.GetAttr(NodeId{999}).status().code(), ErrorCode::kNotFound);
}

TEST_F(NamespaceTest, StatsCountListedBytes) {
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  auto dir = ns_.Lookup(kRootNode, "llama");
  ASSERT_TRUE(ns_.ReadDir(dir->id).ok());
  EXPECT_EQ(ns_.Stats().total_bytes, 2u + 100u + 3u);
}

}  // namespace
}  // namespace tensorfs
