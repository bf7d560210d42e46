// config.json as the views that change a checkpoint's dtype rewrite it.
//
// transformers names the dtype of a model's weights "dtype" since 4.56 and
// "torch_dtype" before. Every version since reads either key (when both are
// present, "dtype" wins), at the top level and in each nested sub-config
// (text_config, vision_config, ... of multimodal models); 4.56 and later write
// "dtype" only. from_pretrained's default dtype ("auto" in transformers 5)
// loads the weights in the dtype the config declares, so a view that casts the
// weights has to say so in the config, under whichever key the config uses.
//
// Called by BuildView (views.cc) for @bf16, @f16, @bnb-nf4 and @bnb-int8.
// Thread-safety: pure functions of their arguments.
#ifndef TENSORFS_CORE_VIEWS_MODEL_CONFIG_H_
#define TENSORFS_CORE_VIEWS_MODEL_CONFIG_H_

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "core/safetensors/dtype.h"

namespace tensorfs {

enum class ConfigRewrite {
  kCastBf16,  // @bf16
  kCastF16,   // @f16
  kBnbNf4,    // @bnb-nf4
  kBnbInt8,   // @bnb-int8
};

// Deepest nesting of objects and arrays ParseModelConfig accepts; configs nest
// a few levels (a sub-config's rope_scaling), and the rewrite and the
// serializer recurse once per level.
inline constexpr int kMaxConfigDepth = 128;

// Parses config.json text as the views read it, in time linear in its size:
// keys keep their order, a repeated key keeps its first place and its last
// value (as nlohmann::ordered_json::parse does, but without its search of the
// whole object for every key, which is quadratic in the keys of an object).
// nullopt when the text is not JSON or nests deeper than kMaxConfigDepth.
std::optional<nlohmann::ordered_json> ParseModelConfig(std::string_view text);

// The dtype the config declares for its weights at its top level, as
// transformers reads it: "dtype", else "torch_dtype"; only a value naming a
// floating dtype ("float32", "float16", "bfloat16") counts. nullopt when
// neither key does (absent, null, a per-sub-config map, anything else).
std::optional<std::string> DeclaredWeightDtype(const nlohmann::ordered_json& config);

// `config` (a JSON object) as view `how` shows it.
//
// Cast views: every "dtype" and "torch_dtype" whose value names a floating
// dtype, at the top level and in any nested object (a sub-config), becomes
// "bfloat16" or "float16"; a per-sub-config map ("dtype": {"text_config":
// "float32", ...}) has each such entry changed. Other values (null, numbers:
// "dtype" is also a token in some vocabularies) stay. No key is added: a config
// without a dtype key makes transformers take the dtype of the weights, which
// the view has cast already.
//
// bitsandbytes views: "quantization_config" is set (added, or replaced) to what
// transformers writes for a model quantized with BitsAndBytesConfig, with
// bnb_4bit_compute_dtype the dtype the model loads in: DeclaredWeightDtype,
// else `quantized_dtype` (the dtype of the tensors the view quantizes), else
// float32. The dtype keys stay: the tensors the view does not quantize keep
// their dtype.
nlohmann::ordered_json RewriteModelConfig(nlohmann::ordered_json config, ConfigRewrite how,
                                          std::optional<Dtype> quantized_dtype);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_MODEL_CONFIG_H_
