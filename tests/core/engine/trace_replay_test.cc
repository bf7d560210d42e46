// Replays the kernel's reads of the benchmark's loaders, recorded through a
// mount (tests/core/engine/traces, see README.md there), through the engine,
// and checks the range requests it makes against what the engine made before
// its state was kept per reader (`<trace>.base`, written by that engine), and
// against the requests it makes now (`<trace>.readers`), so a change of
// behaviour shows as a failing test and an updated file.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/core/engine/trace_replay.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fs = std::filesystem;

const fs::path kTraces = fs::path(TENSORFS_SOURCE_DIR) / "tests/core/engine/traces";

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> Lines(const std::vector<testing::ReplayedRequest>& requests) {
  std::vector<std::string> lines;
  for (const auto& r : requests) lines.push_back(r.ToString());
  return lines;
}

struct Totals {
  uint64_t requests = 0;
  uint64_t bytes = 0;
};

Totals TotalsOf(const std::vector<std::string>& lines) {
  Totals t;
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string read, object;
    uint64_t offset = 0, length = 0;
    in >> read >> object >> offset >> length;
    ++t.requests;
    t.bytes += length;
  }
  return t;
}

std::vector<fs::path> Traces() {
  std::vector<fs::path> traces;
  for (const auto& entry : fs::directory_iterator(kTraces)) {
    if (entry.path().extension() == ".trace") traces.push_back(entry.path());
  }
  std::sort(traces.begin(), traces.end());
  return traces;
}

class TraceReplayTest : public ::testing::Test {
 protected:
  TraceReplayTest() {
    auto files = testing::BuildCheckpointFiles(testing::TraceCheckpointSpec(),
                                               {.num_shards = testing::kTraceCheckpointShards});
    EXPECT_TRUE(files.ok());
    for (auto& [name, bytes] : *files) memory_.Put(name, bytes);
  }

  std::vector<std::string> Replay(const fs::path& trace, bool merge_readers) {
    StatusOr<std::vector<TracedRead>> reads = ParseReadTrace(Slurp(trace));
    EXPECT_TRUE(reads.ok()) << reads.status().ToString();
    if (!reads.ok()) return {};
    std::string error;
    std::vector<std::string> lines = Lines(testing::ReplayTrace(memory_, *reads, merge_readers, &error));
    EXPECT_EQ(error, "") << trace;
    return lines;
  }

  testing::MemoryStore memory_;
};

TEST_F(TraceReplayTest, TracesAreThere) { EXPECT_GE(Traces().size(), 13u) << kTraces; }

TEST(ReadTraceFormatTest, ViewReadsAndPrefetchesKeepTheirWithinRange) {
  const TracedRead read{.reader = 7, .offset = 4096, .length = 131072, .kernel = false, .delivered = true,
                        .within = ByteRange{2200, 8388608}, .object = "model 1.safetensors"};
  const TracedRead prefetch{.offset = 2200, .length = 8388608, .kernel = false, .prefetch_call = true,
                            .delivered = false, .within = ByteRange{2200, 8388608}, .object = "a.safetensors"};
  const TracedRead kernel{.reader = 3, .process = 4321, .offset = 0, .length = 4096, .object = "b.safetensors"};
  EXPECT_EQ(FormatTracedRead(read), "7 4096 131072 vdw 2200+8388608 model 1.safetensors\n");
  EXPECT_EQ(FormatTracedRead(prefetch), "0 2200 8388608 pw 2200+8388608 a.safetensors\n");
  EXPECT_EQ(FormatTracedRead(kernel), "3/4321 0 4096 kd b.safetensors\n");
  const TracedRead threaded{.reader = 3, .process = 4321, .thread = 4333, .offset = 0, .length = 4096,
                            .object = "b.safetensors"};
  EXPECT_EQ(FormatTracedRead(threaded), "3/4321/4333 0 4096 kd b.safetensors\n");
  StatusOr<std::vector<TracedRead>> threads = ParseReadTrace("3/4321/4333 0 4096 kd b.safetensors\n");
  ASSERT_TRUE(threads.ok()) << threads.status().message();
  EXPECT_EQ((*threads)[0].thread, 4333u);
  EXPECT_EQ((*threads)[0].process, 4321u);
  StatusOr<std::vector<TracedRead>> parsed = ParseReadTrace(
      "# tensorfs read trace 3\n" + FormatTracedRead(read) + FormatTracedRead(prefetch) + FormatTracedRead(kernel));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0].reader, 7u);
  EXPECT_EQ((*parsed)[0].process, 0u);
  EXPECT_EQ((*parsed)[2].reader, 3u);
  EXPECT_EQ((*parsed)[2].process, 4321u);
  EXPECT_EQ((*parsed)[0].object, "model 1.safetensors");
  EXPECT_EQ((*parsed)[0].within, (ByteRange{2200, 8388608}));
  EXPECT_FALSE((*parsed)[0].kernel);
  EXPECT_TRUE((*parsed)[1].prefetch_call);
  EXPECT_FALSE((*parsed)[1].delivered);
  EXPECT_EQ((*parsed)[2].within, std::nullopt);
  EXPECT_TRUE((*parsed)[2].kernel);
  EXPECT_TRUE((*parsed)[2].delivered);
}

