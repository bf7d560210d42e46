#include "core/util/logging.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace tensorfs {
namespace {

// Sets (or unsets) an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string DevIno(int fd) {
  struct stat st;
  EXPECT_EQ(::fstat(fd, &st), 0);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

TEST(LoggingTest, TimestampOnlyOutsideSystemd) {
  EXPECT_EQ(LogPatternFor(LogDestination::kTerminal).rfind("%Y-%m-%dT%H:%M:%S", 0), 0u);
  EXPECT_EQ(LogPatternFor(LogDestination::kSystemd).find("%Y"), std::string::npos);
  EXPECT_EQ(LogPatternFor(LogDestination::kSystemd).find("%H"), std::string::npos);
  EXPECT_EQ(LogPatternFor(LogDestination::kJournal).find("%Y"), std::string::npos);
  EXPECT_EQ(LogPatternFor(LogDestination::kJournal).rfind("%*", 0), 0u) << "the priority prefix comes first";
}

TEST(LoggingTest, SyslogPrioritiesForJournald) {
  EXPECT_EQ(SyslogPriorityPrefix("critical"), "<2>");
  EXPECT_EQ(SyslogPriorityPrefix("error"), "<3>");
  EXPECT_EQ(SyslogPriorityPrefix("warning"), "<4>");
  EXPECT_EQ(SyslogPriorityPrefix("info"), "<6>");
  EXPECT_EQ(SyslogPriorityPrefix("debug"), "<7>");
  EXPECT_EQ(SyslogPriorityPrefix("trace"), "<7>");
}

TEST(LoggingTest, DestinationFollowsTheEnvironment) {
  ScopedEnv no_notify("NOTIFY_SOCKET", std::nullopt);
  {
    ScopedEnv no_journal("JOURNAL_STREAM", std::nullopt);
    EXPECT_EQ(DetectLogDestination(), LogDestination::kTerminal);
  }
  {
    ScopedEnv notify("NOTIFY_SOCKET", "/run/systemd/notify");
    ScopedEnv no_journal("JOURNAL_STREAM", std::nullopt);
    EXPECT_EQ(DetectLogDestination(), LogDestination::kSystemd);
  }
  {
    // JOURNAL_STREAM inherited, but stderr was redirected elsewhere.
    ScopedEnv journal("JOURNAL_STREAM", "1:1");
    EXPECT_EQ(DetectLogDestination(), LogDestination::kSystemd);
  }
  {
    ScopedEnv journal("JOURNAL_STREAM", DevIno(STDERR_FILENO));
    EXPECT_EQ(DetectLogDestination(), LogDestination::kJournal);
  }
}

TEST(LoggingTest, JournalStreamMatchesOnlyTheNamedFile) {
  char path[] = "/tmp/tensorfs-logging-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  int other = ::open("/dev/null", O_WRONLY);
  {
    ScopedEnv journal("JOURNAL_STREAM", DevIno(fd));
    EXPECT_TRUE(FdIsJournalStream(fd));
    EXPECT_FALSE(FdIsJournalStream(other));
  }
  for (const char* bad : {"", "garbage", "1", "1:2:3"}) {
    ScopedEnv journal("JOURNAL_STREAM", std::string(bad));
    EXPECT_FALSE(FdIsJournalStream(fd)) << bad;
  }
  ::close(other);
  ::close(fd);
  ::unlink(path);
}

}  // namespace
}  // namespace tensorfs
