// Micro-benchmarks of the per-file work tensorfs does before serving a byte:
// parsing and validating a safetensors header, and grouping its tensors into
// layers. Inputs come from the test-data generator: one shard of a Llama-shaped
// model with 111 blocks (1002 tensors, a ~100 KiB header), as a large real
// checkpoint's shard has.
//
// And headers far larger than any real shard's (see "Large headers" below):
// parse time per tensor as the count grows, and peak memory for 100 MB headers.
//
// And the per-byte work of the transformed views: quantizing (NF4, 8-bit
// blockwise, int8 rows) and casting. Each decodes source bytes into a float
// scratch buffer a chunk at a time and transforms it, as a read does;
// bytes_per_second counts SOURCE bytes, so it reads as source throughput on
// one core.
//
// And a whole view file read through the Namespace as the kernel reads it
// (128 KiB at a time, in order) from a checkpoint in memory, cold: the view
// reader, its transforms and the engine together, every source byte fetched
// and every segment computed once. Timed in CPU time of the whole process
// (every thread); bytes_per_second counts SOURCE bytes.
//
// And ggml's quantizers for the @gguf/ view (Q8_0, Q4_K, Q6_K): float32
// input bytes per second on one core.
//
// And the two copies a fetched byte takes (received into a chunk, then copied
// out in the reply), in user space: replied once its whole 8 MiB chunk is in,
// as the engine does, or each 1 MiB part as soon as it is in, while it may
// still be in the CPU's caches. bytes_per_second counts bytes delivered.
//
//   micro_bench [--benchmark_filter=...] [--benchmark_min_time=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <malloc.h>
#include <map>
#include <random>
#include <sys/mman.h>
#include <span>
#include <string>
#include <vector>

#include "core/engine/read_engine.h"
#include "core/engine/slice_pattern.h"
#include "core/gguf/ggml_quants.h"
#include "core/gguf/ggml_quants_paths.h"
#include "core/gguf/ggml_types.h"
#include "core/safetensors/header.h"
#include "core/safetensors/layers.h"
#include "core/views/quantize.h"
#include "core/vfs/namespace.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/gguf_checkpoints.h"
#include "tests/support/memory_store.h"

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

// ---- Large headers ----
//
// Headers far larger than a real shard's, as a careless or hostile file holds
// them: the parser must stay linear in the header's size and bounded in
// memory. BM_ParseManyTensors parses headers of N one-byte U8 tensors (the
// 400,000-tensor one is 30 MB); tensors_per_second should not fall as N grows.
// BM_HugeHeaderMemory parses 100 MB headers of four shapes and reports the
// parse's peak resident memory beyond the header's own bytes, as a multiple
// of the header's size (peak_over_header; the target is under 4).

// The JSON of `count` tensors shaped as the files of the mount test:
// {"model.layers.<i>.weight":{"dtype":"U8","shape":[1],"data_offsets":[i,i+1]},...}.
std::string ManyTensorJson(size_t count, size_t name_padding = 0) {
  std::string json = "{";
  json.reserve(count * (90 + name_padding));
  const std::string padding(name_padding, 'x');
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) json += ',';
    json += "\"model.layers.";
    json += padding;
    json += std::to_string(i) + ".weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
            std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  json += '}';
  return json;
}

