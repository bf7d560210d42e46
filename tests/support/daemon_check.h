// How a test checks that a tensorfs it started ended as README promises: the
// rules shared by the test sandbox (sandbox_main.cc: every tensorfs a test
// leaves to it), the mount fixture (TensorfsMount: the ones it starts and
// stops itself) and tests/support/daemon_check.py (the Python tests' twin).
//
//   - It ends with exit status 0 after an unmount, SIGINT or SIGTERM. Any
//     other end fails the test, unless the test declared it (DeclareDaemonEnd).
//   - It ends within kHangSeconds of being asked to; otherwise it hangs, and
//     the failure shows its threads' stacks (StacksOf) and its log.
//   - It writes no sanitizer report (SanitizerReports): under the sandbox,
//     ASAN_OPTIONS and UBSAN_OPTIONS carry log_path=$TENSORFS_TEST_SANDBOX/
//     sanitizer, so a report lands in sanitizer.PID, whatever the process's
//     stderr was (a background mount's is gone once it detaches).
//
// Thread-safety: plain functions; DeclareDaemonEnd appends one line with one
// write(2), so concurrent callers do not interleave.
#ifndef TENSORFS_TESTS_SUPPORT_DAEMON_CHECK_H_
#define TENSORFS_TESTS_SUPPORT_DAEMON_CHECK_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace tensorfs::testing {

// How long anything a test waits for may take before it counts as a hang: far
// beyond what a loaded machine needs, never a measure of speed.
inline constexpr int kHangSeconds = 60;

// Whether a process named `comm` (/proc/PID/comm) is a tensorfs: the binary,
// or the binary run as mount(8)'s helper or as Mountpoint's mount-s3.
bool IsTensorfsComm(const std::string& comm);

// "exit 0", "signal 9 (Killed)": a waitpid() status in words.
std::string DescribeWaitStatus(int status);

// The status waitpid() gives for a process killed by `sig`, or exiting with `code`.
int KilledBy(int sig);
int ExitedWith(int code);

// Where each thread of `pid` waits, for a hang's report: its kernel stack and,
// when gdb is installed, every thread's backtrace.
std::string StacksOf(pid_t pid);
// The mounts `pid` serves, as /proc/PID/mountinfo shows FUSE mounts.
std::string MountsOf(pid_t pid);

// The sanitizer reports written under the sandbox directory `dir` (all of
// them, or only process `pid`'s), each with the name of the file it is in.
std::vector<std::string> SanitizerReports(const std::string& dir, pid_t pid = -1);
// The sandbox's directory ("" when the test runs outside the sandbox).
std::string SandboxDir();

// Tells the sandbox that the tensorfs `pid` (of the test's PID namespace) is
// meant to end with `status` (as waitpid() gives it), e.g. KilledBy(SIGKILL)
// for a test that kills it on purpose. Without the sandbox, nothing.
void DeclareDaemonEnd(pid_t pid, int status);

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_DAEMON_CHECK_H_
