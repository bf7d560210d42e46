// The views of a checkpoint directory: which virtual directories appear in it
// and which files each holds, with their exact layout (see view_file.h).
//
//   @tensors/<tensor>.safetensors        one file per tensor ('%' -> %25, '/' -> %2F)
//   splitted_model/<layer>safetensors    AirLLM/RabbitLLM per-layer files, each with
//                                        an empty <file>.done marker beside it
//   splitted_model.4bit/, .8bit/         the same, compressed as AirLLM compresses them
//                                        (bitsandbytes NF4 blocksize 64; dynamic 8-bit
//                                        blocksize 2048)
//   @bnb-nf4/, @bnb-int8/                the checkpoint in transformers' bitsandbytes
//                                        serialization: shards mirrored, block weights
//                                        quantized, config.json with quantization_config,
//                                        index rewritten, other files passed through
//   @bf16/, @f16/                        the checkpoint with F32 tensors cast
//   @stacked/                            the layers stacked along a leading axis,
//                                        as JAX scan-over-layers models hold them
//                                        (experts too): source ranges only, nothing
//                                        computed; rules and run naming in stacked.h
//   @gguf/                               NAME-F16.gguf (or -BF16), NAME-Q8_0.gguf,
//                                        NAME-Q4_K_M.gguf for llama.cpp, in
//                                        checkpoint directories whose architecture
//                                        and tokenizer convert exactly (gguf_view.h)
//
// Every view safetensors file has a header in the reference writer's layout
// (compact JSON, "__metadata__" {"format":"pt"} first, padded with spaces to a
// multiple of 8), then its tensors back to back in header order. Only F32, F16
// and BF16 tensors with at least one element are quantized or cast; any other
// tensor is passed through as it is.
//
// A shard whose header cannot be parsed makes exactly the view files that need
// it unreadable (they exist, and reading them fails with a message naming the
// shard and its problem; in @stacked that is every safetensors file). Its
// tensors are known from the index, when there is one; without an index
// nothing of it appears in the views.
//
// Thread-safety: free functions over their arguments.
#ifndef TENSORFS_CORE_VIEWS_VIEWS_H_
#define TENSORFS_CORE_VIEWS_VIEWS_H_

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/safetensors/checkpoint.h"
#include "core/safetensors/layers.h"
#include "core/util/status.h"
#include "core/views/gguf_model.h"
#include "core/views/view_file.h"

namespace tensorfs {

enum class ViewKind { kTensors, kSplit, kSplit4bit, kSplit8bit, kBnbNf4, kBnbInt8, kBf16, kF16, kStacked, kGguf };

inline constexpr std::array<ViewKind, 10> kAllViews = {
    ViewKind::kTensors, ViewKind::kSplit, ViewKind::kSplit4bit, ViewKind::kSplit8bit, ViewKind::kBnbNf4,
    ViewKind::kBnbInt8, ViewKind::kBf16,  ViewKind::kF16,       ViewKind::kStacked,   ViewKind::kGguf};
// The views every checkpoint directory shows: all but @gguf, which only a
// directory whose architecture and tokenizer convert exactly has.
inline constexpr std::array<ViewKind, 9> kEveryCheckpointViews = {
    ViewKind::kTensors, ViewKind::kSplit, ViewKind::kSplit4bit, ViewKind::kSplit8bit, ViewKind::kBnbNf4,
    ViewKind::kBnbInt8, ViewKind::kBf16,  ViewKind::kF16,       ViewKind::kStacked};

// The directory name: "@tensors", "splitted_model", "splitted_model.4bit", ...
std::string_view ViewDirName(ViewKind kind);
// The name in -o views=: the directory name without '@'.
std::string_view ViewOptionName(ViewKind kind);
// "all", "none", or option names joined by ':' or '+' ("splitted_model:bnb-nf4").
StatusOr<std::vector<ViewKind>> ParseViewList(std::string_view text);

// What a checkpoint directory offers its views.
struct ViewInput {
  const CheckpointScan* scan = nullptr;
  const LayerGrouper* grouper = nullptr;
  // The directory's other objects (not *.safetensors): config, tokenizer, index.
  std::vector<ObjectInfo> others;
  // config.json's text, when the directory has one that could be read.
  std::optional<std::string> config_json;
  // Source bytes per computed segment of a quantized or cast tensor.
  uint64_t segment_bytes = 4ull << 20;
  // @gguf: the directory's GGUF model (gguf_model.h), when it has one;
  // it and `scan` outlive the files.
  const GgufModel* gguf = nullptr;
};

struct ViewEntry {
  std::string name;
  std::shared_ptr<ViewFile> file;
};

// The files of view `kind` in their read order (splitted_model*: forward order
// of the layers, each followed by its marker; others: by name), with
// previous/next links set between the safetensors files.
std::vector<ViewEntry> BuildView(ViewKind kind, const ViewInput& input);

// The file name of a tensor in @tensors.
std::string TensorFileName(std::string_view tensor);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_VIEWS_H_
