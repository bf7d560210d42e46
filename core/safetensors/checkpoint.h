// The checkpoint catalog: every tensor of a checkpoint directory, where its
// bytes are, and the parsed headers they came from.
//
// A checkpoint directory (Hugging Face layout) holds one or more *.safetensors
// files, usually model.safetensors or model-0000i-of-0000n.safetensors, an
// optional model.safetensors.index.json and config/tokenizer files. Loading
// lists the directory (one level, delimiter "/"), reads each safetensors
// header with ranged reads pinned to the generation seen in the listing
// (8 bytes plus a speculative 64 KiB in one read, then the rest of a longer
// header), parses every *.safetensors.index.json, and builds the catalog.
//
// Cross-checks: a tensor that an index places in a file whose header lacks it,
// a file an index names that does not exist, and a tensor present in two files
// are errors. Tensors present in a shard but absent from the index are
// accepted (transformers loads them too).
//
// Two entry points: Checkpoint::Load fails on the first problem (for mounting);
// ScanCheckpoint reports every file's own status and every cross-file problem,
// and still builds a catalog from the files that parsed (for `tensorfs
// inspect`, which must show the healthy files next to the broken one).
//
// Thread-safety: a Checkpoint is immutable once built; its const methods may be
// called from any number of threads. Load and ScanCheckpoint may run
// concurrently with each other; they call the ObjectStore from several threads
// (which ObjectStore allows).
#ifndef TENSORFS_CORE_SAFETENSORS_CHECKPOINT_H_
#define TENSORFS_CORE_SAFETENSORS_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/safetensors/dtype.h"
#include "core/safetensors/header.h"
#include "core/safetensors/index.h"
#include "core/store/object_store.h"
#include "core/util/status.h"
#include "core/util/types.h"

namespace tensorfs {

// The first read of a header asks for the length plus this many bytes, which
// covers the whole header of most shards in one round trip.
inline constexpr uint64_t kSpeculativeHeaderBytes = 64 * 1024;
// Headers are read with at most this many reads in flight.
inline constexpr int kMaxParallelHeaderReads = 16;

// One tensor of the catalog.
struct CatalogEntry {
  std::string name;
  std::string file;       // object name of the file that holds it (with the directory prefix)
  ObjectId object;        // that file, pinned to the generation the catalog was built from
  size_t file_index = 0;  // into Checkpoint::files()
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;
  ByteRange range;        // absolute: data_start() + begin, end - begin

  uint64_t size() const { return range.length; }
};

// One parsed safetensors file.
struct CheckpointFile {
  ObjectInfo object;
  SafetensorsHeader header;
};

// One parsed index file.
struct CheckpointIndex {
  ObjectInfo object;
  SafetensorsIndex index;
};

// True for names ending in ".safetensors" (with or without a directory prefix).
bool IsSafetensorsFileName(std::string_view name);

// True for a shard of a checkpoint in several files, named as Hugging Face
// names them: "...-00002-of-00005.safetensors" (a count of 2 or more).
bool IsOneOfSeveralShards(std::string_view name);

// True if the listing holds at least one *.safetensors object.
bool IsCheckpointDirectory(const Listing& listing);

// Reads and validates the header of one safetensors object, pinned to
// object.generation. Store errors (kNotFound, kStale, kUnavailable) keep their
// code; a malformed header is kCorrupt naming the object.
StatusOr<SafetensorsHeader> ReadSafetensorsHeader(ObjectStore& store, const ObjectInfo& object);

// Reads and parses one index object (at most kMaxIndexBytes).
StatusOr<SafetensorsIndex> ReadSafetensorsIndex(ObjectStore& store, const ObjectInfo& object);

class Checkpoint {
 public:
  // An empty checkpoint: no files, no tensors.
  Checkpoint() = default;

  // Lists `dir_prefix` ("" for the store root, or "models/llama/"; a missing
  // trailing '/' is added), reads every header and index, and builds the
  // catalog. Fails on the first problem: a listing error, no *.safetensors
  // file (kNotFound), a file that cannot be read or parsed, an index that
  // cannot be parsed, or a cross-check failure.
  static StatusOr<Checkpoint> Load(ObjectStore& store, std::string_view dir_prefix);

  // Builds a catalog from parsed parts. Cross-check failures are appended to
  // `problems` (when not null) and the catalog is built anyway: a tensor in two
  // files is taken from the first. Files in `unreadable` exist but could not
  // be parsed; indexes naming them are not reported again.
  static Checkpoint Build(std::string dir_prefix, std::vector<CheckpointFile> files,
                          std::vector<CheckpointIndex> indexes,
                          const std::vector<std::string>& unreadable, std::vector<Status>* problems);

  // With a trailing '/' unless empty.
  const std::string& dir_prefix() const { return dir_prefix_; }
  // Storage order: by file (in listing order), then by offset.
  const std::vector<CatalogEntry>& tensors() const { return tensors_; }
  const CatalogEntry* Find(std::string_view tensor_name) const;
  // In listing order (sorted by object name).
  const std::vector<CheckpointFile>& files() const { return files_; }
  // `object_name` includes the directory prefix.
  const CheckpointFile* FindFile(std::string_view object_name) const;
  const std::vector<CheckpointIndex>& indexes() const { return indexes_; }
  // Sum of all tensor sizes.
  uint64_t total_tensor_bytes() const { return total_tensor_bytes_; }
  // Tensor names in storage order (what LayerGrouper::Group takes).
  std::vector<std::string> TensorNames() const;

 private:
  std::string dir_prefix_;
  std::vector<CheckpointFile> files_;
  std::vector<CheckpointIndex> indexes_;
  std::vector<CatalogEntry> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_by_name_;
  std::map<std::string, size_t, std::less<>> file_by_name_;
  uint64_t total_tensor_bytes_ = 0;
};

// Every file's outcome, for callers that report problems per file.
struct FileScan {
  ObjectInfo object;
  StatusOr<SafetensorsHeader> header;
};

struct IndexScan {
  ObjectInfo object;
  StatusOr<SafetensorsIndex> index;
};

struct CheckpointScan {
  std::string dir_prefix;          // normalized, as Checkpoint::dir_prefix()
  std::string location;            // "<store description>/<dir_prefix>", for messages
  std::vector<FileScan> files;     // every *.safetensors object, listing order
  std::vector<IndexScan> indexes;  // every *.safetensors.index.json object
  std::vector<Status> problems;    // cross-file problems (index vs headers, duplicates)
  Checkpoint checkpoint;           // built from the files that parsed

  // OK when every file and index parsed and there is no problem; otherwise the
  // first file error, else the first index error, else the first problem.
  Status FirstError() const;
};

// Lists `dir_prefix` and reads every header and index, collecting failures
// instead of stopping at the first. Fails only when the listing fails. A
// directory without *.safetensors files gives an empty scan.
StatusOr<CheckpointScan> ScanCheckpoint(ObjectStore& store, std::string_view dir_prefix);

// The same for a directory already listed (`listing` is its one-level listing).
CheckpointScan ScanListing(ObjectStore& store, std::string_view dir_prefix, const Listing& listing);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_SAFETENSORS_CHECKPOINT_H_
