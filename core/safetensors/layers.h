// Layer grouping: which tensors belong together as one layer of the model, and
// the order in which a forward pass uses the layers.
//
// A group is named by a prefix of its tensors' names, as AirLLM names its
// per-layer files: "model.embed_tokens.", "model.layers.0.", ...,
// "model.layers.31.", "model.norm.", "lm_head.".
//
// Built-in rules:
//  - A block is the leftmost "<stack>.<N>." where the stack's last component
//    is "layers", "layer", "h", "block" or "blocks" and N is a decimal number:
//    "model.layers.3.", "model.decoder.layers.3.", "model.language_model.
//    layers.3.", "transformer.h.3.", "encoder.block.3.", "decoder.block.3.".
//    Everything under it stays in it, MoE experts and routers included
//    ("model.layers.3.block_sparse_moe.experts.7.w1.weight").
//  - Any other tensor is grouped by its module: its name without the last
//    dotted component, plus '.' ("model.norm.weight" -> "model.norm.").
//    A name without a dot is its own group.
// Group kinds: a block; a head (a module path component lm_head, embed_out,
// output, score, classifier, cls, qa_outputs or head); an embedding (a
// component containing "embed", or wte, wpe, shared); anything else is other.
//
// Forward order: embeddings first (those of a decoder after the others, token
// embeddings before position embeddings); then
// the stacks of blocks, encoder and vision stacks first, decoder stacks last,
// others by first appearance; within a stack the blocks by numeric index
// (layers.10 after layers.9), then the other groups that live beside the stack
// (the stack's parent prefix starts their names: "model.norm." beside
// "model.layers.", "encoder.final_layer_norm." beside "encoder.block."); then
// other groups that belong to no stack; heads last. Ties keep the order in
// which the groups first appear in the input.
//
// An override regex (ECMAScript) replaces the rules for the names it matches
// (std::regex_search): the group is the first capture group when there is one
// and it matched, else the whole match. Names it does not match, or matches
// with an empty group, fall back to the built-in rules. Kinds and order are
// derived from the group prefixes with the same rules as above.
//
// Thread-safety: a LayerGrouper is immutable after Create; its const methods
// may be called from any number of threads at once.
#ifndef TENSORFS_CORE_SAFETENSORS_LAYERS_H_
#define TENSORFS_CORE_SAFETENSORS_LAYERS_H_

#include <cstddef>
#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"

namespace tensorfs {

struct LayerGroup {
  enum class Kind { kEmbedding, kBlock, kOther, kHead };

  std::string prefix;                // "model.layers.3."
  Kind kind = Kind::kOther;
  std::string stack;                 // blocks only: "model.layers."; empty otherwise
  std::vector<std::string> tensors;  // in the order given to Group (storage order)
};

// "embedding", "block", "other", "head".
std::string_view LayerGroupKindName(LayerGroup::Kind kind);

// Limits on a layer regex (-o layer_regex, inspect --layer-regex), which
// std::regex handles badly past them: its compiler recurses once per term, so
// a long pattern overflows the stack, and it reads repetition counts and
// back-references into a long without checking for overflow.
inline constexpr size_t kMaxLayerRegexLength = 1024;
inline constexpr size_t kMaxLayerRegexDigits = 9;  // in one run of digits

// InvalidArgument naming the limit when `pattern` is past one of them.
Status CheckLayerRegex(std::string_view pattern);

class LayerGrouper {
 public:
  // `override_regex` empty selects the built-in rules only. An invalid regex
  // is kInvalidArgument with a message that says what to write instead.
  static StatusOr<LayerGrouper> Create(std::string_view override_regex);

  // The group prefix of one tensor name.
  std::string GroupOf(std::string_view tensor) const;

  // Groups `tensor_names` (storage order), returning the groups in forward
  // order. Each group's tensors keep their order in `tensor_names`.
  std::vector<LayerGroup> Group(const std::vector<std::string>& tensor_names) const;

  // The regex given to Create ("" for the built-in rules).
  const std::string& override_regex() const { return pattern_; }

 private:
  LayerGrouper() = default;

  std::string pattern_;
  std::shared_ptr<const std::regex> regex_;  // null without an override
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_SAFETENSORS_LAYERS_H_
