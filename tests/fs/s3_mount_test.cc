// Real mounts of s3:// sources served by the S3 dialect of the project's test
// server, which verifies every request's SigV4 signature (--require-auth): bytes
// through the kernel equal the source by read, mmap and in random order, views
// and shard= as over a local directory, each source of the AWS credential
// chain, the exit statuses of refused credentials and missing buckets, a
// listing of two pages, odd key names, a replaced object (ESTALE, never mixed
// bytes), a bucket in another region, and the faults the gs:// tests inject.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/aws_env.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using testing::GcsTestServer;
using testing::ReadWhole;
using testing::RunCommand;
using testing::SameBytes;
using testing::TensorfsBinary;
using testing::TensorfsMount;
using testing::WriteFile;

constexpr char kKeyId[] = "AKIDMOUNTTEST0001";
constexpr char kSecret[] = "mount/test+secret";
constexpr char kWebIdentityToken[] = "eyJ.mount-test.web-identity";
constexpr char kRoleArn[] = "arn:aws:iam::123456789012:role/tensorfs-mount-test";
constexpr char kContainerToken[] = "container-token-for-the-mount-test";
constexpr char kShard[] = "llama/model-00001-of-00002.safetensors";
const std::vector<std::string> kOddNames = {"with space.txt", "ünïcødé.json", "plus+1", "tilde~x", "hash#1",
                                            "q?x",            "pct%20",       "a/b/c.txt"};
// Replaced while mounted: large enough that a mount with an 8 MiB cache and a
// 4 MiB prefetch window has not fetched its end when its head was read.
constexpr char kReplaced[] = "replaced/blob.bin";
constexpr size_t kReplacedSize = 32 << 20;
constexpr char kSmallCache[] = "cache_size=8M,chunk_size=1M,max_fetches=2,prefetch_window=4M";

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

// Reads a whole file with read(); returns errno on failure.
int ReadFile(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  out->clear();
  std::vector<char> buf(1 << 20);
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) out->append(buf.data(), static_cast<size_t>(n));
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

// Replaces a file as an upload does: a new file renamed over the old one.
void ReplaceFile(const std::string& path, const std::string& bytes) {
  WriteFile(path + ".new", bytes);
  ASSERT_EQ(::rename((path + ".new").c_str(), path.c_str()), 0) << std::strerror(errno);
}

// The mounts' environment: every AWS variable cleared, HOME an empty
// directory, the server's access key in the environment (the first source of
// the chain) unless a test changes it.
class AwsEnvironment : public testing::ScopedAwsEnvironment {
 public:
  explicit AwsEnvironment(const std::string& home) : ScopedAwsEnvironment(home) {
    Set("AWS_ACCESS_KEY_ID", kKeyId);
    Set("AWS_SECRET_ACCESS_KEY", kSecret);
  }
};

