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
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/aws_env.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/served_data_test.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using testing::GcsTestServer;
using testing::RandomBytes;
using testing::ReadFile;
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

// The server's flags: signatures required, the access key, a bucket in
// another region, and the credential endpoints' secrets.
std::vector<std::string> AwsServerArgs() {
  return {"--require-auth", "--s3-key", std::string(kKeyId) + ":" + kSecret, "--s3-bucket-region",
          "westckpt=eu-west-1", "--sts-web-identity-token", kWebIdentityToken, "--sts-role-arn", kRoleArn,
          "--container-token", kContainerToken};
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

// A checkpoint, odd key names, 1500 keys under one prefix (two pages) in
// bucket "s3ckpt", and a bucket in another region; read-only.
class S3MountTest : public testing::ServedDataTest<S3MountTest> {
 public:
  static constexpr char kDataKey[] = "s3_mount_test/llama-2x256-odd-many1500-west";
  static void MakeData(const std::string& dir) {
    const std::string bucket = dir + "/s3ckpt";
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
    WriteFile(dir + "/westckpt/w.txt", "from the west");
  }
  static std::vector<std::string> ServerArgs(const std::string&) { return AwsServerArgs(); }

 protected:
  static std::string Endpoint() { return server_->endpoint(); }  // http://127.0.0.1:PORT: path-style
  static std::string VirtualHostEndpoint() { return "http://localhost:" + std::to_string(server_->port()); }
  static std::string Src(const std::string& rel) { return ServedDataTest::Src("s3ckpt/" + rel); }

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
    testing::UnmountOnExit unmount{mnt.path()};
    auto result = RunCommand(TensorfsBinary() + " " + source + " " + mnt.path() + " -o endpoint=" + Endpoint() +
                             ",retry_deadline=2" + (options.empty() ? "" : "," + options) + " 2>&1");
    EXPECT_FALSE(testing::IsMounted(mnt.path()));
    return result;
  }

  testing::TempDir home_;
  AwsEnvironment env_{home_.path()};
};

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
// On a bucket of its own (the suite's data is shared and read-only).
TEST_F(S3MountTest, ReplacedObjectReadsAsStaleNeverAsAMix) {
  constexpr size_t kSize = 32 << 20;  // more than the mount below caches and prefetches from its head
  testing::TempDir data;
  const std::string path = data.path() + "/own/blob.bin";
  const std::string old_bytes = RandomBytes(kSize, 1);
  const std::string new_bytes = RandomBytes(kSize, 2);
  WriteFile(path, old_bytes);
  std::string error;
  auto server = GcsTestServer::Start({.data_dir = data.path(), .extra_args = AwsServerArgs()}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto mount = TensorfsMount::Start(
      "s3://own", {"-o", "endpoint=" + server->endpoint() + ",cache_size=8M,chunk_size=1M,max_fetches=2,"
                         "prefetch_window=4M,retry_deadline=20"},
      &error);
  ASSERT_NE(mount, nullptr) << error;
  int fd = ::open((mount->path() + "/blob.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  constexpr size_t kBlock = 64 << 10;
  std::vector<char> buf(kBlock);
  ASSERT_EQ(::pread(fd, buf.data(), kBlock, 0), static_cast<ssize_t>(kBlock));
  ASSERT_EQ(std::memcmp(buf.data(), old_bytes.data(), kBlock), 0);
  ReplaceFile(path, new_bytes);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  int stale = 0, other_errors = 0;
  std::vector<std::string> wrong;
  for (size_t off = 0; off < kSize; off += kBlock) {
    const ssize_t n = ::pread(fd, buf.data(), kBlock, static_cast<off_t>(off));
    if (n < 0) {
      (errno == ESTALE ? stale : other_errors) += 1;
      continue;
    }
    if (n != static_cast<ssize_t>(kBlock) || std::memcmp(buf.data(), old_bytes.data() + off, kBlock) != 0) {
      wrong.push_back("block at " + std::to_string(off));
    }
  }
  ::close(fd);
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " blocks not the old version, the first " << wrong.front();
  EXPECT_EQ(other_errors, 0) << mount->Log();
  EXPECT_GE(stale, 1) << "the uncached part of the old version cannot be served";
  EXPECT_THAT(mount->Log(), HasSubstr("changed while mounted (ETag"));
  EXPECT_GE(server->Stats()["status_codes"].value("412", 0), 1);
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
  const int port = 9465;  // the test's own network namespace (see docs/design/testing.md)
  auto mount = Mount("s3://s3ckpt/llama", "retry_deadline=2,stall_timeout=2,prometheus_port=" + std::to_string(port));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->path() + "/model-00001-of-00002.safetensors";
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_TRUE(server_->InjectFaults(R"([{"match": {"media": true}, "action": "status", "status": 503, "count": -1}])"));
  std::string got;
  EXPECT_EQ(ReadFile(path, &got), EIO);
  const nlohmann::json stats = testing::MountStats(mount->path());
  EXPECT_GE(stats["retries"]["by_cause"].value("http_503", 0), 1) << stats.dump();
  EXPECT_GE(stats["reads_failed_eio"].get<int>(), 1) << stats.dump();
  const std::string metrics = testing::ScrapeMetrics(port);
  EXPECT_GE(testing::MetricSample(metrics, "tensorfs_retries_total{cause=\"http\",code=\"503\"}"), 1) << metrics;
  EXPECT_THAT(mount->Log(), HasSubstr("SlowDown"));
  ASSERT_TRUE(server_->ClearFaults());
  ASSERT_EQ(ReadFile(path, &got), 0) << mount->Log();
  EXPECT_TRUE(SameBytes(got, ReadWhole(Src(kShard))));
}

TEST_F(S3MountTest, ServerDownMidReadGivesEioThenRecovers) {
  auto mount = Mount("s3://s3ckpt/llama", "retry_deadline=2,stall_timeout=2");
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->path() + "/model-00001-of-00002.safetensors";
  const std::string expected = ReadWhole(Src(kShard));
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char head[4096];
  ASSERT_EQ(::pread(fd, head, sizeof head, 0), 4096);
  server_->Stop();
  std::vector<char> buf(4096);
  const off_t middle = static_cast<off_t>(expected.size() / 2);
  EXPECT_EQ(::pread(fd, buf.data(), buf.size(), middle), -1);
  EXPECT_EQ(errno, EIO);
  ASSERT_TRUE(server_->Restart()) << server_->last_error();
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), middle), 4096) << mount->Log();
  EXPECT_EQ(std::string(buf.data(), buf.size()), expected.substr(static_cast<size_t>(middle), 4096));
  ::close(fd);
}

}  // namespace
}  // namespace tensorfs
