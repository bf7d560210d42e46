// engine_trace_replay TRACE [--merge-readers]: replays a read trace through the
// engine (see trace_replay.h) and prints the range requests it made, one a
// line, for the expected-request files next to the traces.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/core/engine/trace_replay.h"

int main(int argc, char** argv) {
  using namespace tensorfs;
  if (argc < 2) {
    std::fprintf(stderr, "usage: engine_trace_replay TRACE [--merge-readers]\n");
    return 2;
  }
  const bool merge = argc > 2 && std::string(argv[2]) == "--merge-readers";
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  StatusOr<std::vector<TracedRead>> reads = ParseReadTrace(text.str());
  if (!reads.ok()) {
    std::fprintf(stderr, "%s\n", reads.status().ToString().c_str());
    return 1;
  }
  testing::MemoryStore memory;
  auto files = testing::BuildCheckpointFiles(testing::TraceCheckpointSpec(),
                                             {.num_shards = testing::kTraceCheckpointShards});
  if (!files.ok()) return 1;
  for (auto& [name, bytes] : *files) memory.Put(name, bytes);
  std::string error;
  for (const auto& r : testing::ReplayTrace(memory, *reads, merge, &error)) std::printf("%s\n", r.ToString().c_str());
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  return 0;
}
