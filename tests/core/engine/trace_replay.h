// Replays a read trace (see core/engine/read_trace.h) through a ReadEngine over
// a store that records its range requests, one read at a time, letting the
// engine settle (no fetch queued or running) after each, with one fetch at a
// time: the requests it makes are then the same on every run. Shared by
// trace_replay_test and the engine_trace_replay tool that writes the expected
// requests.
#ifndef TENSORFS_TESTS_CORE_ENGINE_TRACE_REPLAY_H_
#define TENSORFS_TESTS_CORE_ENGINE_TRACE_REPLAY_H_

#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/engine/read_engine.h"
#include "core/engine/read_trace.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/controlled_store.h"
#include "tests/support/memory_store.h"

namespace tensorfs::testing {

// The checkpoint the traces were recorded on: tensorfs-testdata --arch llama
// --layers 4 --hidden 512 --intermediate 1536 --vocab 4096 --dtype f32 --shards 2.
inline ModelSpec TraceCheckpointSpec() {
  return ModelSpec{.arch = Arch::kLlama, .layers = 4, .hidden = 512, .intermediate = 1536, .vocab = 4096,
                   .dtype = Dtype::F32};
}
inline constexpr int kTraceCheckpointShards = 2;

// The checkpoint of the traces in traces/qwen2: tensorfs-testdata --arch qwen2
// --layers 2 --hidden 512 --intermediate 1536 --vocab 1024 --dtype f32 --shards 2.
inline ModelSpec Qwen2TraceCheckpointSpec() {
  return ModelSpec{.arch = Arch::kQwen2, .layers = 2, .hidden = 512, .intermediate = 1536, .vocab = 1024,
                   .dtype = Dtype::F32};
}
inline constexpr int kQwen2TraceCheckpointShards = 2;

// The engine's options as a mount has them by default, with one fetch at a time.
inline EngineOptions TraceReplayOptions() {
  EngineOptions options;
  options.max_fetches = 1;
  return options;
}

// One range request, made while read `read` (its index in the trace) or the
// prefetches it started ran: "<read> <object> <offset> <length>".
struct ReplayedRequest {
  size_t read = 0;
  std::string object;
  uint64_t offset = 0;
  uint64_t length = 0;
  auto operator<=>(const ReplayedRequest&) const = default;
  std::string ToString() const {
    return std::to_string(read) + " " + object + " " + std::to_string(offset) + " " + std::to_string(length);
  }
};

// Names the reader (and its process, for an engine that groups readers by
// it), for an engine that tells readers apart.
template <typename Hints>
void SetReader(Hints& hints, const TracedRead& r) {
  if constexpr (requires { hints.reader.value; }) hints.reader.value = r.reader;
  if constexpr (requires { hints.reader.process; }) hints.reader.process = r.process;
  if constexpr (requires { hints.reader.thread; }) hints.reader.thread = r.thread;
}

// Makes the read `r` of `object` and checks it returns the bytes `memory`
// holds; returns what went wrong, or nothing.
inline std::string ReplayRead(ReadEngine& engine, MemoryStore& memory, const ObjectInfo& object, const TracedRead& r,
                              bool merge_readers) {
  ReadHints hints;
  hints.prefetch = r.kernel;
  hints.delivered = r.delivered;
  hints.within = r.within;
  if (!merge_readers) SetReader(hints, r);
  std::promise<StatusOr<ReadResult>> promise;
  engine.Read(object, r.offset, r.length, [&](StatusOr<ReadResult> x) { promise.set_value(std::move(x)); }, hints);
  StatusOr<ReadResult> result = promise.get_future().get();
  if (!result.ok()) return result.status().ToString();
  std::string expected(std::min<uint64_t>(r.length, object.size > r.offset ? object.size - r.offset : 0), '\0');
  if (!expected.empty() &&
      !memory.Read(object.id(), r.offset, std::as_writable_bytes(std::span(expected.data(), expected.size()))).ok()) {
    return "the store cannot read it";
  }
  std::string got;
  for (auto p : result->pieces) got.append(reinterpret_cast<const char*>(p.data()), p.size());
  if (got != expected) return "it returned other bytes than the source";
  return "";
}

// TraceReplayOptions() as a mount at its defaults has them: the readahead
// policy's values (readahead_policy.h), each file opened at the one its
// process's readers call for (see ReplayTrace's `opens`).
inline EngineOptions MountDefaultsReplayOptions() {
  EngineOptions options = TraceReplayOptions();
  options.readahead = ReadaheadPolicy::ForMount(/*explicit_read_ahead=*/false, 0, options.shard_world);
  return options;
}

// Replays `reads`; `merge_readers`: as if every read named no reader (the
// engine before readers were told apart saw them so). `opens`: the engine
// applies its readahead policy as a mount does (a sink takes its values) and
// each reader opens its file (ReadEngine::Opening) just before its first read
// of it (a trace records no opens), so that the engine takes each file to be
// read at the readahead a mount would have opened it with: for traces
// recorded at a mount's defaults, replayed with MountDefaultsReplayOptions().
// `read_order`: the engine is told the safetensors files the trace reads, in
// the order of their names, as the read order of their checkpoint
// (ReadEngine::SetReadOrder), as a mount tells it of a checkpoint's shards.
// Returns the requests, sorted within each read; a read that fails or returns
// other bytes than `memory` holds is returned in *error.
inline std::vector<ReplayedRequest> ReplayTrace(MemoryStore& memory, const std::vector<TracedRead>& reads,
                                                bool merge_readers, std::string* error,
                                                const EngineOptions& options = TraceReplayOptions(),
                                                bool opens = false, bool read_order = false) {
  ControlledStore store(memory, /*hold=*/false);
  Metrics metrics;
  ReadEngine engine(store, options, metrics);
  if (opens) engine.SetReadaheadSink([](uint64_t) {});
  if (read_order) {
    std::set<std::string> names;
    for (const TracedRead& r : reads) {
      if (r.object.ends_with(".safetensors")) names.insert(r.object);
    }
    std::vector<ObjectInfo> shards;
    for (const std::string& name : names) {
      if (StatusOr<ObjectInfo> info = memory.Stat(name); info.ok()) shards.push_back(*info);
    }
    engine.SetReadOrder(shards);
  }
  std::set<std::pair<uint64_t, std::string>> opened;  // (reader, object)
  std::vector<ReplayedRequest> out;
  size_t seen = 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    const TracedRead& r = reads[i];
    StatusOr<ObjectInfo> object = memory.Stat(r.object);
    if (!object.ok()) {
      *error = "read " + std::to_string(i) + ": " + object.status().ToString();
      return out;
    }
    if (opens && r.kernel && r.reader != 0 && !merge_readers && opened.emplace(r.reader, r.object).second) {
      engine.Opening(r.object, ReaderId{.value = r.reader, .process = r.process});
    }
    if (r.prefetch_call) {
      engine.Prefetch(*object, ByteRange{r.offset, r.length}, r.within);
    } else if (std::string failure = ReplayRead(engine, memory, *object, r, merge_readers); !failure.empty()) {
      *error = "read " + std::to_string(i) + ": " + failure;
      return out;
    }
    for (int waited = 0; !engine.Idle(); ++waited) {
      if (waited > 600000) {  // 60 s: a hang, not a slow machine
        *error = "the engine did not settle after read " + std::to_string(i);
        return out;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    const std::vector<RecordedRead> requests = store.reads();
    const size_t begin = out.size();
    for (; seen < requests.size(); ++seen) {
      out.push_back(ReplayedRequest{i, requests[seen].object, requests[seen].offset, requests[seen].length});
    }
    std::sort(out.begin() + static_cast<std::ptrdiff_t>(begin), out.end());
  }
  return out;
}

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_CORE_ENGINE_TRACE_REPLAY_H_