class S3MountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new testing::TempDir();
    const std::string bucket = data_->path() + "/s3ckpt";
    testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 2, .hidden = 256, .intermediate = 512,
                            .vocab = 2048, .dtype = Dtype::BF16};
    auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = bucket + "/llama"});
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    for (const std::string& name : kOddNames) WriteFile(bucket + "/odd/" + name, "content of " + name);
    for (int i = 0; i < 1500; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "/many/f%04d", i);
      WriteFile(bucket + name, std::to_string(i));
    }
    replaced_old_ = new std::string(RandomBytes(kReplacedSize, 1));
    WriteFile(bucket + "/" + kReplaced, *replaced_old_);
    WriteFile(data_->path() + "/westckpt/w.txt", "from the west");
    std::string error;
    server_ = GcsTestServer::Start({.data_dir = data_->path(),
                                    .extra_args = {"--require-auth", "--s3-key", std::string(kKeyId) + ":" + kSecret,
                                                   "--s3-bucket-region", "westckpt=eu-west-1",
                                                   "--sts-web-identity-token", kWebIdentityToken, "--sts-role-arn",
                                                   kRoleArn, "--container-token", kContainerToken}},
                                   &error)
                  .release();
    ASSERT_NE(server_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete server_;
    delete replaced_old_;
    delete data_;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->ClearFaults());
    ASSERT_TRUE(server_->ResetStats());
  }

  static std::string Endpoint() { return server_->endpoint(); }  // http://127.0.0.1:PORT: path-style
  static std::string VirtualHostEndpoint() { return "http://localhost:" + std::to_string(server_->port()); }
  static std::string Src(const std::string& rel) { return data_->path() + "/s3ckpt/" + rel; }

  std::unique_ptr<TensorfsMount> Mount(const std::string& source = "s3://s3ckpt",
                                       const std::string& extra = "retry_deadline=20,stall_timeout=2",
                                       const std::string& endpoint = Endpoint()) {
    std::string error;
    auto mount = TensorfsMount::Start(source, {"-o", "endpoint=" + endpoint + (extra.empty() ? "" : "," + extra)},
                                      &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }
  // `tensorfs SOURCE DIR` in the background, as a user runs it: its exit status and output.
  testing::CommandResult MountInBackground(const std::string& source, const std::string& options) {
    testing::TempDir mnt;
    auto result = RunCommand(TensorfsBinary() + " " + source + " " + mnt.path() + " -o endpoint=" + Endpoint() +
                             ",retry_deadline=2" + (options.empty() ? "" : "," + options) + " 2>&1");
    EXPECT_FALSE(testing::IsMounted(mnt.path()));
    if (testing::IsMounted(mnt.path())) RunCommand("fusermount3 -u " + mnt.path());
    return result;
  }

  testing::TempDir home_;
  AwsEnvironment env_{home_.path()};
  static testing::TempDir* data_;
  static GcsTestServer* server_;
  static std::string* replaced_old_;
};
testing::TempDir* S3MountTest::data_ = nullptr;
GcsTestServer* S3MountTest::server_ = nullptr;
std::string* S3MountTest::replaced_old_ = nullptr;

