// @stacked/: the checkpoint with its repeated layers stacked along a leading
// axis, as JAX models that scan over their layers hold them (Flax nn.scan with
// variable_axes={"params": 0}, Haliax/Levanter Stacked, MaxText scanned layers).
//
// Stacking along axis 0 only rearranges source bytes: every stacked tensor is
// a list of whole source tensors back to back (kSource extents), nothing is
// computed, and reading layer i's slice of a stacked tensor reads exactly
// that layer's source tensor.
//
// The rules (docs/VIEWS.md, "@stacked", says the same for users):
//  - Layers come from the layer grouping (layers.h): a tensor of a block group
//    whose name is <stack><i>.<rest> (stack "model.layers.", i decimal) is
//    member i of the family <stack><rest>. Any other tensor (embeddings, final
//    norm, head, or a block tensor not named that way) passes through
//    unchanged, under its own name.
//  - Experts first: within one layer, the members <a>experts.<j>.<b> for
//    j = 0..E-1 (every j present once, same dtype and shape) become one item
//    <a>experts.<b> of shape [E, *shape], expert 0 first. Experts that do not
//    all agree stay one item each (<a>experts.<j>.<b>).
//  - Then over layers: a family's items are cut into maximal runs of
//    consecutive layer indices with the same dtype and shape. A run of layers
//    a..b becomes one tensor of shape [b-a+1, *item shape], layer a first.
//    When a single run covers layers 0..L-1 of its stack (L: one past the
//    largest index in the stack) it is named <stack><rest> ("model.layers.
//    self_attn.q_proj.weight", [L, ...]); otherwise every run is named
//    <stack><a>-<b>.<rest> ("model.layers.0-0.mlp.gate_proj.weight" and
//    "model.layers.1-26.mlp.experts.gate_proj.weight" in a DeepSeek-MoE
//    checkpoint whose layer 0 is dense), a one-layer run included (a-a),
//    so every tensor under <stack> has the layer axis.
//  - A family whose stacked name would equal another tensor's name, or that
//    has two members for one layer, is not stacked: its members pass through.
//  - Tied embeddings: nothing is added or duplicated; the view holds what the
//    source holds, and config.json passes through unchanged.
//
// Order and files: tensors sorted by name, cut into as many
// model-0000k-of-0000n.safetensors files as the source has shards: the total
// divided in equal parts, each tensor in the part where its first byte falls
// (so files are the source shards' size give or take one tensor; a part that
// a larger tensor leaves empty is no file; model.safetensors when one file
// holds everything), with a regenerated
// model.safetensors.index.json (written when there is more than one file or
// the source has an index); every other file passes through, the source's
// index files excepted. The files are linked in order, so a loader reading
// them one after another gets the next file's sources prefetched.
//
// A shard whose header cannot be parsed leaves the stacking undetermined, so
// every @stacked safetensors file then exists but cannot be read (its error
// names the shard); the other files still read.
//
// Thread-safety: free functions over their arguments.
#ifndef TENSORFS_CORE_VIEWS_STACKED_H_
#define TENSORFS_CORE_VIEWS_STACKED_H_

#include <set>
#include <string>
#include <vector>

#include "core/safetensors/checkpoint.h"
#include "core/safetensors/layers.h"
#include "core/views/views.h"

namespace tensorfs {

// One tensor of @stacked: its sources' bytes back to back make its bytes.
struct StackedTensor {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;
  std::vector<const CatalogEntry*> sources;  // layer-major, then expert; one for a passthrough
};

// The tensors of @stacked in file order. `unreadable`: tensors known only from
// an index (their shard's header cannot be parsed); the families they belong
// to are not stacked, and they themselves are left out.
std::vector<StackedTensor> PlanStackedTensors(const Checkpoint& checkpoint, const LayerGrouper& grouper,
                                              const std::set<std::string>& unreadable = {});

// The files of @stacked (see above), in order: safetensors files, then the
// index and the passed-through files by name.
std::vector<ViewEntry> BuildStackedView(const ViewInput& input);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_STACKED_H_
