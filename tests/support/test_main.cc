// The main() of every gtest binary of the suite (instead of gtest_main).
//
// Run as root to run tests, the binary first runs itself again under
// tensorfs-test-sandbox (sandbox_main.cc), which gives the test private
// mount, network and PID namespaces and checks that every tensorfs it
// started ended as it should. Listing the tests (gtest_discover_tests at
// build time) and runs with TENSORFS_TEST_NO_SANDBOX=1 (a debugger) skip that.
//
// A skipped test fails the run: on a machine that runs this suite (root,
// packaging/install-deps.sh done) a skip means a missing dependency, never a
// pass.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool Listing(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--gtest_list_tests", 18) == 0) return true;
  }
  return false;
}

void RunInSandbox(int argc, char** argv) {
  if (::geteuid() != 0 || Listing(argc, argv) || std::getenv("TENSORFS_TEST_SANDBOX") != nullptr) return;
  if (const char* off = std::getenv("TENSORFS_TEST_NO_SANDBOX"); off != nullptr && std::strcmp(off, "1") == 0) return;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  std::vector<char*> args = {const_cast<char*>(TENSORFS_TEST_SANDBOX_BINARY), self};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  RunInSandbox(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (unit.skipped_test_count() > 0) {
    std::fprintf(stderr, "%d test(s) skipped: a skip fails the suite (see the [  SKIPPED ] lines for why)\n",
                 unit.skipped_test_count());
    return 1;
  }
  return rc;
}
