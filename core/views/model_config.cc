#include "core/views/model_config.h"

#include <array>
#include <string_view>

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

}  // namespace

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