TEST_F(S3MountTest, EveryFileReadsLikeTheSourceByReadAndMmapVirtualHosted) {
  auto mount = Mount("s3://s3ckpt", "retry_deadline=20", VirtualHostEndpoint());
  ASSERT_NE(mount, nullptr);
  EXPECT_THAT(mount->Log(), HasSubstr("http://s3ckpt.localhost:"));
  EXPECT_THAT(mount->Log(), HasSubstr("virtual-hosted"));
  int files = 0;
  for (const auto& e : fsys::recursive_directory_iterator(Src("llama"))) {
    const std::string rel = "llama/" + fsys::relative(e.path(), Src("llama")).string();
    const std::string expected = ReadWhole(Src(rel));
    std::string got;
    ASSERT_EQ(ReadFile(mount->path() + "/" + rel, &got), 0) << rel;
    EXPECT_TRUE(SameBytes(got, expected)) << rel;
    int fd = ::open((mount->path() + "/" + rel).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    void* map = ::mmap(nullptr, expected.size(), PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(map, MAP_FAILED);
    EXPECT_EQ(std::memcmp(map, expected.data(), expected.size()), 0) << rel;
    ::munmap(map, expected.size());
    ::close(fd);
    ++files;
  }
  EXPECT_GE(files, 5);
  EXPECT_EQ(server_->Stats()["auth_headers"]["none"].get<int>(), 0) << "every request signed";
}

TEST_F(S3MountTest, MmapLoaderDigestsMatchInRandomOrder) {
  auto mount = Mount("s3://s3ckpt/llama");
  ASSERT_NE(mount, nullptr);
  auto result = RunCommand("/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/mmap_loader.py " + mount->path() +
                           " --compare " + Src("llama") + " --order random --min-tensors 10");
  EXPECT_EQ(result.exit_code, 0) << result.output << mount->Log();
  EXPECT_THAT(mount->Log(), HasSubstr("path-style"));
}

TEST_F(S3MountTest, ViewsReadAsOverALocalDirectory) {
  auto s3 = Mount("s3://s3ckpt/llama");
  ASSERT_NE(s3, nullptr);
  std::string error;
  auto local = TensorfsMount::Start(Src("llama"), {}, &error);
  ASSERT_NE(local, nullptr) << error;
  int compared = 0;
  for (const auto& e : fsys::recursive_directory_iterator(local->path())) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fsys::relative(e.path(), local->path()).string();
    std::string want, got;
    ASSERT_EQ(ReadFile(e.path().string(), &want), 0) << rel;
    ASSERT_EQ(ReadFile(s3->path() + "/" + rel, &got), 0) << rel << "\n" << s3->Log();
    EXPECT_TRUE(SameBytes(got, want)) << rel;
    compared += rel.find('/') != std::string::npos;  // a file of a view directory
  }
  EXPECT_GE(compared, 10) << "the views were compared";
}

TEST_F(S3MountTest, ShardedHostReadsEveryFileAsTheSource) {
  auto mount = Mount("s3://s3ckpt/llama", "shard=1/2,views=none");
  ASSERT_NE(mount, nullptr);
  for (const auto& e : fsys::directory_iterator(Src("llama"))) {
    const std::string name = e.path().filename().string();
    std::string got;
    ASSERT_EQ(ReadFile(mount->path() + "/" + name, &got), 0) << name;
    EXPECT_TRUE(SameBytes(got, ReadWhole(e.path().string()))) << name;
  }
}

TEST_F(S3MountTest, ListingOf1500ObjectsTakesTwoPagesAndIsComplete) {
  auto mount = Mount("s3://s3ckpt/many");
  ASSERT_NE(mount, nullptr);
  size_t count = 0;
  for ([[maybe_unused]] const auto& e : fsys::directory_iterator(mount->path())) ++count;
  EXPECT_EQ(count, 1500u) << "a page holds at most 1000: the second page was followed";
  EXPECT_EQ(ReadWhole(mount->path() + "/f1499"), "1499");
  EXPECT_GE(server_->Stats()["list_requests"].get<int>(), 2);
}

TEST_F(S3MountTest, OddKeyNamesAppearAsFiles) {
  auto mount = Mount("s3://s3ckpt/odd");
  ASSERT_NE(mount, nullptr);
  for (const std::string& name : kOddNames) {
    EXPECT_EQ(ReadWhole(mount->path() + "/" + name), "content of " + name) << name << "\n" << mount->Log();
  }
}

// The whole object read block by block after it was replaced, its head having
// been read before: every block that reads is the old version's bytes, the
// rest is ESTALE (S3 answers If-Match: "old ETag" with 412), never new bytes.
TEST_F(S3MountTest, ReplacedObjectReadsAsStaleNeverAsAMix) {
  auto mount = Mount("s3://s3ckpt/replaced", kSmallCache);
  ASSERT_NE(mount, nullptr);
  const std::string new_bytes = RandomBytes(kReplacedSize, 2);
  int fd = ::open((mount->path() + "/blob.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  constexpr size_t kBlock = 64 << 10;
  std::vector<char> buf(kBlock);
  ASSERT_EQ(::pread(fd, buf.data(), kBlock, 0), static_cast<ssize_t>(kBlock));
  ASSERT_EQ(std::memcmp(buf.data(), replaced_old_->data(), kBlock), 0);
  ReplaceFile(Src(kReplaced), new_bytes);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  int stale = 0, other_errors = 0;
  std::vector<std::string> wrong;
  for (size_t off = 0; off < kReplacedSize; off += kBlock) {
    const ssize_t n = ::pread(fd, buf.data(), kBlock, static_cast<off_t>(off));
    if (n < 0) {
      (errno == ESTALE ? stale : other_errors) += 1;
      continue;
    }
    if (n != static_cast<ssize_t>(kBlock) || std::memcmp(buf.data(), replaced_old_->data() + off, kBlock) != 0) {
      wrong.push_back("block at " + std::to_string(off));
    }
  }
  ::close(fd);
  ReplaceFile(Src(kReplaced), *replaced_old_);  // for the other tests
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " blocks not the old version, the first " << wrong.front();
  EXPECT_EQ(other_errors, 0) << mount->Log();
  EXPECT_GE(stale, 1) << "the uncached part of the old version cannot be served";
  EXPECT_THAT(mount->Log(), HasSubstr("changed while mounted (ETag"));
  EXPECT_GE(server_->Stats()["status_codes"]["412"].get<int>(), 1);
}

// One mount per source of the credential chain, each reading through a
// server that refuses unsigned requests.
struct CredentialSource {
  const char* name;
  // Sets the environment (and files) for the source; returns extra -o options.
  std::function<std::string(AwsEnvironment& env, const std::string& home, const std::string& endpoint)> setup;
  const char* described_as;  // in the mount's log line "using ..."
};

class S3CredentialSourceTest : public S3MountTest, public ::testing::WithParamInterface<CredentialSource> {};

TEST_P(S3CredentialSourceTest, MountsAndReads) {
  const std::string options = GetParam().setup(env_, home_.path(), Endpoint());
  auto mount = Mount("s3://s3ckpt/odd", options);
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ReadWhole(mount->path() + "/plus+1"), "content of plus+1") << mount->Log();
  EXPECT_THAT(mount->Log(), HasSubstr(GetParam().described_as));
  EXPECT_EQ(server_->Stats()["auth_headers"]["none"].get<int>(), 0);
  EXPECT_THAT(mount->Log(), ::testing::Not(HasSubstr(kSecret)));
}

void ClearEnvironmentKeys(AwsEnvironment& env) {
  env.Set("AWS_ACCESS_KEY_ID", std::nullopt);
  env.Set("AWS_SECRET_ACCESS_KEY", std::nullopt);
}

INSTANTIATE_TEST_SUITE_P(
    Chain, S3CredentialSourceTest,
    ::testing::Values(
        CredentialSource{"Environment", [](AwsEnvironment&, const std::string&, const std::string&) { return ""; },
                         "environment variables AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (access key AKID...0001)"},
        CredentialSource{"AwsProfile",
                         [](AwsEnvironment& env, const std::string& home, const std::string&) {
                           ClearEnvironmentKeys(env);
                           WriteFile(home + "/.aws/credentials",
                                     std::string("[default]\naws_access_key_id = wrong\naws_secret_access_key = x\n"
                                                 "[mount-test]\naws_access_key_id = ") +
                                         kKeyId + "\naws_secret_access_key = " + kSecret + "\n");
                           env.Set("AWS_PROFILE", "mount-test");
                           return "";
                         },
                         "profile mount-test (AWS_PROFILE)"},
        CredentialSource{"ProfileOption",
                         [](AwsEnvironment& env, const std::string& home, const std::string&) {
                           env.Set("AWS_ACCESS_KEY_ID", "AKIDWRONG");  // ignored: -o profile is the only source
                           WriteFile(home + "/config", std::string("[profile from-option]\naws_access_key_id = ") +
                                                           kKeyId + "\naws_secret_access_key = " + kSecret + "\n");
                           env.Set("AWS_CONFIG_FILE", home + "/config");
                           return "profile=from-option";
                         },
                         "profile from-option (-o profile)"},
        CredentialSource{"WebIdentity",
                         [](AwsEnvironment& env, const std::string& home, const std::string& endpoint) {
                           ClearEnvironmentKeys(env);
                           WriteFile(home + "/token", kWebIdentityToken);
                           env.Set("AWS_WEB_IDENTITY_TOKEN_FILE", home + "/token");
                           env.Set("AWS_ROLE_ARN", kRoleArn);
                           env.Set("AWS_ENDPOINT_URL_STS", endpoint);
                           return "";
                         },
                         "web identity token"},
        CredentialSource{"ContainerCredentials",
                         [](AwsEnvironment& env, const std::string& home, const std::string& endpoint) {
                           ClearEnvironmentKeys(env);
                           WriteFile(home + "/container-token", kContainerToken);
                           env.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint + "/_aws/container-credentials");
                           env.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", home + "/container-token");
                           return "";
                         },
                         "container credentials from http://127.0.0.1:"},
        CredentialSource{"InstanceMetadataV2",
                         [](AwsEnvironment& env, const std::string&, const std::string& endpoint) {
                           ClearEnvironmentKeys(env);
                           env.Set("AWS_EC2_METADATA_DISABLED", std::nullopt);
                           env.Set("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint);
                           return "";
                         },
                         "EC2 instance metadata at http://127.0.0.1:"}),
    [](const ::testing::TestParamInfo<CredentialSource>& info) { return std::string(info.param.name); });

TEST_F(S3MountTest, ExpiredSessionCredentialsAreFetchedAgain) {
  ClearEnvironmentKeys(env_);
  WriteFile(home_.path() + "/token", kWebIdentityToken);
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", home_.path() + "/token");
  env_.Set("AWS_ROLE_ARN", kRoleArn);
  env_.Set("AWS_ENDPOINT_URL_STS", Endpoint());
  auto mount = Mount("s3://s3ckpt/odd");
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ReadWhole(mount->path() + "/plus+1"), "content of plus+1");
  ASSERT_TRUE(server_->ExpireS3Sessions());
  EXPECT_EQ(ReadWhole(mount->path() + "/tilde~x"), "content of tilde~x") << mount->Log();
  EXPECT_THAT(mount->Log(), HasSubstr("expired"));
  EXPECT_EQ(server_->Stats()["sts_requests"].get<int>(), 2);
}

TEST_F(S3MountTest, WrongSecretExitsWithStatus5NamingTheCredentialsAndTheCode) {
  env_.Set("AWS_SECRET_ACCESS_KEY", "not-the-secret");
  auto result = MountInBackground("s3://s3ckpt/llama", "");
  EXPECT_EQ(result.exit_code, 5) << result.output;
  EXPECT_THAT(result.output, HasSubstr("SignatureDoesNotMatch"));
  EXPECT_THAT(result.output, HasSubstr("environment variables AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"));
  EXPECT_THAT(result.output, HasSubstr("check the secret"));
  EXPECT_THAT(result.output, ::testing::Not(HasSubstr("not-the-secret")));
}

TEST_F(S3MountTest, UnknownAccessKeyExitsWithStatus5) {
  env_.Set("AWS_ACCESS_KEY_ID", "AKIDNOTKNOWN");
  auto result = MountInBackground("s3://s3ckpt/llama", "");
  EXPECT_EQ(result.exit_code, 5) << result.output;
  EXPECT_THAT(result.output, HasSubstr("InvalidAccessKeyId"));
}

TEST_F(S3MountTest, NoCredentialsAnywhereExitsWithStatus5ListingWhatWasTried) {
  ClearEnvironmentKeys(env_);
  auto result = MountInBackground("s3://s3ckpt/llama", "");
  EXPECT_EQ(result.exit_code, 5) << result.output;
  EXPECT_THAT(result.output, HasSubstr("no AWS credentials found. Tried: environment variables"));
  EXPECT_THAT(result.output, HasSubstr("-o no_sign_request"));
}

TEST_F(S3MountTest, MissingBucketExitsWithStatus4) {
  auto result = MountInBackground("s3://no-such-bucket/llama", "");
  EXPECT_EQ(result.exit_code, 4) << result.output;
  EXPECT_THAT(result.output, HasSubstr("bucket s3://no-such-bucket not found"));
  EXPECT_THAT(result.output, HasSubstr("NoSuchBucket"));
}

TEST_F(S3MountTest, MissingPrefixExitsWithStatus4) {
  auto result = MountInBackground("s3://s3ckpt/no/such/prefix", "");
  EXPECT_EQ(result.exit_code, 4) << result.output;
  EXPECT_THAT(result.output, HasSubstr("holds no objects"));
}

TEST_F(S3MountTest, BucketInAnotherRegionIsFoundAndUsed) {
  auto mount = Mount("s3://westckpt");
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ReadWhole(mount->path() + "/w.txt"), "from the west") << mount->Log();
  EXPECT_THAT(mount->Log(), HasSubstr("bucket s3://westckpt is in region eu-west-1"));
  auto given = Mount("s3://westckpt", "region=ap-south-1");
  ASSERT_NE(given, nullptr);
  EXPECT_EQ(ReadWhole(given->path() + "/w.txt"), "from the west");
  EXPECT_THAT(given->Log(), HasSubstr("is in region eu-west-1, not ap-south-1 as configured"));
}