void BM_ParseManyTensors(benchmark::State& state) {
  const size_t count = static_cast<size_t>(state.range(0));
  const std::string json = ManyTensorJson(count);
  const uint64_t file_size = kHeaderLengthBytes + json.size() + count;
  for (auto _ : state) {
    StatusOr<SafetensorsHeader> header = ParseHeader("many.safetensors", std::as_bytes(std::span(json)), file_size);
    if (!header.ok()) state.SkipWithError(header.status().ToString().c_str());
    benchmark::DoNotOptimize(header);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * json.size()));
  state.counters["tensors"] = static_cast<double>(count);
  state.counters["header_MB"] = static_cast<double>(json.size()) / 1e6;
  state.counters["tensors_per_second"] =
      benchmark::Counter(static_cast<double>(count), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ParseManyTensors)->Arg(1'000)->Arg(100'000)->Arg(400'000)->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()->UseRealTime();

// A field of /proc/self/status in bytes ("VmHWM", "VmRSS"), or -1.
int64_t ProcStatusBytes(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kib = -1;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') kib = std::atoll(line + len + 1);
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

// Makes VmHWM start again from the current resident size.
bool ResetPeakRss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

constexpr size_t kHugeHeaderBytes = 100'000'000;

// A header of about kHugeHeaderBytes, padded with spaces to exactly that.
std::string HugeHeader(int shape) {
  std::string json;
  switch (shape) {
    case 0: {  // as many tensors as the limit allows, with names long enough to fill 100 MB
      const size_t plain = ManyTensorJson(kMaxTensorsPerHeader).size();
      json = ManyTensorJson(kMaxTensorsPerHeader, (kHugeHeaderBytes - plain) / kMaxTensorsPerHeader);
      break;
    }
    case 1: {  // one shape of 50 M dimensions
      json = R"({"w":{"dtype":"U8","shape":[1)";
      while (json.size() < kHugeHeaderBytes - 64) json += ",1";
      json += R"(],"data_offsets":[0,1]}})";
      break;
    }
    case 2: {  // metadata of one 99 MB value
      json = R"({"__metadata__":{"k":")" + std::string(kHugeHeaderBytes - 64, 'v') + "\"}}";
      break;
    }
    case 3: {  // one tensor with an unknown key holding 100 MB of numbers
      json = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[1)";
      while (json.size() < kHugeHeaderBytes - 64) json += ",1234567";
      json += "]}}";
      break;
    }
  }
  if (json.size() < kHugeHeaderBytes) json.append(kHugeHeaderBytes - json.size(), ' ');
  return json;
}

// range(0): 0 tensors at the limit, 1 a 50 M-dimension shape, 2 huge
// metadata, 3 a huge unknown value.
void BM_HugeHeaderMemory(benchmark::State& state) {
  const std::string json = HugeHeader(static_cast<int>(state.range(0)));
  // Shape 0 holds kMaxTensorsPerHeader one-byte tensors; the others one.
  const uint64_t file_size = kHeaderLengthBytes + json.size() + (state.range(0) == 0 ? kMaxTensorsPerHeader : 1);
  double peak_over_header = 0;
  bool parsed = false;
  for (auto _ : state) {
    ::malloc_trim(0);
    const int64_t before = ProcStatusBytes("VmRSS");
    if (!ResetPeakRss() || before < 0) {
      state.SkipWithError("cannot reset the peak resident size (/proc/self/clear_refs)");
      return;
    }
    {
      StatusOr<SafetensorsHeader> header =
          ParseHeader("huge.safetensors", std::as_bytes(std::span(json)), file_size);
      parsed = header.ok();
      if (!parsed) state.SetLabel(header.status().message().substr(0, 90));
      benchmark::DoNotOptimize(header);
    }
    const int64_t peak = ProcStatusBytes("VmHWM");
    peak_over_header = std::max(peak_over_header, static_cast<double>(peak - before) / json.size());
  }
  state.counters["header_MB"] = static_cast<double>(json.size()) / 1e6;
  state.counters["parsed"] = parsed ? 1 : 0;
  state.counters["peak_over_header"] = peak_over_header;
}
BENCHMARK(BM_HugeHeaderMemory)->DenseRange(0, 3)->ArgName("shape")->Iterations(1)->Unit(benchmark::kMillisecond)
    ->UseRealTime();


// ---- View transforms ----

constexpr size_t kQuantElements = size_t{16} << 20;  // 16 Mi elements
constexpr size_t kChunkElements = size_t{64} << 10;  // decoded per step: 256 KiB of floats

// kQuantElements normally distributed weights (std 0.02, like a layer's), as
// little-endian `dtype` (BF16 or F32) bytes.
const std::vector<std::byte>& SourceBytes(Dtype dtype) {
  auto make = [](Dtype d) {
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    const size_t size = d == Dtype::F32 ? 4 : 2;
    std::vector<std::byte> bytes(kQuantElements * size);
    for (size_t i = 0; i < kQuantElements; ++i) {
      const float v = dist(rng);
      if (d == Dtype::F32) {
        std::memcpy(&bytes[i * 4], &v, 4);
      } else {
        const uint16_t h = quant::FloatToBf16(v);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
    return bytes;
  };
  static const std::vector<std::byte> bf16 = make(Dtype::BF16);
  static const std::vector<std::byte> f32 = make(Dtype::F32);
  return dtype == Dtype::F32 ? f32 : bf16;
}

// Runs `transform(floats, first_element)` over the source a chunk at a time.
template <typename Transform>
void ForEachChunk(Dtype dtype, std::vector<float>& scratch, Transform&& transform) {
  const std::vector<std::byte>& src = SourceBytes(dtype);
  const size_t size = dtype == Dtype::F32 ? 4 : 2;
  for (size_t begin = 0; begin < kQuantElements; begin += kChunkElements) {
    const size_t n = std::min(kChunkElements, kQuantElements - begin);
    std::span<float> floats(scratch.data(), n);
    quant::DecodeFloats(dtype, std::span(src).subspan(begin * size, n * size), floats);
    transform(std::span<const float>(floats), begin);
  }
}

void SetSourceBytes(benchmark::State& state, Dtype dtype) {
  const int64_t size = dtype == Dtype::F32 ? 4 : 2;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kQuantElements) * size);
}

void BM_QuantizeNf4(benchmark::State& state) {
  SourceBytes(Dtype::BF16);  // made once, outside the timing
  std::vector<float> scratch(kChunkElements);
  std::vector<uint8_t> packed(kQuantElements / 2);
  std::vector<float> absmax(kQuantElements / quant::kNf4BlockSize);
  for (auto _ : state) {
    ForEachChunk(Dtype::BF16, scratch, [&](std::span<const float> x, size_t begin) {
      quant::QuantizeNf4(x, quant::kNf4BlockSize, std::span(packed).subspan(begin / 2, x.size() / 2),
                         std::span(absmax).subspan(begin / quant::kNf4BlockSize,
                                                   x.size() / quant::kNf4BlockSize));
    });
    benchmark::DoNotOptimize(packed.data());
  }
  SetSourceBytes(state, Dtype::BF16);
}
BENCHMARK(BM_QuantizeNf4)->Unit(benchmark::kMillisecond);

void BM_QuantizeBlockwise8(benchmark::State& state) {
  SourceBytes(Dtype::BF16);
  std::vector<float> scratch(kChunkElements);
  std::vector<uint8_t> codes(kQuantElements);
  std::vector<float> absmax(kQuantElements / quant::kBlockwise8BlockSize);
  for (auto _ : state) {
    ForEachChunk(Dtype::BF16, scratch, [&](std::span<const float> x, size_t begin) {
      quant::QuantizeBlockwise8(x, quant::kBlockwise8BlockSize, std::span(codes).subspan(begin, x.size()),
                                std::span(absmax).subspan(begin / quant::kBlockwise8BlockSize,
                                                          x.size() / quant::kBlockwise8BlockSize));
    });
    benchmark::DoNotOptimize(codes.data());
  }
  SetSourceBytes(state, Dtype::BF16);
}
BENCHMARK(BM_QuantizeBlockwise8)->Unit(benchmark::kMillisecond);

// Rows of 4096 elements, a Llama-7B hidden size.
void BM_QuantizeRowInt8(benchmark::State& state) {
  constexpr size_t kRow = 4096;
  SourceBytes(Dtype::BF16);
  std::vector<float> scratch(kChunkElements);
  std::vector<int8_t> out(kQuantElements);
  std::vector<float> scb(kQuantElements / kRow);
  for (auto _ : state) {
    ForEachChunk(Dtype::BF16, scratch, [&](std::span<const float> x, size_t begin) {
      for (size_t r = 0; r < x.size(); r += kRow) {
        scb[(begin + r) / kRow] = quant::QuantizeRowInt8(x.subspan(r, kRow), std::span(out).subspan(begin + r, kRow));
      }
    });
    benchmark::DoNotOptimize(out.data());
  }
  SetSourceBytes(state, Dtype::BF16);
}
BENCHMARK(BM_QuantizeRowInt8)->Unit(benchmark::kMillisecond);

// Casts to `to` (BF16 or F16), as @bf16/ and @f16/ serve F32 tensors.
void BM_CastF32ToHalf(benchmark::State& state, Dtype to) {
  SourceBytes(Dtype::F32);
  std::vector<float> scratch(kChunkElements);
  std::vector<std::byte> out(kQuantElements * 2);
  for (auto _ : state) {
    ForEachChunk(Dtype::F32, scratch, [&](std::span<const float> x, size_t begin) {
      quant::EncodeHalf(to, x, std::span(out).subspan(begin * 2, x.size() * 2));
    });
    benchmark::DoNotOptimize(out.data());
  }
  SetSourceBytes(state, Dtype::F32);
}
void BM_CastF32ToBf16(benchmark::State& state) { BM_CastF32ToHalf(state, Dtype::BF16); }
void BM_CastF32ToF16(benchmark::State& state) { BM_CastF32ToHalf(state, Dtype::F16); }
BENCHMARK(BM_CastF32ToBf16)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CastF32ToF16)->Unit(benchmark::kMillisecond);

