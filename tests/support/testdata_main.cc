// tensorfs-testdata: writes a deterministic safetensors checkpoint shaped like
// a real architecture, for tests, benchmarks and manual trials.
//
//   tensorfs-testdata --arch llama --layers 4 --hidden 256 --intermediate 688
//       --vocab 1024 --dtype bf16 --shards 3 --out /tmp/llama
//   tensorfs-testdata --arch mixtral --size-mib 512 --shards 4 --out /tmp/mixtral
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <string>

#include "core/safetensors/dtype.h"
#include "core/safetensors/inspect.h"
#include "tests/support/checkpoint_gen.h"

namespace tensorfs::testing {
namespace {

// Scales hidden and intermediate (keeping their ratio, hidden a multiple of
// 8 x heads) so that the model's tensors come closest to `target` bytes.
ModelSpec ScaleToSize(ModelSpec spec, uint64_t target) {
  const double ratio = static_cast<double>(spec.intermediate) / static_cast<double>(spec.hidden);
  const uint64_t step = 8 * spec.heads;
  auto with_hidden = [&](uint64_t hidden) {
    ModelSpec s = spec;
    s.hidden = hidden;
    s.intermediate = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(hidden) * ratio + 0.5));
    return s;
  };
  uint64_t lo = 1, hi = 1;  // in steps
  while (ModelTensorBytes(with_hidden(hi * step)) < target && hi < (1u << 20)) hi *= 2;
  while (lo < hi) {  // first multiple reaching the target
    const uint64_t mid = lo + (hi - lo) / 2;
    if (ModelTensorBytes(with_hidden(mid * step)) < target) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  ModelSpec best = with_hidden(lo * step);
  if (lo > 1) {
    ModelSpec below = with_hidden((lo - 1) * step);
    const uint64_t over = ModelTensorBytes(best) - target;
    const uint64_t under = target - ModelTensorBytes(below);
    if (under < over) best = below;
  }
  return best;
}

int Main(int argc, char** argv) {
  CLI::App app("Writes a deterministic safetensors checkpoint (Hugging Face layout) for tests.",
               "tensorfs-testdata");
  std::string arch_name = "llama";
  std::string dtype_name = "bf16";
  ModelSpec spec;
  WriteOptions options;
  std::string out;
  double size_mib = 0;
  bool no_index = false;
  bool no_extra = false;
  app.add_option("--arch", arch_name, "llama | qwen2 | mixtral | gpt2 | t5 | llama-tied | deepseek-moe")
      ->capture_default_str();
  app.add_option("--layers", spec.layers, "blocks (T5: per stack)")->capture_default_str();
  app.add_option("--hidden", spec.hidden, "hidden size")->capture_default_str();
  app.add_option("--intermediate", spec.intermediate, "MLP size")->capture_default_str();
  app.add_option("--vocab", spec.vocab, "vocabulary size")->capture_default_str();
  app.add_option("--experts", spec.experts, "experts per layer (mixtral)")->capture_default_str();
  app.add_option("--heads", spec.heads, "attention heads (divides hidden)")->capture_default_str();
  app.add_option("--kv-heads", spec.kv_heads, "key/value heads (divides heads)")->capture_default_str();
  app.add_option("--dtype", dtype_name, "f32 | f16 | bf16")->capture_default_str();
  app.add_option("--shards", options.num_shards, "number of safetensors files")->capture_default_str();
  app.add_option("--out", out, "directory to write (created if missing)")->required();
  app.add_option("--size-mib", size_mib,
                 "scale hidden and intermediate so the tensors total about this many MiB");
  app.add_flag("--no-index", no_index, "do not write model.safetensors.index.json");
  app.add_flag("--no-extra-files", no_extra, "do not write config.json, tokenizer.json, ...");
  CLI11_PARSE(app, argc, argv);

  std::optional<Arch> arch = ParseArch(arch_name);
  if (!arch) {
    std::fprintf(stderr, "tensorfs-testdata: unknown --arch '%s' (llama, qwen2, mixtral, gpt2, t5, llama-tied, deepseek-moe)\n",
                 arch_name.c_str());
    return 1;
  }
  spec.arch = *arch;
  std::string upper;
  for (char c : dtype_name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::optional<Dtype> dtype = ParseDtype(upper);
  if (!dtype) {
    std::fprintf(stderr, "tensorfs-testdata: unknown --dtype '%s' (f32, f16, bf16)\n", dtype_name.c_str());
    return 1;
  }
  spec.dtype = *dtype;
  if (Status s = ValidateSpec(spec); !s.ok()) {
    std::fprintf(stderr, "tensorfs-testdata: %s\n", s.message().c_str());
    return 1;
  }
  if (size_mib > 0) spec = ScaleToSize(spec, static_cast<uint64_t>(size_mib * 1024 * 1024));
  options.dir = out;
  options.write_index = !no_index;
  options.write_extra_files = !no_extra;

  StatusOr<WrittenCheckpoint> written = WriteCheckpoint(spec, options);
  if (!written.ok()) {
    std::fprintf(stderr, "tensorfs-testdata: %s\n", written.status().message().c_str());
    return 1;
  }
  std::printf("%s: layers=%llu hidden=%llu intermediate=%llu vocab=%llu dtype=%s tensors=%zu (%s)\n",
              std::string(ArchName(spec.arch)).c_str(), static_cast<unsigned long long>(spec.layers),
              static_cast<unsigned long long>(spec.hidden),
              static_cast<unsigned long long>(spec.intermediate),
              static_cast<unsigned long long>(spec.vocab), std::string(DtypeName(spec.dtype)).c_str(),
              written->plan.weight_map.size(), FormatBytes(written->plan.total_size).c_str());
  for (const auto& [path, bytes] : written->files) {
    std::printf("wrote %s (%llu bytes)\n", path.c_str(), static_cast<unsigned long long>(bytes));
  }
  if (!written->plan.split_group.empty()) {
    std::printf("layer split across two shards: %s\n", written->plan.split_group.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tensorfs::testing

int main(int argc, char** argv) { return tensorfs::testing::Main(argc, argv); }
