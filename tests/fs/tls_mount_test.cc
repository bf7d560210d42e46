// Real mounts over https: the test server speaks TLS with a certificate from a
// throwaway CA made here with the openssl CLI; -o ca_file makes tensorfs trust
// it, and a CA that did not sign it (or a file that is no CA) is refused with a
// message naming the endpoint and the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/served_data_test.h"

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

// Makes a CA (dir/NAME-ca.pem) and, when `server` is set, a certificate for
// 127.0.0.1 signed by it (dir/server.pem, dir/server.key). Returns "" on
// success, else openssl's output.
std::string MakeCa(const std::string& dir, const std::string& name, bool server) {
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
  std::string script = "cd " + dir + " && openssl req -x509" + ec + "-keyout " + name + "-ca.key -out " + name +
                       "-ca.pem -days 2 -subj /CN=tensorfs-test-" + name + " 2>&1";
  if (server) {
    script += " && openssl req" + ec + "-keyout server.key -out server.csr -subj /CN=127.0.0.1 2>&1" +
              " && printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > server.ext" +
              " && openssl x509 -req -in server.csr -CA " + name + "-ca.pem -CAkey " + name +
              "-ca.key -CAcreateserial -out server.pem -days 2 -extfile server.ext 2>&1";
  }
  testing::CommandResult r = RunCommand(script);
  return r.exit_code == 0 ? "" : r.output;
}

// A checkpoint served over TLS, and two CAs: one that signed the server's
// certificate, one that did not.
class TlsMountTest : public testing::ServedDataTest<TlsMountTest> {
 public:
  static constexpr char kDataKey[] = "tls_mount_test/llama-2x128-certs";
  static void MakeData(const std::string& dir) {
    testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 2, .hidden = 128, .intermediate = 256,
                            .vocab = 512, .dtype = Dtype::F32};
    auto written = testing::WriteCheckpoint(spec, {.num_shards = 1, .dir = dir + "/ckpt/llama"});
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    std::filesystem::create_directories(dir + "/certs");  // served as a bucket too: harmless
    ASSERT_EQ(MakeCa(dir + "/certs", "good", /*server=*/true), "");
    ASSERT_EQ(MakeCa(dir + "/certs", "other", /*server=*/false), "");
  }
  static std::vector<std::string> ServerArgs(const std::string& dir) {
    return {"--tls-cert", dir + "/certs/server.pem", "--tls-key", dir + "/certs/server.key"};
  }

 protected:
  static std::string Certs() { return data_dir_ + "/certs"; }
  static std::string HttpsEndpoint() { return "https://127.0.0.1:" + std::to_string(server_->port()); }
  static std::string Mount(const std::string& mnt, const std::string& ca_file) {
    return TensorfsBinary() + " gs://ckpt " + mnt + " -o anonymous,retry_deadline=2,endpoint=" + HttpsEndpoint() +
           ",ca_file=" + ca_file;
  }
  static std::string Shard() {
    for (const auto& e : fsys::directory_iterator(data_dir_ + "/ckpt/llama")) {
      if (e.path().extension() == ".safetensors") return "llama/" + e.path().filename().string();
    }
    return "";
  }

};

TEST_F(TlsMountTest, FilesReadOverHttpsWithCaFileEqualTheSource) {
  std::string error;
  auto mount = TensorfsMount::Start(
      "gs://ckpt", {"-o", "anonymous,endpoint=" + HttpsEndpoint() + ",ca_file=" + Certs() + "/good-ca.pem"},
      &error);
  ASSERT_NE(mount, nullptr) << error;
  const std::string shard = Shard();
  ASSERT_FALSE(shard.empty());
  std::string want = ReadWhole(data_dir_ + "/ckpt/" + shard);
  ASSERT_GT(want.size(), 1u << 20);
  EXPECT_TRUE(SameBytes(ReadWhole(mount->path() + "/" + shard), want)) << mount->Log();
  EXPECT_GT(server_->Stats().value("bytes_served", 0), 0);
}

TEST_F(TlsMountTest, CaThatDidNotSignTheServerIsRefusedNamingEndpointAndFile) {
  testing::TempDir mnt;
  const std::string ca = Certs() + "/other-ca.pem";
  testing::CommandResult result = RunCommand(Mount(mnt.path(), ca));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_THAT(result.output, HasSubstr("TLS certificate of " + HttpsEndpoint() + " not trusted by CA file " + ca));
  EXPECT_FALSE(testing::IsMounted(mnt.path()));
}

TEST_F(TlsMountTest, CaFileHoldingNoCertificateIsRefusedAtStart) {
  testing::TempDir mnt;
  const std::string not_a_ca = Certs() + "/server.key";
  testing::CommandResult result = RunCommand(Mount(mnt.path(), not_a_ca));
  EXPECT_EQ(result.exit_code, 2) << result.output;  // an invalid option: permanent
  EXPECT_THAT(result.output, HasSubstr("ca_file " + not_a_ca + " holds no PEM certificate"));
  EXPECT_FALSE(testing::IsMounted(mnt.path()));
}

TEST_F(TlsMountTest, MissingCaFileIsRefusedAtStart) {
  testing::TempDir mnt;
  const std::string missing = Certs() + "/missing.pem";
  testing::CommandResult result = RunCommand(Mount(mnt.path(), missing));
  EXPECT_EQ(result.exit_code, 2) << result.output;  // an invalid option: permanent
  EXPECT_THAT(result.output, HasSubstr("ca_file " + missing + " cannot be read"));
  EXPECT_FALSE(testing::IsMounted(mnt.path()));
}

}  // namespace
}  // namespace tensorfs