// Reads `path` of a cold mount over a checkpoint in memory (see the top).
void ViewRead(benchmark::State& state, ViewKind kind, Dtype dtype, const std::string& path) {
  static std::map<std::pair<bool, Dtype>, testing::MemoryStore*> stores;
  testing::MemoryStore*& store = stores[{kind == ViewKind::kGguf, dtype}];
  if (store == nullptr) {
    store = new testing::MemoryStore;
    if (kind == ViewKind::kGguf) {
      // A checkpoint the GGUF view converts (a byte-level BPE tokenizer).
      const testing::GgufSpec spec{.layers = 4, .hidden = 1024, .intermediate = 2816, .heads = 8, .kv_heads = 8,
                                   .dtype = dtype};
      for (auto& [name, bytes] : testing::GgufCheckpointFiles(spec)) store->Put("m/" + name, bytes);
    } else {
      testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 4, .hidden = 512, .intermediate = 1536,
                              .vocab = 4096, .dtype = dtype};
      auto files = testing::BuildCheckpointFiles(spec, {.num_shards = 1});
      if (!files.ok()) std::abort();
      for (auto& [name, bytes] : *files) store->Put("m/" + name, bytes);
    }
  }
  const uint64_t source_bytes = store->Stat("m/model.safetensors")->size;
  for (auto _ : state) {
    Metrics metrics;
    ReadEngine engine(*store, EngineOptions{.chunk_size = 8 << 20, .cache_size = 1ull << 30, .max_fetches = 4,
                                            .prefetch_window = 64 << 20, .head_size = 256 << 10},
                      metrics);
    Namespace ns(*store, engine,
                 ViewOptions{.kinds = {kind},
                             .grouper = std::make_shared<const LayerGrouper>(*LayerGrouper::Create("")),
                             .prefetch_window = 64 << 20});
    NodeId node = kRootNode;
    for (std::string_view rest = path; !rest.empty();) {
      const size_t slash = rest.find('/');
      auto attr = ns.Lookup(node, rest.substr(0, slash));
      if (!attr.ok()) std::abort();
      node = attr->id;
      rest = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
    }
    const uint64_t size = ns.GetAttr(node)->size;
    for (uint64_t off = 0; off < size; off += 128 << 10) {
      std::promise<void> done;
      ns.Read(node, off, 128 << 10, [&](StatusOr<ReadResult> r) {
        if (!r.ok()) std::abort();
        for (auto piece : r->pieces) benchmark::DoNotOptimize(piece.data());
        done.set_value();
      });
      done.get_future().get();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * source_bytes));
}

