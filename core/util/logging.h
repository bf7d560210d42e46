// Logging set-up for the tensorfs command: one spdlog logger, "tensorfs", writing
// to stderr. Where the lines go decides how they look:
//
//  - a terminal or a file: "2025-01-31T12:00:00.123 info message" (with colour on
//    a terminal);
//  - under systemd (NOTIFY_SOCKET or JOURNAL_STREAM set): no timestamp, since
//    journald stamps each line itself;
//  - when stderr is the journal stream itself (JOURNAL_STREAM names stderr's
//    device and inode): each line also starts with its syslog priority, "<4>" for
//    a warning, which journald strips and records, so `journalctl -p warning`
//    works.
//
// Thread-safety: SetUpLogging() is called once, from main, before other threads
// start. The other functions are pure or read only the environment.
#ifndef TENSORFS_CORE_UTIL_LOGGING_H_
#define TENSORFS_CORE_UTIL_LOGGING_H_

#include <string>
#include <string_view>

namespace tensorfs {

enum class LogDestination {
  kTerminal,  // or a file: lines carry a timestamp
  kSystemd,   // run by systemd, stderr is not the journal: no timestamp
  kJournal,   // stderr is the journal stream: no timestamp, a "<N>" priority prefix
};

// Decides from NOTIFY_SOCKET, JOURNAL_STREAM and what stderr is.
LogDestination DetectLogDestination();

// True when JOURNAL_STREAM ("DEVICE:INODE") names the file open on `fd`.
bool FdIsJournalStream(int fd);

// The spdlog pattern for `destination`; "%*" is the syslog priority prefix flag.
std::string LogPatternFor(LogDestination destination);

// The "<N>" prefix journald understands, for an spdlog level name ("warning"
// -> "<4>"; "trace" and "debug" -> "<7>").
std::string_view SyslogPriorityPrefix(std::string_view spdlog_level_name);

// Creates the "tensorfs" stderr logger as the default one, at `level` (trace,
// debug, info, warn, error or off).
void SetUpLogging(std::string_view level);

// The same logger for a container's log collector, which tells errors by
// their stream: lines below error go to stdout, errors to stderr.
void SetUpSplitLogging(std::string_view level);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_LOGGING_H_
