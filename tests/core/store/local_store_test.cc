#include "core/store/local_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

class LocalStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_.path() + "/a.txt", "hello");
    WriteFile(dir_.path() + "/m/model.safetensors", "0123456789");
    WriteFile(dir_.path() + "/m/sub/x.bin", "xyz");
    WriteFile(dir_.path() + "/m2/y", "y");
    auto store = LocalStore::Create(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }
  testing::TempDir dir_;
  std::unique_ptr<LocalStore> store_;
};

std::vector<std::string> Names(const Listing& l) {
  std::vector<std::string> names;
  for (const auto& o : l.objects) names.push_back(o.name);
  return names;
}

TEST_F(LocalStoreTest, ListWithDelimiterRollsUpDirectories) {
  auto listing = store_->List("", "/");
  ASSERT_TRUE(listing.ok());
  EXPECT_THAT(Names(*listing), ElementsAre("a.txt"));
  EXPECT_THAT(listing->prefixes, ElementsAre("m/", "m2/"));
}

TEST_F(LocalStoreTest, ListSubdirectory) {
  auto listing = store_->List("m/", "/");
  ASSERT_TRUE(listing.ok());
  EXPECT_THAT(Names(*listing), ElementsAre("m/model.safetensors"));
  EXPECT_THAT(listing->prefixes, ElementsAre("m/sub/"));
  EXPECT_EQ(listing->objects[0].size, 10u);
}

TEST_F(LocalStoreTest, ListWithoutDelimiterIsRecursive) {
  auto listing = store_->List("", "");
  ASSERT_TRUE(listing.ok());
  EXPECT_THAT(Names(*listing), ElementsAre("a.txt", "m/model.safetensors", "m/sub/x.bin", "m2/y"));
  EXPECT_TRUE(listing->prefixes.empty());
}

TEST_F(LocalStoreTest, ListPartialNamePrefix) {
  auto listing = store_->List("m", "/");
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(Names(*listing).empty());
  EXPECT_THAT(listing->prefixes, ElementsAre("m/", "m2/"));
}

TEST_F(LocalStoreTest, ListOfMissingDirectoryIsEmpty) {
  auto listing = store_->List("nope/", "/");
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->objects.empty());
}

TEST_F(LocalStoreTest, ReadRangeReturnsBytes) {
  auto info = store_->Stat("m/model.safetensors");
  ASSERT_TRUE(info.ok());
  std::string out(4, '\0');
  ASSERT_TRUE(store_->Read(info->id(), 3, std::as_writable_bytes(std::span(out))).ok());
  EXPECT_EQ(out, "3456");
}

TEST_F(LocalStoreTest, ReadPastEndIsAnError) {
  auto info = store_->Stat("a.txt");
  ASSERT_TRUE(info.ok());
  std::string out(4, '\0');
  Status s = store_->Read(info->id(), 3, std::as_writable_bytes(std::span(out)));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("past the end of a.txt"));
}

TEST_F(LocalStoreTest, ReplacedFileReadsAsStale) {
  auto info = store_->Stat("a.txt");
  ASSERT_TRUE(info.ok());
  std::string tmp = dir_.path() + "/a.tmp";
  WriteFile(tmp, "world");
  std::filesystem::rename(tmp, dir_.path() + "/a.txt");
  std::string out(5, '\0');
  Status s = store_->Read(info->id(), 0, std::as_writable_bytes(std::span(out)));
  EXPECT_EQ(s.code(), ErrorCode::kStale);
  EXPECT_THAT(s.message(), HasSubstr("changed while mounted"));
}

TEST_F(LocalStoreTest, StatOfMissingObjectIsNotFound) {
  EXPECT_EQ(store_->Stat("missing").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(store_->Stat("m").status().code(), ErrorCode::kNotFound);  // a directory is no object
}

TEST(LocalStoreCreateTest, MissingRootNamesIt) {
  auto store = LocalStore::Create("/nonexistent/tensorfs-dir");
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("/nonexistent/tensorfs-dir"));
}

TEST(LocalStoreCreateTest, FileAsRootIsRejected) {
  testing::TempDir dir;
  WriteFile(dir.path() + "/f", "x");
  auto store = LocalStore::Create(dir.path() + "/f");
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("is not a directory"));
}

}  // namespace
}  // namespace tensorfs