TEST(ReadTraceFormatTest, AMalformedLineIsNamed) {
  for (const char* line : {"0 1 2 kw a.safetensors", "0 1 2 kw 5+x a.safetensors", "0 1 2 kdx a.safetensors",
                           "0 1 2 q a.safetensors", "0 1 2 pw 1+2", "3/ 1 2 k a.safetensors",
                           "3/x 1 2 k a.safetensors", "3 1/2 2 k a.safetensors"}) {
    StatusOr<std::vector<TracedRead>> parsed = ParseReadTrace(std::string("# tensorfs read trace 3\n") + line);
    ASSERT_FALSE(parsed.ok()) << line;
    EXPECT_NE(parsed.status().message().find("line 2"), std::string::npos) << parsed.status().ToString();
  }
}

// Several mounts on one machine (a sharded job's hosts) each write their own
// trace: "%p" in the path is the process id.
TEST(ReadTraceFormatTest, PercentPInThePathIsTheProcessId) {
  testing::TempDir dir;
  StatusOr<std::unique_ptr<ReadTrace>> trace = ReadTrace::Open(dir.path() + "/trace.%p.txt");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  (*trace)->Record(TracedRead{.reader = 1, .offset = 0, .length = 4096, .object = "a.safetensors"});
  trace->reset();
  const fs::path written = fs::path(dir.path()) / ("trace." + std::to_string(::getpid()) + ".txt");
  ASSERT_TRUE(fs::exists(written));
  EXPECT_EQ(Slurp(written), "# tensorfs read trace 4\n1 0 4096 kd a.safetensors\n");
}

// The reads of all readers taken as one reader's, as the engine took them
// before: the same requests as that engine made, request for request, or,
// where the engine has since changed for every reader alike, the requests in
// `<trace>.merged` (the differences listed and justified in traces/README.md).
TEST_F(TraceReplayTest, ReadsAsOneReaderMakeTheRequestsTheEngineMadeBefore) {
  for (const fs::path& trace : Traces()) {
    fs::path base = trace, merged = trace;
    base.replace_extension(".base");
    merged.replace_extension(".merged");
    if (fs::exists(merged)) base = merged;
    const std::vector<std::string> expected = Lines(Slurp(base));
    ASSERT_FALSE(expected.empty()) << base;
    EXPECT_EQ(Replay(trace, /*merge_readers=*/true), expected) << trace;
  }
}

// Readers told apart: the requests recorded in `<trace>.readers` (the
// differences from `.base` are listed and justified in traces/README.md), and
// no more than 1% more bytes fetched than before.
TEST_F(TraceReplayTest, ReadersToldApartMakeTheirRecordedRequestsAndFetchAtMostOnePercentMore) {
  for (const fs::path& trace : Traces()) {
    fs::path base = trace, readers = trace;
    base.replace_extension(".base");
    readers.replace_extension(".readers");
    const std::vector<std::string> got = Replay(trace, /*merge_readers=*/false);
    EXPECT_EQ(got, Lines(Slurp(readers))) << trace;
    // A reader's first read of a file it newly opened is no longer taken for
    // a whole-tensor reader's because another file's reader was one: at most
    // that read's bytes come twice (traces/README.md).
    const Totals now = TotalsOf(got), before = TotalsOf(Lines(Slurp(base)));
    EXPECT_LE(now.bytes, before.bytes + before.bytes / 100) << trace;
  }
}

