// The report behind `tensorfs inspect SOURCE`: what a checkpoint directory
// holds, file by file, tensor by tensor and layer by layer, and what is wrong
// with it.
//
// A file that cannot be parsed is listed with the exact reason and does not
// stop the report: the other files, their tensors and groups are still shown.
// Cross-file problems (index vs headers, a tensor in two files) are listed too.
//
// Thread-safety: BuildInspectReport may run concurrently with anything (it
// only calls the thread-safe ObjectStore); the report is a plain value.
#ifndef TENSORFS_CORE_SAFETENSORS_INSPECT_H_
#define TENSORFS_CORE_SAFETENSORS_INSPECT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/safetensors/dtype.h"
#include "core/safetensors/layers.h"
#include "core/store/object_store.h"
#include "core/util/status.h"

namespace tensorfs {

struct InspectReport {
  struct File {
    std::string name;          // relative to the directory
    uint64_t size = 0;         // bytes
    uint64_t header_bytes = 0; // 8 + N; 0 when the header could not be read
    uint64_t tensor_count = 0;
    Status status;             // OK, or exactly why the file is unusable
  };
  struct Tensor {
    std::string name;
    std::string file;          // relative to the directory
    Dtype dtype = Dtype::F32;
    std::vector<uint64_t> shape;
    uint64_t offset = 0;       // absolute offset of the first byte in the file
    uint64_t bytes = 0;
    std::string group;         // layer group prefix
  };
  struct Group {
    std::string prefix;
    LayerGroup::Kind kind = LayerGroup::Kind::kOther;
    uint64_t tensor_count = 0;
    uint64_t bytes = 0;
    std::vector<std::string> files;  // relative, in file order
  };

  std::string location;               // store and directory, for the title
  std::string grouping_regex;         // "" for the built-in rules
  std::vector<File> files;            // listing order
  std::vector<std::string> indexes;   // index files found (relative)
  std::vector<std::string> problems;  // index errors and cross-file problems
  std::vector<Tensor> tensors;        // storage order
  std::vector<Group> groups;          // forward order
  uint64_t total_tensor_bytes = 0;
  // What the directory's @gguf/ view holds ("NAME-F16.gguf, ... (llama)") or
  // "none: <why>"; empty when not looked at (the caller fills it in).
  std::string gguf;

  // Every file's header parsed.
  bool AllFilesOk() const;
  // Every file's header parsed and there is no problem.
  bool ok() const;
};

// Lists `dir_prefix` of `store`, reads every header and index, and groups the
// tensors with `grouper`. Fails only when the listing fails, or with kNotFound
// when the directory holds no *.safetensors file; anything wrong with the files
// themselves is in the report.
StatusOr<InspectReport> BuildInspectReport(ObjectStore& store, std::string_view dir_prefix,
                                           const LayerGrouper& grouper);

// BuildInspectReport with a LayerGrouper made from `layer_regex` ("" for the
// built-in rules); kInvalidArgument when the regex is invalid.
StatusOr<InspectReport> Inspect(ObjectStore& store, std::string_view dir_prefix,
                                std::string_view layer_regex);

// Aligned tables: files, problems, layer groups, tensors.
std::string RenderInspectText(const InspectReport& report);

// The report as JSON (indent 2); sizes in bytes, statuses as
// {"ok": false, "code": "CORRUPT", "error": "..."}.
std::string RenderInspectJson(const InspectReport& report);

// "1.50 MiB", "512 B".
std::string FormatBytes(uint64_t bytes);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_SAFETENSORS_INSPECT_H_
