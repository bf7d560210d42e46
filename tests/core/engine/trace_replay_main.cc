// engine_trace_replay TRACE [--merge-readers] [--checkpoint DIR] [--shard R/N] [--mount-defaults] [--read-order]
//                     [--cache-size BYTES] [--chunk-size BYTES] [--prefetch-window BYTES] [--debug]:
// replays a read trace through the engine (see trace_replay.h) and prints the
// range requests it made, one a line, for the expected-request files next to
// the traces. --checkpoint: the objects are DIR's files (a trace recorded on
// another checkpoint than the traces' own, tensorfs-testdata's output say);
// --shard R/N: the engine of a mount given -o shard=R/N; --mount-defaults:
// the readahead policy of a mount at its defaults applied, each reader's file
// opened before its first read (a trace recorded at a mount's defaults, not
// at a fixed readahead); --read-order: the engine told the read order of the
// trace's safetensors files (their names in order), as a mount tells it of a
// checkpoint's shards; --cache-size BYTES: the cache a mount given -o
// cache_size= has; --chunk-size, --prefetch-window BYTES: those of a mount
// given -o chunk_size=, prefetch_window=; --debug: the engine's debug log
// (what it learned of each reader) on stdout.
#include <spdlog/spdlog.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/core/engine/trace_replay.h"
#include "tests/support/mount_fixture.h"

int main(int argc, char** argv) {
  using namespace tensorfs;
  bool merge = false;
  bool mount_defaults = false;
  bool read_order = false;
  uint64_t cache_size = 0;
  std::string checkpoint;
  std::string trace;
  EngineOptions options = tensorfs::testing::TraceReplayOptions();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--merge-readers") {
      merge = true;
    } else if (arg == "--mount-defaults") {
      mount_defaults = true;
    } else if (arg == "--read-order") {
      read_order = true;
    } else if (arg == "--cache-size" && i + 1 < argc) {
      cache_size = std::stoull(argv[++i]);
    } else if (arg == "--chunk-size" && i + 1 < argc) {
      options.chunk_size = std::stoull(argv[++i]);
    } else if (arg == "--prefetch-window" && i + 1 < argc) {
      options.prefetch_window = std::stoull(argv[++i]);
    } else if (arg == "--debug") {
      spdlog::set_level(spdlog::level::debug);
    } else if (arg == "--checkpoint" && i + 1 < argc) {
      checkpoint = argv[++i];
    } else if (arg == "--shard" && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%" SCNu64 "/%" SCNu64, &options.shard_rank, &options.shard_world) == 2 &&
               options.shard_rank < options.shard_world) {
      options.readahead = ReadaheadPolicy::ForMount(false, 0, options.shard_world);
      ++i;
    } else if (trace.empty() && !arg.starts_with("--")) {
      trace = arg;
    } else {
      trace.clear();
      break;
    }
  }
  if (trace.empty()) {
    std::fprintf(stderr, "usage: engine_trace_replay TRACE [--merge-readers] [--checkpoint DIR] [--shard R/N] "
                         "[--mount-defaults] [--read-order] [--cache-size BYTES] [--chunk-size BYTES] "
                         "[--prefetch-window BYTES] [--debug]\n");
    return 2;
  }
  StatusOr<std::vector<TracedRead>> reads = ParseReadTrace(tensorfs::testing::ReadWhole(trace));
  if (!reads.ok()) {
    std::fprintf(stderr, "%s\n", reads.status().ToString().c_str());
    return 1;
  }
  tensorfs::testing::MemoryStore memory;
  if (!checkpoint.empty()) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(checkpoint, error)) {
      if (entry.is_regular_file()) memory.Put(entry.path().filename().string(), tensorfs::testing::ReadWhole(entry.path()));
    }
    if (error) {
      std::fprintf(stderr, "cannot list %s: %s\n", checkpoint.c_str(), error.message().c_str());
      return 1;
    }
  } else {
    auto files = tensorfs::testing::BuildCheckpointFiles(tensorfs::testing::TraceCheckpointSpec(),
                                               {.num_shards = tensorfs::testing::kTraceCheckpointShards});
    if (!files.ok()) return 1;
    for (auto& [name, bytes] : *files) memory.Put(name, bytes);
  }
  // -o shard= sets the policy's values itself (above).
  if (mount_defaults && options.shard_world == 0) {
    options.readahead = tensorfs::testing::MountDefaultsReplayOptions().readahead;
  }
  if (cache_size != 0) options.cache_size = cache_size;
  std::string error;
  for (const auto& r : tensorfs::testing::ReplayTrace(memory, *reads, merge, &error, options, mount_defaults, read_order)) {
    std::printf("%s\n", r.ToString().c_str());
  }
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  return 0;
}
