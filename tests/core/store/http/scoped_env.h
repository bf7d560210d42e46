// ScopedEnv: sets or unsets an environment variable for one test and restores
// it afterwards. Not thread-safe (the environment is process-wide); use it on
// the test's main thread before starting other threads.
#ifndef TENSORFS_TESTS_CORE_STORE_HTTP_SCOPED_ENV_H_
#define TENSORFS_TESTS_CORE_STORE_HTTP_SCOPED_ENV_H_

#include <cstdlib>
#include <optional>
#include <string>

namespace tensorfs::testing {

class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_CORE_STORE_HTTP_SCOPED_ENV_H_
