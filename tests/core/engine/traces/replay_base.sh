#!/bin/bash
# Writes `<trace>.base` for every trace: the requests the engine as it was at
# commit cfe09c5 (before its state was kept per reader) makes for the trace.
# Builds engine_trace_replay against that engine's sources (taken from git,
# with an Idle() accessor added so the replay can let it settle after each
# read; nothing else changed) and the rest of BUILD_DIR's core library.
#
#   tests/core/engine/traces/replay_base.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
base=cfe09c5
out="$build/base-engine"
rm -rf "$out" && mkdir -p "$out/core/engine" "$out/obj"
for f in buffer_pool chunk chunk_cache chunk_plan read_engine slice_pattern; do
  for ext in h cc; do git -C "$root" show "$base:core/engine/$f.$ext" > "$out/core/engine/$f.$ext"; done
done
python3 - "$out/core/engine" <<'PY'
import sys
d = sys.argv[1]
h = open(d + "/read_engine.h").read()
h = h.replace("  Metrics& metrics() { return metrics_; }",
              "  Metrics& metrics() { return metrics_; }\n  bool Idle() EXCLUDES(mu_);")
h = h.replace("  std::deque<Job> prefetch_queue_ GUARDED_BY(mu_);",
              "  std::deque<Job> prefetch_queue_ GUARDED_BY(mu_);\n  int running_jobs_ GUARDED_BY(mu_) = 0;")
open(d + "/read_engine.h", "w").write(h)
c = open(d + "/read_engine.cc").read()
c = c.replace("      queue.pop_front();\n    }\n    RunJob(job);", "      queue.pop_front();\n      ++running_jobs_;\n    }\n    RunJob(job);")
c = c.replace("    ObjectState& state = objects_.at(job.object);\n    if (job.head) {",
              "    ObjectState& state = objects_.at(job.object);\n    --running_jobs_;\n    if (job.head) {")
c += """
namespace tensorfs {
bool ReadEngine::Idle() {
  MutexLock lock(mu_);
  return demand_queue_.empty() && prefetch_queue_.empty() && running_jobs_ == 0;
}
}  // namespace tensorfs
"""
open(d + "/read_engine.cc", "w").write(c)
PY
flags=(-DFMT_SHARED -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB "-DTENSORFS_SOURCE_DIR=\"$root\""
       -I"$out" -I"$root" -O2 -std=c++20)
objs=()
for f in "$out"/core/engine/*.cc "$root/core/engine/read_trace.cc" "$root/tests/core/engine/trace_replay_main.cc"; do
  o="$out/obj/$(basename "$f" .cc).o"
  ccache c++ "${flags[@]}" -c "$f" -o "$o"
  objs+=("$o")
done
c++ -o "$out/engine_trace_replay_base" "${objs[@]}" "$build/tests/support/libtensorfs_test_support.a" \
  "$build/core/libtensorfs_core.a" -lspdlog -lfmt -lcurl -lssl -lcrypto -lpthread
for trace in "$here"/*.trace; do
  "$out/engine_trace_replay_base" "$trace" > "${trace%.trace}.base"
  echo "$(basename "$trace"): $(wc -l < "${trace%.trace}.base") requests"
done
