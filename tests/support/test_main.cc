// The main() of every gtest binary of the suite (instead of gtest_main).
//
// Run as root to run tests, the binary first runs itself again under
// tensorfs-test-sandbox (sandbox_main.cc), which gives the test private
// mount, network and PID namespaces and checks that every tensorfs it
// started ended as it should. Listing the tests (gtest_discover_tests at
// build time) and runs with TENSORFS_TEST_NO_SANDBOX=1 (a debugger) skip that.
//
// A skipped test fails (SkipFails): on a machine that runs this suite (root,
// packaging/install-deps.sh done) a skip means a missing dependency, never a
// pass. The one exception is a test the kernel cannot run
// (NotRunForKernel, test_util.h): its skip stays a skip, whose "NOT RUN:"
// line the suite's summary lists apart.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

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

// Turns a skipped test into a failed one, with the reason it gave: the test
// is printed and counted as failed (gtest counts a test with a failure as
// failed, never as skipped), and ctest, which takes a "[  SKIPPED ]" line for
// a skip, never sees one.
class SkipFails : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& test) override {
    if (!test.result()->Skipped()) return;
    std::string why;
    for (int i = 0; i < test.result()->total_part_count(); ++i) {
      const ::testing::TestPartResult& part = test.result()->GetTestPartResult(i);
      if (part.skipped()) why = part.message();
    }
    if (why.rfind(tensorfs::testing::kNotRunPrefix, 0) == 0) return;  // the kernel lacks a feature
    ADD_FAILURE() << "the test skipped itself (" << why << "): a skip fails the suite, since on a machine that "
                  << "runs it (root, packaging/install-deps.sh done) a skip means something is missing";
  }
};

}  // namespace

int main(int argc, char** argv) {
  RunInSandbox(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  // After the printer: gtest calls the listeners' *End events in reverse
  // order, so this OnTestEnd runs before the printer's.
  ::testing::UnitTest::GetInstance()->listeners().Append(new SkipFails);
  return RUN_ALL_TESTS();
}
