// Micro-benchmarks of the per-file work tensorfs does before serving a byte:
// parsing and validating a safetensors header, and grouping its tensors into
// layers. Inputs come from the test-data generator: one shard of a Llama-shaped
// model with 111 blocks (1002 tensors, a ~100 KiB header), as a large real
// checkpoint's shard has.
//
//   micro_bench [--benchmark_filter=...] [--benchmark_min_time=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "core/safetensors/header.h"
#include "core/safetensors/layers.h"
#include "tests/support/checkpoint_gen.h"

namespace tensorfs {
namespace {

struct Input {
  std::string file_name;
  std::string json;  // the header bytes after the 8-byte length
  uint64_t file_size = 0;
  std::vector<std::string> tensor_names;  // storage order
};

const Input& TheInput() {
  static const Input input = [] {
    testing::ModelSpec spec;
    spec.arch = testing::Arch::kLlama;
    spec.layers = 111;  // 9 tensors a block, plus embeddings, final norm and head
    spec.hidden = 64;
    spec.intermediate = 128;
    spec.vocab = 256;
    spec.dtype = Dtype::BF16;
    StatusOr<testing::CheckpointPlan> plan = testing::PlanCheckpoint(spec, {.num_shards = 1});
    if (!plan.ok()) {
      std::fprintf(stderr, "micro_bench: %s\n", plan.status().ToString().c_str());
      std::abort();
    }
    const testing::ShardPlan& shard = plan->shards.front();
    Input in;
    in.file_name = shard.file_name;
    in.json = shard.header.substr(kHeaderLengthBytes);
    in.file_size = shard.file_size;
    for (const TensorInfo& t : shard.tensors) in.tensor_names.push_back(t.name);
    return in;
  }();
  return input;
}

void BM_ParseHeader(benchmark::State& state) {
  const Input& in = TheInput();
  const auto bytes = std::as_bytes(std::span(in.json));
  for (auto _ : state) {
    StatusOr<SafetensorsHeader> header = ParseHeader(in.file_name, bytes, in.file_size);
    if (!header.ok()) state.SkipWithError(header.status().ToString().c_str());
    benchmark::DoNotOptimize(header);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * in.json.size()));
  state.counters["tensors"] = static_cast<double>(in.tensor_names.size());
}
BENCHMARK(BM_ParseHeader)->Unit(benchmark::kMicrosecond);

// range(0): 0 for the built-in rules, 1 for an override regex.
void BM_GroupLayers(benchmark::State& state) {
  const Input& in = TheInput();
  StatusOr<LayerGrouper> grouper = LayerGrouper::Create(state.range(0) ? R"(^(model\.layers\.\d+\.))" : "");
  if (!grouper.ok()) {
    state.SkipWithError(grouper.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    std::vector<LayerGroup> groups = grouper->Group(in.tensor_names);
    benchmark::DoNotOptimize(groups);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * in.tensor_names.size()));
  state.counters["tensors"] = static_cast<double>(in.tensor_names.size());
}
BENCHMARK(BM_GroupLayers)->Arg(0)->Arg(1)->ArgName("override_regex")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tensorfs

BENCHMARK_MAIN();