// Traces of the qwen2 trace checkpoint read through a mount at its defaults
// (traces/qwen2; README.md in traces/ says how they were made), replayed with
// the mount's readahead policy, each reader's file opened before its first
// read (ReplayTrace's `opens`).
class Qwen2TraceReplayTest : public ::testing::Test {
 protected:
  Qwen2TraceReplayTest() {
    auto files = testing::BuildCheckpointFiles(testing::Qwen2TraceCheckpointSpec(),
                                               {.num_shards = testing::kQwen2TraceCheckpointShards});
    EXPECT_TRUE(files.ok());
    for (auto& [name, bytes] : *files) {
      if (name.ends_with(".safetensors")) file_bytes_ += bytes.size();
      memory_.Put(name, bytes);
    }
  }

  static std::vector<fs::path> Qwen2Traces() {
    std::vector<fs::path> traces;
    for (const auto& entry : fs::directory_iterator(kTraces / "qwen2")) {
      if (entry.path().extension() == ".trace") traces.push_back(entry.path());
    }
    std::sort(traces.begin(), traces.end());
    return traces;
  }

  std::vector<std::string> Replay(const fs::path& trace) {
    StatusOr<std::vector<TracedRead>> reads = ParseReadTrace(Slurp(trace));
    EXPECT_TRUE(reads.ok()) << reads.status().ToString();
    if (!reads.ok()) return {};
    std::string error;
    std::vector<std::string> lines = Lines(testing::ReplayTrace(
        memory_, *reads, /*merge_readers=*/false, &error, testing::MountDefaultsReplayOptions(), /*opens=*/true));
    EXPECT_EQ(error, "") << trace;
    return lines;
  }

  // The bytes the kernel read, each once.
  static uint64_t KernelBytes(const fs::path& trace) {
    StatusOr<std::vector<TracedRead>> reads = ParseReadTrace(Slurp(trace));
    EXPECT_TRUE(reads.ok()) << reads.status().ToString();
    if (!reads.ok()) return 0;
    std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> ranges;
    for (const TracedRead& r : *reads) ranges[r.object].emplace_back(r.offset, r.offset + r.length);
    uint64_t bytes = 0;
    for (auto& [object, list] : ranges) {
      std::sort(list.begin(), list.end());
      uint64_t covered_to = 0;
      for (auto [begin, end] : list) {
        begin = std::max(begin, covered_to);
        if (end > begin) bytes += end - begin;
        covered_to = std::max(covered_to, end);
      }
    }
    return bytes;
  }

  testing::MemoryStore memory_;
  uint64_t file_bytes_ = 0;  // of the checkpoint's safetensors files
};

TEST_F(Qwen2TraceReplayTest, TracesAreThere) { EXPECT_GE(Qwen2Traces().size(), 4u) << kTraces / "qwen2"; }

// The requests recorded in `<trace>.readers`.
TEST_F(Qwen2TraceReplayTest, ReadersMakeTheirRecordedRequests) {
  for (const fs::path& trace : Qwen2Traces()) {
    fs::path readers = trace;
    readers.replace_extension(".readers");
    EXPECT_EQ(Replay(trace), Lines(Slurp(readers))) << trace;
  }
}

// A whole-tensor loader's copies, in storage order or shuffled, have the
// kernel read around their first and last pages across the tensors' edges,
// as a slice reader's rows of a bias or a layer norm next to them do: they
// are still told for copies, and each byte of the files comes once.
TEST_F(Qwen2TraceReplayTest, WholeLoadersFetchEveryByteOnce) {
  for (const std::string name : {"load", "load_shuffled"}) {
    EXPECT_EQ(TotalsOf(Replay(kTraces / "qwen2" / (name + ".trace"))).bytes, file_bytes_) << name;
  }
}

