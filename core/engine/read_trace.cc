#include "core/engine/read_trace.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <initializer_list>
#include <string>

namespace tensorfs {

StatusOr<std::unique_ptr<ReadTrace>> ReadTrace::Open(const std::string& path_asked) {
  std::string path = path_asked;
  for (size_t at = path.find("%p"); at != std::string::npos; at = path.find("%p", at)) {
    const std::string pid = std::to_string(::getpid());
    path.replace(at, 2, pid);
    at += pid.size();
  }
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return InvalidArgumentError("cannot write the read trace " + path + ": " + std::strerror(errno));
  }
  std::fputs("# tensorfs read trace 4\n", file);
  return std::unique_ptr<ReadTrace>(new ReadTrace(file));
}

ReadTrace::~ReadTrace() { std::fclose(file_); }

void ReadTrace::Record(const TracedRead& read) {
  const std::string line = FormatTracedRead(read);
  MutexLock lock(mu_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

std::string FormatTracedRead(const TracedRead& read) {
  std::string flags = read.prefetch_call ? "p" : read.kernel ? "k" : "v";
  if (read.delivered) flags += 'd';
  std::string within;
  if (read.within) {
    flags += 'w';
    within = std::to_string(read.within->offset) + "+" + std::to_string(read.within->length) + " ";
  }
  std::string reader = std::to_string(read.reader);
  if (read.process != 0 || read.thread != 0) reader += "/" + std::to_string(read.process);
  if (read.thread != 0) reader += "/" + std::to_string(read.thread);
  return reader + " " + std::to_string(read.offset) + " " + std::to_string(read.length) + " " +
         flags + " " + within + read.object + "\n";
}

StatusOr<std::vector<TracedRead>> ParseReadTrace(std::string_view text) {
  std::vector<TracedRead> reads;
  size_t line_number = 0;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    TracedRead read;
    auto bad = [&] { return InvalidArgumentError("read trace line " + std::to_string(line_number) + " is malformed: " +
                                                 std::string(line)); };
    // A number, then a space; with `more`, optionally "/" and another, as
    // many times as `more` has places.
    auto number = [&](uint64_t* out, std::initializer_list<uint64_t*> more = {}) {
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos) return false;
      const char* const stop = line.data() + sp;
      std::from_chars_result r = std::from_chars(line.data(), stop, *out);
      for (uint64_t* next : more) {
        if (r.ec != std::errc() || r.ptr == stop || *r.ptr != '/') break;
        r = std::from_chars(r.ptr + 1, stop, *next);
      }
      line.remove_prefix(sp + 1);
      return r.ec == std::errc() && r.ptr == stop;
    };
    if (!number(&read.reader, {&read.process, &read.thread}) || !number(&read.offset) || !number(&read.length)) {
      return bad();
    }
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size()) return bad();
    const std::string_view flags = line.substr(0, sp);
    if (flags.front() != 'k' && flags.front() != 'v' && flags.front() != 'p') return bad();
    if (flags.find_first_not_of("kvpdw", 1) != std::string_view::npos) return bad();
    read.kernel = flags.front() == 'k';
    read.prefetch_call = flags.front() == 'p';
    read.delivered = flags.find('d') != std::string_view::npos;
    line.remove_prefix(sp + 1);
    if (flags.find('w') != std::string_view::npos) {
      const size_t plus = line.find('+');
      const size_t end = line.find(' ');
      if (plus == std::string_view::npos || end == std::string_view::npos || plus > end || end + 1 >= line.size()) {
        return bad();
      }
      ByteRange within;
      auto [a, ea] = std::from_chars(line.data(), line.data() + plus, within.offset);
      auto [b, eb] = std::from_chars(line.data() + plus + 1, line.data() + end, within.length);
      if (ea != std::errc() || a != line.data() + plus || eb != std::errc() || b != line.data() + end) return bad();
      read.within = within;
      line.remove_prefix(end + 1);
    }
    read.object = std::string(line);
    reads.push_back(std::move(read));
  }
  return reads;
}

}  // namespace tensorfs
