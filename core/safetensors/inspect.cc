#include "core/safetensors/inspect.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "core/safetensors/checkpoint.h"
#include "core/safetensors/header.h"

namespace tensorfs {
namespace {

std::string Relative(std::string_view object_name, std::string_view prefix) {
  if (object_name.starts_with(prefix)) object_name.remove_prefix(prefix.size());
  return std::string(object_name);
}

// Columns padded to their widest cell; columns in `right` are right-aligned.
// The last column is not padded.
std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows,
                        const std::vector<bool>& right) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      const bool last = c + 1 == row.size();
      const size_t pad = width[c] - std::min(width[c], row[c].size());
      if (right[c]) line.append(pad, ' ');
      line += row[c];
      if (!right[c] && !last) line.append(pad, ' ');
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string Join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

}  // namespace

bool InspectReport::AllFilesOk() const {
  return std::all_of(files.begin(), files.end(), [](const File& f) { return f.status.ok(); });
}

bool InspectReport::ok() const { return problems.empty() && AllFilesOk(); }

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", value, kUnits[unit]);
  return buf;
}

StatusOr<InspectReport> BuildInspectReport(ObjectStore& store, std::string_view dir_prefix,
                                           const LayerGrouper& grouper) {
  ASSIGN_OR_RETURN(CheckpointScan scan, ScanCheckpoint(store, dir_prefix));
  if (scan.files.empty()) {
    return NotFoundError("no .safetensors files in " + scan.location +
                         " (a checkpoint directory holds model.safetensors or "
                         "model-00001-of-0000N.safetensors shards)");
  }
  const std::string& prefix = scan.dir_prefix;
  InspectReport report;
  report.location = scan.location;
  report.grouping_regex = grouper.override_regex();

  for (const FileScan& f : scan.files) {
    InspectReport::File file{.name = Relative(f.object.name, prefix), .size = f.object.size};
    if (f.header.ok()) {
      file.header_bytes = f.header->data_start();
      file.tensor_count = f.header->tensors.size();
    } else {
      file.status = f.header.status();
    }
    report.files.push_back(std::move(file));
  }
  for (const IndexScan& i : scan.indexes) {
    report.indexes.push_back(Relative(i.object.name, prefix));
    if (!i.index.ok()) report.problems.push_back(i.index.status().message());
  }
  for (const Status& p : scan.problems) report.problems.push_back(p.message());

  const Checkpoint& checkpoint = scan.checkpoint;
  const std::vector<LayerGroup> groups = grouper.Group(checkpoint.TensorNames());
  std::map<std::string, std::string, std::less<>> group_of;
  for (const LayerGroup& g : groups) {
    for (const std::string& t : g.tensors) group_of.emplace(t, g.prefix);
  }
  for (const CatalogEntry& e : checkpoint.tensors()) {
    report.tensors.push_back(InspectReport::Tensor{
        .name = e.name,
        .file = Relative(e.file, prefix),
        .dtype = e.dtype,
        .shape = e.shape,
        .offset = e.range.offset,
        .bytes = e.range.length,
        .group = group_of[e.name],
    });
  }
  report.total_tensor_bytes = checkpoint.total_tensor_bytes();

  for (const LayerGroup& g : groups) {
    InspectReport::Group group{.prefix = g.prefix, .kind = g.kind, .tensor_count = g.tensors.size()};
    std::vector<bool> in_file(checkpoint.files().size(), false);
    for (const std::string& t : g.tensors) {
      const CatalogEntry* e = checkpoint.Find(t);
      TENSORFS_CHECK(e != nullptr);
      group.bytes += e->range.length;
      in_file[e->file_index] = true;
    }
    for (size_t fi = 0; fi < in_file.size(); ++fi) {
      if (in_file[fi]) group.files.push_back(Relative(checkpoint.files()[fi].object.name, prefix));
    }
    report.groups.push_back(std::move(group));
  }
  return report;
}

StatusOr<InspectReport> Inspect(ObjectStore& store, std::string_view dir_prefix,
                                std::string_view layer_regex) {
  ASSIGN_OR_RETURN(LayerGrouper grouper, LayerGrouper::Create(layer_regex));
  return BuildInspectReport(store, dir_prefix, grouper);
}