// The last rank of 8, reading its rows in a shuffled order: its rows of the
// biases and layer norms next to a weight have the kernel read around the
// weight's first page and then its last, or it reads its rows of the weight
// (which end with it) before the kernel's readahead runs on past the bias's
// page into the weight's start. Neither is a copy of the weight: it fetches
// little more than the kernel reads (the files' heads, and the bytes read
// ahead of its first rows), where it fetched 2.2 and 6 times as much, the
// chunks of a weight taken for a whole copy, then every byte as a whole
// reader's.
TEST_F(Qwen2TraceReplayTest, LastRankShuffledFetchesLittleMoreThanTheKernelReads) {
  for (const std::string name : {"slice_shuffled_seed2_r7of8", "slice_shuffled_seed3_r7of8"}) {
    const fs::path trace = kTraces / "qwen2" / (name + ".trace");
    const uint64_t fetched = TotalsOf(Replay(trace)).bytes;
    const uint64_t kernel = KernelBytes(trace);
    ASSERT_GT(kernel, 0u) << name;
    EXPECT_LE(fetched * 10, kernel * 13) << name << ": " << fetched << " bytes fetched, the kernel read " << kernel;
  }
}

// Traces of readers that share one mount of the trace checkpoint (traces/
// shared; README.md in traces/ says how they were made), replayed as the
// mount serves them: its readahead policy, each reader's file opened before
// its first read, the shards' read order told. Eight processes each copying
// its rows r/8 of every tensor, and 32 threads of one process copying
// tensors out of one mapping per shard in a shuffled order, read the files
// whole together: each byte is fetched once, in few requests next to one
// whole loader's (the engine before this made 970 requests for the eight
// processes, and 67 of 1.01 times the files' bytes for the threads).
class SharedMountTraceReplayTest : public TraceReplayTest {
 protected:
  SharedMountTraceReplayTest() {
    auto files = testing::BuildCheckpointFiles(testing::TraceCheckpointSpec(),
                                               {.num_shards = testing::kTraceCheckpointShards});
    EXPECT_TRUE(files.ok());
    for (auto& [name, bytes] : *files) {
      if (name.ends_with(".safetensors")) file_bytes_ += bytes.size();
    }
  }
  std::vector<std::string> ReplayShared(const std::string& name) {
    StatusOr<std::vector<TracedRead>> reads = ParseReadTrace(Slurp(kTraces / "shared" / (name + ".trace")));
    EXPECT_TRUE(reads.ok()) << reads.status().ToString();
    if (!reads.ok()) return {};
    std::string error;
    std::vector<std::string> lines =
        Lines(testing::ReplayTrace(memory_, *reads, /*merge_readers=*/false, &error,
                                   testing::MountDefaultsReplayOptions(), /*opens=*/true, /*read_order=*/true));
    EXPECT_EQ(error, "") << name;
    return lines;
  }
  uint64_t file_bytes_ = 0;
};

TEST_F(SharedMountTraceReplayTest, ReadersMakeTheirRecordedRequests) {
  for (const std::string name : {"load", "procs8_slices", "threads32"}) {
    EXPECT_EQ(ReplayShared(name), Lines(Slurp(kTraces / "shared" / (name + ".readers")))) << name;
  }
}

TEST_F(SharedMountTraceReplayTest, ReadersTogetherFetchEachByteOnceInFewRequests) {
  // One loader fetches the files' bytes once (and the index the mount reads).
  const Totals load = TotalsOf(ReplayShared("load"));
  EXPECT_GE(load.bytes, file_bytes_);
  EXPECT_LE(load.bytes, file_bytes_ + file_bytes_ / 100);
  // A checkpoint of 70 MiB is 18 requests for one loader: the eight ranks'
  // first rows, and the threads' first pages, before their reads together
  // show the files read whole, are a larger part of it than of a larger one
  // (bench W12/W13 measure those).
  const std::pair<std::string, uint64_t> bounds[] = {{"procs8_slices", 5}, {"threads32", 6}};
  for (const auto& [name, halves] : bounds) {
    const Totals t = TotalsOf(ReplayShared(name));
    EXPECT_EQ(t.bytes, load.bytes) << name << ": each byte once";
    EXPECT_LE(2 * t.requests, halves * load.requests) << name << ": " << t.requests << " requests, one loader "
                                                    << load.requests;
  }
}

}  // namespace
}  // namespace tensorfs
