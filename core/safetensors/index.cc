#include "core/safetensors/index.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

namespace tensorfs {
namespace {

using Json = nlohmann::json;

Status IndexError(std::string_view file, std::string_view what) {
  return CorruptError(std::string(file) + ": " + std::string(what));
}

std::string Describe(const Json& j) {
  if (j.is_number()) return "the number " + j.dump();
  if (j.is_string()) return "the string " + j.dump();
  if (j.is_object()) return "an object";
  if (j.is_array()) return "an array";
  if (j.is_boolean()) return "a boolean";
  return "null";
}

// A weight_map file must name something inside the index's directory.
bool IsPlainRelativePath(std::string_view path) {
  if (path.empty() || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string_view part = path.substr(start, slash == std::string_view::npos ? std::string_view::npos
                                                                                : slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return true;
}

struct DuplicateKey {
  std::string key;
};

}  // namespace

std::vector<std::string> SafetensorsIndex::Files() const {
  std::set<std::string> files;
  for (const auto& [tensor, file] : weight_map) files.insert(file);
  return {files.begin(), files.end()};
}

bool IsIndexFileName(std::string_view name) {
  constexpr std::string_view kSuffix = ".safetensors.index.json";
  size_t slash = name.rfind('/');
  std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  return base.size() > kSuffix.size() && base.ends_with(kSuffix);
}

StatusOr<SafetensorsIndex> ParseIndex(std::string_view file_name, std::string_view json) {
  // Rejects a tensor listed twice in weight_map: readers would disagree on
  // which shard holds it.
  std::string top_key;
  std::set<std::string> tensors_seen;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event != Json::parse_event_t::key) return true;
    const std::string& key = parsed.get_ref<const std::string&>();
    if (depth == 1) {
      top_key = key;
    } else if (depth == 2 && top_key == "weight_map" && !tensors_seen.insert(key).second) {
      throw DuplicateKey{key};
    }
    return true;
  };
  // nlohmann's parser stops at a NUL as if the input ended there.
  if (size_t nul = json.find('\0'); nul != std::string_view::npos) {
    return IndexError(file_name, "not valid JSON: NUL byte at offset " + std::to_string(nul));
  }
  Json doc;
  try {
    doc = Json::parse(json.begin(), json.end(), callback);
  } catch (const DuplicateKey& e) {
    return IndexError(file_name, "\"weight_map\" lists tensor '" + e.key + "' twice");
  } catch (const Json::exception& e) {
    std::string what = e.what();
    if (size_t close = what.find("] "); what.starts_with("[json.exception") && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    return IndexError(file_name, "not valid JSON: " + what);
  }
  if (!doc.is_object()) {
    return IndexError(file_name, "must be a JSON object with \"weight_map\", found " + Describe(doc));
  }

  SafetensorsIndex index;
  if (auto meta = doc.find("metadata"); meta != doc.end() && !meta->is_null()) {
    if (!meta->is_object()) {
      return IndexError(file_name, "\"metadata\" must be an object, found " + Describe(*meta));
    }
    for (const auto& [key, value] : meta->items()) {
      index.metadata.emplace(key, value.is_string() ? value.get<std::string>() : value.dump());
    }
    if (auto total = meta->find("total_size"); total != meta->end() && !total->is_null()) {
      if (total->is_number_unsigned()) {
        index.total_size = total->get<uint64_t>();
      } else if (total->is_number_float() && total->get<double>() >= 0 &&
                 total->get<double>() < 18446744073709551616.0 &&
                 std::floor(total->get<double>()) == total->get<double>()) {
        // Some writers emit the byte count as a float ("16060522496.0").
        index.total_size = static_cast<uint64_t>(total->get<double>());
      } else {
        return IndexError(file_name, "\"metadata\".\"total_size\" must be a non-negative integer, found " +
                                         Describe(*total));
      }
    }
  }

  auto map = doc.find("weight_map");
  if (map == doc.end()) {
    return IndexError(file_name, "has no \"weight_map\" (the object mapping tensor names to shard files)");
  }
  if (!map->is_object()) {
    return IndexError(file_name, "\"weight_map\" must be an object mapping tensor names to shard files, found " +
                                     Describe(*map));
  }
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string()) {
      return IndexError(file_name, "\"weight_map\" maps tensor '" + tensor + "' to " + Describe(file) +
                                       "; it must be a shard file name");
    }
    const std::string& shard = file.get_ref<const std::string&>();
    if (!IsPlainRelativePath(shard)) {
      return IndexError(file_name, "\"weight_map\" maps tensor '" + tensor + "' to \"" + shard +
                                       "\", which is not a file name relative to the index's directory");
    }
    index.weight_map.emplace(tensor, shard);
  }
  return index;
}

}  // namespace tensorfs