TEST_F(S3MountTest, InspectPrintsTheCheckpoint) {
  auto result = RunCommand(TensorfsBinary() + " inspect s3://s3ckpt/llama -o endpoint=" + Endpoint() + " 2>&1");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("model.layers.1.mlp.down_proj.weight"));
}

// Each fault hits the shard's GetObject requests; the bytes must still be exact.
class S3FaultTest : public S3MountTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(S3FaultTest, ReadCompletesWithIdenticalBytes) {
  auto mount = Mount("s3://s3ckpt/llama");
  ASSERT_NE(mount, nullptr);
  ASSERT_TRUE(server_->InjectFaults(GetParam())) << server_->last_error();
  std::string got;
  ASSERT_EQ(ReadFile(mount->path() + "/model-00001-of-00002.safetensors", &got), 0) << mount->Log();
  EXPECT_TRUE(SameBytes(got, ReadWhole(Src(kShard))));
  EXPECT_GE(server_->Stats()["faults_applied"].get<int>(), 1) << "the fault was exercised";
}

INSTANTIATE_TEST_SUITE_P(
    Faults, S3FaultTest,
    ::testing::Values(
        R"([{"match": {"media": true}, "action": "status", "status": 503, "count": 2}])",
        R"([{"match": {"media": true}, "action": "status", "status": 500, "count": 1}])",
        R"([{"match": {"media": true}, "action": "reset_after", "bytes": 30000, "count": 2}])",
        R"([{"match": {"media": true}, "action": "truncate_after", "bytes": 20000, "count": 2}])",
        R"([{"match": {"media": true}, "action": "stall_after", "bytes": 10000, "seconds": 6, "count": 1}])",
        R"([{"match": {"media": true}, "action": "delay_first_byte", "seconds": 1, "count": 1}])"));

TEST_F(S3MountTest, PersistentSlowDownGivesEioCountedByCauseAndTheMountStaysUsable) {
  auto mount = Mount("s3://s3ckpt/llama", "retry_deadline=2,stall_timeout=2");
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->path() + "/model-00001-of-00002.safetensors";
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_TRUE(server_->InjectFaults(R"([{"match": {"media": true}, "action": "status", "status": 503, "count": -1}])"));
  std::string got;
  EXPECT_EQ(ReadFile(path, &got), EIO);
  auto stats = RunCommand(TensorfsBinary() + " stats --json " + mount->path());
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  const nlohmann::json j = nlohmann::json::parse(stats.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << stats.output;
  EXPECT_GE(j["retries"]["by_cause"].value("http_503", 0), 1) << stats.output;
  EXPECT_THAT(mount->Log(), HasSubstr("SlowDown"));
  ASSERT_TRUE(server_->ClearFaults());
  ASSERT_EQ(ReadFile(path, &got), 0) << mount->Log();
  EXPECT_TRUE(SameBytes(got, ReadWhole(Src(kShard))));
}

}  // namespace
}  // namespace tensorfs
