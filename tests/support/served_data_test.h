// The fixture pattern of a suite whose tests read generated data through the
// GCS test server:
//
//   class MySuite : public testing::ServedDataTest<MySuite> {
//    public:
//     static constexpr char kDataKey[] = "my_suite/llama-2x256";  // names what MakeData writes
//     static void MakeData(const std::string& dir);  // buckets are its subdirectories
//     // Optional: more server flags, e.g. TLS with a certificate MakeData wrote.
//     static std::vector<std::string> ServerArgs(const std::string& dir);
//   };
//   TEST_F(MySuite, ...) { ... server_->endpoint() ... Src("bucket/file") ... }
//
// The data is made once per test run (SharedData, test_util.h) and is
// read-only: a test that changes objects makes its own copy. Each test process
// (ctest runs one test per process) starts one server over it, and each test
// finds that server running, without faults or link shaping, with its
// counters reset.
#ifndef TENSORFS_TESTS_SUPPORT_SERVED_DATA_TEST_H_
#define TENSORFS_TESTS_SUPPORT_SERVED_DATA_TEST_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/gcs_test_server.h"
#include "tests/support/test_util.h"

namespace tensorfs::testing {

template <typename Suite>
class ServedDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = SharedData(Suite::kDataKey, &Suite::MakeData);
    std::vector<std::string> args;
    if constexpr (requires { Suite::ServerArgs(data_dir_); }) args = Suite::ServerArgs(data_dir_);
    std::string error;
    server_ = GcsTestServer::Start({.data_dir = data_dir_, .extra_args = args}, &error);
    ASSERT_NE(server_, nullptr) << error;
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the server did not start (see the suite's set-up)";
    if (!server_->running()) {
      ASSERT_TRUE(server_->Restart()) << server_->last_error();
    }
    ASSERT_TRUE(server_->ClearFaults()) << server_->last_error();
    ASSERT_TRUE(server_->SetShaping(0, 0, 0)) << server_->last_error();
    ASSERT_TRUE(server_->ResetStats()) << server_->last_error();
  }

  // Where `rel` ("bucket/name") is in the served data.
  static std::string Src(const std::string& rel) { return data_dir_ + "/" + rel; }

  inline static std::string data_dir_;
  inline static std::unique_ptr<GcsTestServer> server_;
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_SERVED_DATA_TEST_H_
