#include "core/views/model_config.h"

#include <array>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tensorfs {
namespace {

// The keys transformers reads the weights' dtype from, newest first.
constexpr std::array<std::string_view, 2> kDtypeKeys = {"dtype", "torch_dtype"};

bool NamesFloatDtype(const nlohmann::ordered_json& value) {
  if (!value.is_string()) return false;
  const std::string& name = value.get_ref<const std::string&>();
  return name == "float32" || name == "float16" || name == "bfloat16";
}

std::string_view TorchName(Dtype dtype) {
  switch (dtype) {
    case Dtype::F16: return "float16";
    case Dtype::BF16: return "bfloat16";
    default: return "float32";
  }
}

// Sets the floating dtype keys of `object` and of every object nested in it.
void SetDtypeKeys(nlohmann::ordered_json& object, std::string_view target) {
  for (auto& [key, value] : object.items()) {
    const bool dtype_key = key == kDtypeKeys[0] || key == kDtypeKeys[1];
    if (dtype_key && NamesFloatDtype(value)) {
      value = target;
    } else if (dtype_key && value.is_object()) {  // per-sub-config map
      for (auto& [sub, sub_dtype] : value.items()) {
        if (NamesFloatDtype(sub_dtype)) sub_dtype = target;
      }
    } else if (value.is_object()) {
      SetDtypeKeys(value, target);
    }
  }
}

nlohmann::ordered_json BnbQuantizationConfig(bool nf4, std::string_view compute_dtype) {
  nlohmann::ordered_json q;
  q["quant_method"] = "bitsandbytes";
  q["_load_in_4bit"] = nf4;
  q["_load_in_8bit"] = !nf4;
  q["load_in_4bit"] = nf4;
  q["load_in_8bit"] = !nf4;
  q["bnb_4bit_quant_type"] = "nf4";
  q["bnb_4bit_use_double_quant"] = false;
  q["bnb_4bit_compute_dtype"] = compute_dtype;
  q["bnb_4bit_quant_storage"] = "uint8";
  q["llm_int8_threshold"] = 6.0;
  q["llm_int8_has_fp16_weight"] = false;
  q["llm_int8_skip_modules"] = nullptr;
  q["llm_int8_enable_fp32_cpu_offload"] = false;
  return q;
}

// Builds an ordered_json from nlohmann's SAX events, appending each key to its
// object's vector and finding repeats through a hash map kept only while the
// object is open.
class ConfigBuilder {
 public:
  using Json = nlohmann::ordered_json;
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  Json& root() { return root_; }

  bool null() { return Put(nullptr) != nullptr; }
  bool boolean(bool v) { return Put(v) != nullptr; }
  bool number_integer(number_integer_t v) { return Put(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return Put(v) != nullptr; }
  bool number_float(number_float_t v, const string_t&) { return Put(v) != nullptr; }
  bool string(string_t& v) { return Put(std::move(v)) != nullptr; }
  bool binary(binary_t&) { return false; }  // never in JSON text
  bool start_object(std::size_t) { return Open(Json::object()); }
  bool start_array(std::size_t) { return Open(Json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(string_t& k) {
    // ordered_map is a vector of (key, value) pairs.
    std::vector<std::pair<const std::string, Json>>& members = open_.back()->get_ref<Json::object_t&>();
    auto [it, inserted] = keys_.back().try_emplace(k, members.size());
    if (inserted) members.emplace_back(std::move(k), nullptr);
    next_ = &members[it->second].second;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const Json::exception&) { return false; }

 private:
  // Stores `v` where the next value goes; where it went, or nullptr.
  template <typename V>
  Json* Put(V&& v) {
    if (open_.empty()) {
      root_ = Json(std::forward<V>(v));
      return &root_;
    }
    Json* top = open_.back();
    if (top->is_array()) {
      top->get_ref<Json::array_t&>().emplace_back(std::forward<V>(v));
      return &top->back();
    }
    *next_ = Json(std::forward<V>(v));
    return next_;
  }
  bool Open(Json empty) {
    if (open_.size() >= static_cast<size_t>(kMaxConfigDepth)) return false;
    Json* j = Put(std::move(empty));
    open_.push_back(j);
    keys_.emplace_back();
    return true;
  }
  bool Close() {
    open_.pop_back();
    keys_.pop_back();
    return true;
  }

  Json root_;
  std::vector<Json*> open_;  // the containers being filled, outermost first
  std::vector<std::unordered_map<std::string, size_t>> keys_;  // per open container: key -> index
  Json* next_ = nullptr;     // in an object: the value of the last key
};

}  // namespace

std::optional<nlohmann::ordered_json> ParseModelConfig(std::string_view text) {
  ConfigBuilder builder;
  if (!nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &builder)) return std::nullopt;
  return std::move(builder.root());
}

std::optional<std::string> DeclaredWeightDtype(const nlohmann::ordered_json& config) {
  if (!config.is_object()) return std::nullopt;
  for (std::string_view key : kDtypeKeys) {
    auto it = config.find(std::string(key));
    if (it == config.end() || it->is_null()) continue;
    // A non-null "dtype" hides "torch_dtype", as in transformers' config init.
    if (NamesFloatDtype(*it)) return it->get<std::string>();
    return std::nullopt;
  }
  return std::nullopt;
}

nlohmann::ordered_json RewriteModelConfig(nlohmann::ordered_json config, ConfigRewrite how,
                                          std::optional<Dtype> quantized_dtype) {
  if (!config.is_object()) return config;
  switch (how) {
    case ConfigRewrite::kCastBf16:
    case ConfigRewrite::kCastF16:
      SetDtypeKeys(config, how == ConfigRewrite::kCastBf16 ? "bfloat16" : "float16");
      return config;
    case ConfigRewrite::kBnbNf4:
    case ConfigRewrite::kBnbInt8: {
      std::string compute = DeclaredWeightDtype(config).value_or(
          std::string(TorchName(quantized_dtype.value_or(Dtype::F32))));
      config["quantization_config"] = BnbQuantizationConfig(how == ConfigRewrite::kBnbNf4, compute);
      return config;
    }
  }
  return config;
}

}  // namespace tensorfs