void BM_ViewReadNf4(benchmark::State& state) {
  ViewRead(state, ViewKind::kBnbNf4, Dtype::BF16, "m/@bnb-nf4/model.safetensors");
}
void BM_ViewReadCastBf16(benchmark::State& state) {
  ViewRead(state, ViewKind::kBf16, Dtype::F32, "m/@bf16/model.safetensors");
}
// A GGUF file of a bf16 checkpoint read in order: every weight quantized (the
// norms widened to F32) on the engine's workers, segments computed ahead of
// the reader. Source bytes per CPU-second of the whole process: the link rate
// one core keeps up with.
void BM_ViewReadGgufQ8_0(benchmark::State& state) {
  ViewRead(state, ViewKind::kGguf, Dtype::BF16, "m/@gguf/m-Q8_0.gguf");
}
void BM_ViewReadGgufQ4_K_M(benchmark::State& state) {
  ViewRead(state, ViewKind::kGguf, Dtype::BF16, "m/@gguf/m-Q4_K_M.gguf");
}
BENCHMARK(BM_ViewReadNf4)->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ViewReadCastBf16)->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ViewReadGgufQ8_0)->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ViewReadGgufQ4_K_M)->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);

// ggml's block formats for the @gguf/ files (core/gguf/ggml_quants.h), on
// float32 weights already decoded, a chunk at a time as a read computes them.
// bytes_per_second counts the FLOAT32 input (4 bytes an element), one core: a
// BF16 source delivers the same elements in half the bytes. Each type runs on
// the fastest path the CPU has (AVX2 where present) and, as *_Baseline, on the
// SSE2 path every x86-64 has; both give the same bytes.
void BM_QuantizeGguf(benchmark::State& state, GgmlType type, bool baseline) {
  // Q8_0 is the view most read; the K types are about 15x slower, so fewer
  // elements keep each iteration short.
  const size_t elements = type == GgmlType::kQ8_0 ? kQuantElements : kQuantElements / 8;
  std::vector<float> floats(elements);
  {
    const std::vector<std::byte>& src = SourceBytes(Dtype::BF16);
    quant::DecodeFloats(Dtype::BF16, std::span(src).first(elements * 2), floats);
  }
  std::vector<std::byte> out(RowBytes(type, elements));
  const size_t chunk = kChunkElements;  // a multiple of every block size
  for (auto _ : state) {
    for (size_t begin = 0; begin < elements; begin += chunk) {
      const std::span<const float> x = std::span<const float>(floats).subspan(begin, chunk);
      const std::span<std::byte> y =
          std::span(out).subspan(begin / BlockElements(type) * BlockBytes(type), RowBytes(type, chunk));
      if (baseline) {
        QuantizeBlocksOn(QuantPath::kBaseline, type, x, y);
      } else {
        QuantizeBlocks(type, x, y);
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(elements * 4));
}
void BM_QuantizeQ8_0(benchmark::State& state) { BM_QuantizeGguf(state, GgmlType::kQ8_0, false); }
void BM_QuantizeQ4_K(benchmark::State& state) { BM_QuantizeGguf(state, GgmlType::kQ4_K, false); }
void BM_QuantizeQ6_K(benchmark::State& state) { BM_QuantizeGguf(state, GgmlType::kQ6_K, false); }
void BM_QuantizeQ8_0_Baseline(benchmark::State& state) { BM_QuantizeGguf(state, GgmlType::kQ8_0, true); }
void BM_QuantizeQ4_K_Baseline(benchmark::State& state) { BM_QuantizeGguf(state, GgmlType::kQ4_K, true); }
void BM_QuantizeQ6_K_Baseline(benchmark::State& state) { BM_QuantizeGguf(state, GgmlType::kQ6_K, true); }
BENCHMARK(BM_QuantizeQ8_0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizeQ4_K)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizeQ6_K)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizeQ8_0_Baseline)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizeQ4_K_Baseline)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizeQ6_K_Baseline)->Unit(benchmark::kMillisecond);

