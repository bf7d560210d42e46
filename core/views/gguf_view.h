// @gguf/: a checkpoint directory as the GGUF files llama.cpp loads, computed
// as they are read (see gguf_model.h for what they hold and which
// checkpoints have them):
//
//   NAME-F16.gguf     (NAME-BF16.gguf when the 2-D weights are bf16, as the
//                     converter's "auto" outtype picks)
//   NAME-Q8_0.gguf    as convert_hf_to_gguf.py --outtype q8_0 writes it
//   NAME-Q4_K_M.gguf  as llama-quantize Q4_K_M makes it from the F16/BF16 file
//
// Each file: the GGUF v3 header (core/gguf/gguf_format.h) with that file's
// general.file_type, then each tensor's bytes, zero-padded to the 32-byte
// alignment, in record order. A tensor whose GGUF type is its source dtype
// and whose rows stay in place is a range of the source shard; any other is
// a transform that decodes the source to float32 (bf16 and f16 exactly),
// permutes the rows of llama's q/k projections, and quantizes with ggml's
// reference quantizers (QuantizeBlocks); rope_freqs and longrope factors are
// bytes of the header's making. Sizes come from the plan alone, so listing
// the directory reads no tensor data. The transforms compute ahead of a
// reader (view_reader.h): llama.cpp maps the whole file and reads it through.
//
// Thread-safety: free functions over their arguments.
#ifndef TENSORFS_CORE_VIEWS_GGUF_VIEW_H_
#define TENSORFS_CORE_VIEWS_GGUF_VIEW_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/safetensors/checkpoint.h"
#include "core/store/object_store.h"
#include "core/util/status.h"
#include "core/views/gguf_model.h"
#include "core/views/views.h"

namespace tensorfs {

// The three files of `model`, whose tensors are of `checkpoint` (which, like
// the model, must outlive them). Transforms compute segments of about
// `segment_bytes` of source.
std::vector<ViewEntry> BuildGgufView(const GgufModel& model, const Checkpoint& checkpoint, uint64_t segment_bytes);

// The GGUF model of the checkpoint `scan` describes: its config.json and
// tokenizer files (tokenizer.json, tokenizer_config.json, tokenizer.model,
// added_tokens.json, special_tokens_map.json, chat_template.jinja), found
// among `others` (the directory's other objects), are read through `store`;
// the vocabulary is converted with ConvertTokenizer. Fails with one line
// saying why the directory has no @gguf/ (a shard that cannot be read, no
// config.json, an architecture, config, tokenizer or tensor that cannot be
// converted exactly). `name` becomes the files' NAME and general.name.
StatusOr<GgufModel> LoadGgufModel(ObjectStore& store, const CheckpointScan& scan,
                                  const std::vector<ObjectInfo>& others, std::string name);

// The NAME of a checkpoint at the root of a mount of `source` (a directory,
// gs://bucket/prefix, s3://bucket/prefix): its last path component ("" for
// none).
std::string GgufNameOfSource(std::string_view source);

// What `tensorfs inspect` says of a directory's @gguf/: "NAME-BF16.gguf,
// NAME-Q8_0.gguf, NAME-Q4_K_M.gguf (llama)", or "none: <why>".
std::string DescribeGguf(const StatusOr<GgufModel>& model);
// The same for the checkpoint directory `dir_prefix` of `store`, listed and
// scanned anew.
std::string DescribeGgufOf(ObjectStore& store, std::string_view dir_prefix, std::string name);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_GGUF_VIEW_H_
