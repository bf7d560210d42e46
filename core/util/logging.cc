#include "core/util/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace tensorfs {
namespace {

bool EnvSet(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

// "%*": the syslog priority of the line's level, for journald.
class SyslogPriorityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    spdlog::string_view_t name = spdlog::level::to_string_view(msg.level);
    std::string_view prefix = SyslogPriorityPrefix(std::string_view(name.data(), name.size()));
    dest.append(prefix.data(), prefix.data() + prefix.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<SyslogPriorityFlag>(); }
};

}  // namespace

bool FdIsJournalStream(int fd) {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  unsigned long long dev = 0, ino = 0;
  char tail = 0;
  if (std::sscanf(stream, "%llu:%llu%c", &dev, &ino, &tail) != 2) return false;
  return dev == static_cast<unsigned long long>(st.st_dev) && ino == static_cast<unsigned long long>(st.st_ino);
}

LogDestination DetectLogDestination() {
  if (FdIsJournalStream(STDERR_FILENO)) return LogDestination::kJournal;
  if (EnvSet("NOTIFY_SOCKET") || EnvSet("JOURNAL_STREAM")) return LogDestination::kSystemd;
  return LogDestination::kTerminal;
}

std::string LogPatternFor(LogDestination destination) {
  switch (destination) {
    case LogDestination::kTerminal:
      return "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v";
    case LogDestination::kSystemd:
      return "%l %v";
    case LogDestination::kJournal:
      return "%*%l %v";
  }
  return "%l %v";
}

std::string_view SyslogPriorityPrefix(std::string_view level) {
  if (level == "critical") return "<2>";
  if (level == "error") return "<3>";
  if (level == "warning") return "<4>";
  if (level == "info") return "<6>";
  return "<7>";  // debug, trace
}

void SetUpLogging(std::string_view level) {
  auto logger = spdlog::stderr_color_mt("tensorfs");
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<SyslogPriorityFlag>('*').set_pattern(LogPatternFor(DetectLogDestination()));
  logger->set_formatter(std::move(formatter));
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

}  // namespace tensorfs
