// ScopedAwsEnvironment: the environment the AWS credential chain and S3Store
// read, made known for one test: every variable they read cleared, HOME
// pointing at a given (empty) directory so no ~/.aws of the machine is seen,
// and instance metadata disabled unless a test sets it up. Set() changes one
// more variable for the object's lifetime. Everything is restored on
// destruction, in reverse order.
//
// Thread-safety: none (the environment is process-wide); use it on the test's
// main thread before starting other threads or child processes.
#ifndef TENSORFS_TESTS_SUPPORT_AWS_ENV_H_
#define TENSORFS_TESTS_SUPPORT_AWS_ENV_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/core/store/http/scoped_env.h"

namespace tensorfs::testing {

class ScopedAwsEnvironment {
 public:
  explicit ScopedAwsEnvironment(const std::string& home) {
    for (const char* name :
         {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
          "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
          "AWS_ROLE_SESSION_NAME", "AWS_ENDPOINT_URL_STS", "AWS_STS_REGIONAL_ENDPOINTS", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
          "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
          "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_REGION",
          "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE",
          "KUBERNETES_SERVICE_HOST"}) {
      Set(name, std::nullopt);
    }
    Set("HOME", home);
    Set("AWS_EC2_METADATA_DISABLED", "true");
  }
  ~ScopedAwsEnvironment() {
    while (!envs_.empty()) envs_.pop_back();  // the last change first
  }
  ScopedAwsEnvironment(const ScopedAwsEnvironment&) = delete;
  ScopedAwsEnvironment& operator=(const ScopedAwsEnvironment&) = delete;

  // Sets (or with nullopt unsets) `name` until destruction.
  void Set(const std::string& name, std::optional<std::string> value) {
    envs_.push_back(std::make_unique<ScopedEnv>(name, std::move(value)));
  }

 private:
  std::vector<std::unique_ptr<ScopedEnv>> envs_;
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_AWS_ENV_H_
