#include "core/util/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

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

// Errors to one sink, everything else to the other (a spdlog sink has only a
// lower bound). Thread-safe as its two sinks are.
class SplitSink : public spdlog::sinks::sink {
 public:
  SplitSink(spdlog::sink_ptr below_error, spdlog::sink_ptr errors)
      : below_error_(std::move(below_error)), errors_(std::move(errors)) {}
  void log(const spdlog::details::log_msg& msg) override {
    (msg.level >= spdlog::level::err ? errors_ : below_error_)->log(msg);
  }
  void flush() override {
    below_error_->flush();
    errors_->flush();
  }
  void set_pattern(const std::string& pattern) override {
    below_error_->set_pattern(pattern);
    errors_->set_pattern(pattern);
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    below_error_->set_formatter(formatter->clone());
    errors_->set_formatter(std::move(formatter));
  }

 private:
  const spdlog::sink_ptr below_error_;
  const spdlog::sink_ptr errors_;
};

void InstallLogger(std::shared_ptr<spdlog::logger> logger, std::string_view level) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<SyslogPriorityFlag>('*').set_pattern(LogPatternFor(DetectLogDestination()));
  logger->set_formatter(std::move(formatter));
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

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

void SetUpLogging(std::string_view level) { InstallLogger(spdlog::stderr_color_mt("tensorfs"), level); }

void SetUpSplitLogging(std::string_view level) {
  auto sink = std::make_shared<SplitSink>(std::make_shared<spdlog::sinks::stdout_color_sink_mt>(),
                                          std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  InstallLogger(std::make_shared<spdlog::logger>("tensorfs", std::move(sink)), level);
}

}  // namespace tensorfs
