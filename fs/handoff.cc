#include "fs/handoff.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace tensorfs {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

StatusOr<Handoff> ParseMessage(const std::string& bytes) {
  const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgumentError("the message is not a JSON object; send {\"source\": \"gs://bucket/prefix\", "
                                "\"options\": \"name=value,...\"}");
  }
  Handoff h;
  auto source = j.find("source");
  if (source == j.end() || !source->is_string() || source->get<std::string>().empty()) {
    return InvalidArgumentError("the message has no \"source\" string (a local directory or gs://bucket[/prefix])");
  }
  h.source = source->get<std::string>();
  if (auto options = j.find("options"); options != j.end() && !options->is_null()) {
    if (options->is_string()) {
      h.options = options->get<std::string>();
    } else if (options->is_array()) {
      for (const nlohmann::json& item : *options) {
        if (!item.is_string()) {
          return InvalidArgumentError("\"options\" must be a string or an array of \"name[=value]\" strings");
        }
        h.options += (h.options.empty() ? "" : ",") + OptionListItem(item.get<std::string>());
      }
    } else {
      return InvalidArgumentError("\"options\" must be a string or an array of \"name[=value]\" strings");
    }
  }
  return h;
}

// Writes `text` (one line) to `path` whole: a reader never sees half of it.
void WriteErrorFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "we");
  if (f == nullptr) {
    spdlog::error("cannot write {}: {}", tmp, ErrnoText(errno));
    return;
  }
  std::fprintf(f, "%s\n", text.c_str());
  const bool ok = std::fclose(f) == 0;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) spdlog::error("cannot write {}: {}", path, ErrnoText(errno));
}

std::vector<std::string> SocketsIn(const std::string& dir) {
  std::vector<std::string> sockets;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st;
    if (::lstat(entry.path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) sockets.push_back(entry.path().string());
  }
  std::sort(sockets.begin(), sockets.end());
  return sockets;
}

// Relays a child's output to stderr, each line prefixed with the socket's
// name, and records a failure. Returns true if the child ended cleanly.
bool WatchChild(const ServingChild& child, const std::string& name, const std::string& error_file,
                ChildProcesses& children) {
  const ChildEnd end = WatchServingChild(child, children, [&name](const std::string& line) {
    std::fprintf(stderr, "[%s] %s\n", name.c_str(), line.c_str());
  });
  if (end.clean()) {
    spdlog::info("{}: the mount has ended", name);
    return true;
  }
  const std::string text = "tensorfs " + end.How() + (end.last_line.empty() ? "" : ": " + end.last_line);
  spdlog::error("{}: {}", name, text);
  WriteErrorFile(error_file, text);
  return false;
}

}  // namespace

StatusOr<Handoff> ReceiveHandoff(const std::string& path) {
  ASSIGN_OR_RETURN(DescriptorMessage message, ReceiveDescriptor(path));
  StatusOr<Handoff> handoff = ParseMessage(message.bytes);
  if (!handoff.ok()) {
    ::close(message.fd);
    return handoff.status();
  }
  handoff->fd = message.fd;
  return handoff;
}

int RunHandoff(const std::string& socket_dir, std::chrono::seconds wait) {
  struct stat st;
  if (::stat(socket_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "tensorfs: handoff: %s is not a directory\n", socket_dir.c_str());
    return 1;
  }
  std::vector<std::string> sockets = SocketsIn(socket_dir);
  const auto give_up = std::chrono::steady_clock::now() + wait;
  while (sockets.empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    sockets = SocketsIn(socket_dir);
  }
  if (sockets.empty()) {
    std::fprintf(stderr, "tensorfs: handoff: no socket appeared in %s within %lld s\n", socket_dir.c_str(),
                 static_cast<long long>(wait.count()));
    return 1;
  }

  // Signals go to one thread that passes them on; children get the old mask back.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  // Children is never destroyed: the signal thread may still use it at exit.
  auto* children = new ChildProcesses();
  std::thread([stop_signals, children] {
    while (true) {
      int sig = 0;
      if (sigwait(&stop_signals, &sig) != 0) continue;
      spdlog::info("handoff: passing signal {} to the mounts", sig);
      children->Signal(sig);
    }
  }).detach();

  bool all_ok = true;
  std::vector<std::thread> watchers;
  std::vector<size_t> started;  // indexes into sockets
  std::vector<char> results(sockets.size(), 0);
  for (size_t i = 0; i < sockets.size(); ++i) {
    const std::string& path = sockets[i];
    const std::string name = std::filesystem::path(path).filename().string();
    const std::string error_file = path + ".error";
    std::remove(error_file.c_str());  // a failure of an earlier run is not this one's
    StatusOr<Handoff> handoff = ReceiveHandoff(path);
    if (!handoff.ok()) {
      spdlog::error("{}: {}", name, handoff.status().message());
      WriteErrorFile(error_file, "handoff: " + handoff.status().message());
      all_ok = false;
      continue;
    }
    spdlog::info("{}: serving {} from descriptor {}", name, handoff->source, handoff->fd);
    StatusOr<ServingChild> child = StartServingChild(handoff->source, handoff->options, handoff->fd, old_mask);
    if (!child.ok()) {
      spdlog::error("{}: {}", name, child.status().message());
      WriteErrorFile(error_file, "handoff: cannot start tensorfs: " + child.status().message());
      all_ok = false;
      continue;
    }
    children->Add(child->pid);
    started.push_back(i);
    watchers.emplace_back([&results, i, child = *child, name, error_file, children] {
      results[i] = WatchChild(child, name, error_file, *children) ? 1 : 0;
    });
  }
  for (std::thread& t : watchers) t.join();
  for (size_t i : started) all_ok &= results[i] == 1;
  spdlog::info("handoff: every mount has ended");
  return all_ok ? 0 : 1;
}

}  // namespace tensorfs