std::string RenderInspectText(const InspectReport& report) {
  size_t bad_files = 0;
  for (const auto& f : report.files) bad_files += f.status.ok() ? 0 : 1;
  std::string out = "Checkpoint: " + report.location + "\n";
  out += "Files: " + std::to_string(report.files.size());
  if (bad_files > 0) out += " (" + std::to_string(bad_files) + " unusable)";
  out += "   Tensors: " + std::to_string(report.tensors.size()) +
         "   Tensor bytes: " + FormatBytes(report.total_tensor_bytes) + " (" +
         std::to_string(report.total_tensor_bytes) + ")" +
         "   Layer groups: " + std::to_string(report.groups.size()) + "\n";
  out += "Index: " + (report.indexes.empty() ? std::string("none") : Join(report.indexes, ", ")) + "\n";
  out += "Grouping: " +
         (report.grouping_regex.empty() ? std::string("built-in rules")
                                        : "regex '" + report.grouping_regex + "'") +
         "\n";
  out += "Status: " + std::string(report.ok() ? "ok" : "PROBLEMS FOUND") + "\n";
  if (!report.gguf.empty()) out += "GGUF: " + report.gguf + "\n";
  out += "\n";

  std::vector<std::vector<std::string>> rows;
  for (const auto& f : report.files) {
    rows.push_back({f.name, FormatBytes(f.size),
                    f.status.ok() ? FormatBytes(f.header_bytes) : "-",
                    f.status.ok() ? std::to_string(f.tensor_count) : "-",
                    f.status.ok() ? "ok" : f.status.ToString()});
  }
  out += RenderTable({"FILE", "SIZE", "HEADER", "TENSORS", "STATUS"}, rows,
                     {false, true, true, true, false});

  if (!report.problems.empty()) {
    out += "\nProblems:\n";
    for (const std::string& p : report.problems) out += "  - " + p + "\n";
  }

  rows.clear();
  for (const auto& g : report.groups) {
    rows.push_back({g.prefix, std::string(LayerGroupKindName(g.kind)), std::to_string(g.tensor_count),
                    FormatBytes(g.bytes), Join(g.files, ", ")});
  }
  out += "\n";
  out += RenderTable({"LAYER GROUP", "KIND", "TENSORS", "BYTES", "FILES"}, rows,
                     {false, false, true, true, false});

  rows.clear();
  for (const auto& t : report.tensors) {
    rows.push_back({t.name, std::string(DtypeName(t.dtype)), FormatShape(t.shape), FormatBytes(t.bytes),
                    t.file, t.group});
  }
  out += "\n";
  out += RenderTable({"TENSOR", "DTYPE", "SHAPE", "BYTES", "FILE", "GROUP"}, rows,
                     {false, false, false, true, false, false});
  return out;
}

std::string RenderInspectJson(const InspectReport& report) {
  using Json = nlohmann::ordered_json;
  Json doc;
  doc["location"] = report.location;
  doc["ok"] = report.ok();
  doc["grouping_regex"] = report.grouping_regex;
  doc["total_tensor_bytes"] = report.total_tensor_bytes;
  if (!report.gguf.empty()) doc["gguf"] = report.gguf;
  doc["files"] = Json::array();
  for (const auto& f : report.files) {
    Json file;
    file["name"] = f.name;
    file["size"] = f.size;
    file["header_bytes"] = f.header_bytes;
    file["tensor_count"] = f.tensor_count;
    file["ok"] = f.status.ok();
    if (!f.status.ok()) {
      file["code"] = std::string(ErrorCodeName(f.status.code()));
      file["error"] = f.status.message();
    }
    doc["files"].push_back(std::move(file));
  }
  doc["indexes"] = report.indexes;
  doc["problems"] = report.problems;
  doc["groups"] = Json::array();
  for (const auto& g : report.groups) {
    Json group;
    group["prefix"] = g.prefix;
    group["kind"] = std::string(LayerGroupKindName(g.kind));
    group["tensor_count"] = g.tensor_count;
    group["bytes"] = g.bytes;
    group["files"] = g.files;
    doc["groups"].push_back(std::move(group));
  }
  doc["tensors"] = Json::array();
  for (const auto& t : report.tensors) {
    Json tensor;
    tensor["name"] = t.name;
    tensor["file"] = t.file;
    tensor["dtype"] = std::string(DtypeName(t.dtype));
    tensor["shape"] = t.shape;
    tensor["offset"] = t.offset;
    tensor["bytes"] = t.bytes;
    tensor["group"] = t.group;
    doc["tensors"].push_back(std::move(tensor));
  }
  return doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace tensorfs