// A 256 MiB pool of chunk buffers (larger than any CPU's last-level cache, as
// the cache's chunks are), a 16 MiB "socket" source and a 16 MiB "page cache"
// destination, all touched once before timing.
struct CopyBuffers {
  static constexpr size_t kPool = 256 << 20, kSide = 16 << 20, kChunk = 8 << 20, kPart = 1 << 20;
  std::byte* pool;
  std::vector<std::byte> net = std::vector<std::byte>(kSide, std::byte{1});
  std::vector<std::byte> page_cache = std::vector<std::byte>(kSide, std::byte{2});
  CopyBuffers() {
    void* p = mmap(nullptr, kPool, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    madvise(p, kPool, MADV_HUGEPAGE);  // as the buffer pool's chunks
    pool = static_cast<std::byte*>(p);
    std::memset(pool, 3, kPool);
  }
  ~CopyBuffers() { munmap(pool, kPool); }
  void Receive(size_t at) { std::memcpy(pool + at, net.data() + at % kSide, kPart); }
  void Reply(size_t at) { std::memcpy(page_cache.data() + at % kSide, pool + at, kPart); }
};

void BM_ReplyAfterChunk(benchmark::State& state) {
  CopyBuffers b;
  for (auto _ : state) {
    for (size_t chunk = 0; chunk < CopyBuffers::kPool; chunk += CopyBuffers::kChunk) {
      for (size_t at = chunk; at < chunk + CopyBuffers::kChunk; at += CopyBuffers::kPart) b.Receive(at);
      for (size_t at = chunk; at < chunk + CopyBuffers::kChunk; at += CopyBuffers::kPart) b.Reply(at);
    }
    benchmark::DoNotOptimize(b.page_cache.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * CopyBuffers::kPool));
}
BENCHMARK(BM_ReplyAfterChunk)->Unit(benchmark::kMillisecond);

void BM_ReplyPerPart(benchmark::State& state) {
  CopyBuffers b;
  for (auto _ : state) {
    for (size_t at = 0; at < CopyBuffers::kPool; at += CopyBuffers::kPart) {
      b.Receive(at);
      b.Reply(at);
    }
    benchmark::DoNotOptimize(b.page_cache.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * CopyBuffers::kPool));
}
BENCHMARK(BM_ReplyPerPart)->Unit(benchmark::kMillisecond);

// SliceLearner::Observe runs under the engine lock once per tensor an
// unclassified reader leaves. Arg 0: rank 3 of 16 slices of tensors of 2 to
// 13 MiB (the learner's usual input, a pattern every few observations); arg 1:
// touches at random places that no fraction explains (every candidate tried
// and rejected against the remembered observations: the worst case).
void BM_SliceLearnerObserve(benchmark::State& state) {
  const bool random = state.range(0) == 1;
  std::mt19937_64 rng(7);
  std::vector<SliceObservation> observations;
  uint64_t at = 0;
  for (int i = 0; i < 256; ++i) {
    const uint64_t rows = 512 + rng() % 2816;  // 2 to 13 MiB of 4 KiB rows
    const TensorSpan t{at, at + rows * 4096, 4096};
    at = t.end;
    uint64_t begin = 0, end = 0;
    if (random) {
      begin = t.begin + (rng() % (rows / 2)) * 4096;
      end = begin + (64 + rng() % (rows / 4)) * 4096;
    } else {
      begin = t.begin + rows * 3 / 16 * 4096 - (64 << 10);
      end = t.begin + rows * 4 / 16 * 4096 + (128 << 10);
    }
    observations.push_back(SliceObservation{t, begin, end});
  }
  SliceLearner learner;
  size_t i = 0, learned = 0;
  for (auto _ : state) {
    if (learner.Observe(observations[i++ % observations.size()])) ++learned;
  }
  state.counters["patterns"] = static_cast<double>(learned);
}
BENCHMARK(BM_SliceLearnerObserve)->Arg(0)->Arg(1)->ArgName("random")->Iterations(2560)->Unit(benchmark::kMicrosecond);

// The read engine's own work per kernel read: 1 MiB reads of a checkpoint
// already in its cache, from `readers` open files (ReaderId) at once, each
// moving through the file at its own place, the reads interleaved one by one.
// A cached read runs on the caller's thread: its time is the engine's work,
// nearly all of it under the engine lock (the lookup, the access model, the
// planner, the delivery marks), plus the reply's setup.
void BM_EngineCachedRead(benchmark::State& state) {
  const int readers = static_cast<int>(state.range(0));
  static testing::MemoryStore* const store = [] {
    auto* s = new testing::MemoryStore;
    testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 8, .hidden = 512, .intermediate = 1536,
                            .vocab = 4096, .dtype = Dtype::F32};
    auto files = testing::BuildCheckpointFiles(spec, {.num_shards = 1});
    if (!files.ok()) std::abort();
    for (auto& [name, bytes] : *files) s->Put(name, bytes);
    return s;
  }();
  const ObjectInfo object = *store->Stat("model.safetensors");
  Metrics metrics;
  // A cache larger than the file: after the first pass every read is a hit.
  ReadEngine engine(*store, EngineOptions{.chunk_size = 8 << 20, .cache_size = 1ull << 30, .max_fetches = 4,
                                          .prefetch_window = 256 << 20, .head_size = 256 << 10,
                                          .consumed_keep = 1ull << 30},
                    metrics);
  constexpr uint64_t kRead = 1 << 20;
  auto read = [&](uint64_t reader, uint64_t offset) {
    std::promise<void> done;
    engine.Read(object, offset, kRead, [&](StatusOr<ReadResult> r) {
      if (!r.ok()) std::abort();
      done.set_value();
    }, ReadHints{.reader = ReaderId{reader}});
    done.get_future().get();
  };
  const uint64_t reads_per_pass = object.size / kRead;
  for (uint64_t i = 0; i < reads_per_pass; ++i) read(1000, i * kRead);  // warm the cache
  std::vector<uint64_t> at(static_cast<size_t>(readers));
  for (int r = 0; r < readers; ++r) at[static_cast<size_t>(r)] = (reads_per_pass * static_cast<uint64_t>(r) / readers);
  int r = 0;
  for (auto _ : state) {
    uint64_t& pos = at[static_cast<size_t>(r)];
    read(static_cast<uint64_t>(r + 1), pos * kRead);
    pos = (pos + 1) % reads_per_pass;
    r = (r + 1) % readers;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["fetches"] = static_cast<double>(metrics.fetches.load());
}
BENCHMARK(BM_EngineCachedRead)->Arg(1)->Arg(64)->ArgName("readers")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tensorfs

BENCHMARK_MAIN();
