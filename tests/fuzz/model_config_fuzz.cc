// libFuzzer target: config.json as the dtype-changing views rewrite it. Parses
// the bytes as the views do (checked against nlohmann's own parser) and, for a
// JSON object, runs every rewrite and
// serializes the result as the view file shows it. The rewrite keeps the
// config an object, and a cast view leaves no floating "dtype" other than the
// one it casts to at the top level.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/views/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorfs;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<nlohmann::ordered_json> parsed = ParseModelConfig(text);
  // What the views parse is what nlohmann's own parser reads, up to the depth limit.
  auto reference = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.has_value() != !reference.is_discarded()) {
    if (!parsed && !reference.is_discarded()) return 0;  // deeper than kMaxConfigDepth: refused
    std::abort();
  }
  if (!parsed || !parsed->is_object()) return 0;
  if (*parsed != reference) std::abort();
  const nlohmann::ordered_json& config = *parsed;
  (void)DeclaredWeightDtype(config);
  const std::optional<Dtype> quantized[] = {std::nullopt, Dtype::BF16, Dtype::F32};
  const std::optional<Dtype> q = quantized[size % 3];
  for (ConfigRewrite how : {ConfigRewrite::kCastBf16, ConfigRewrite::kCastF16, ConfigRewrite::kBnbNf4,
                            ConfigRewrite::kBnbInt8}) {
    nlohmann::ordered_json out = RewriteModelConfig(config, how, q);
    if (!out.is_object()) std::abort();
    const std::string text = out.dump(2);
    if (how == ConfigRewrite::kCastBf16 || how == ConfigRewrite::kCastF16) {
      const std::optional<std::string> declared = DeclaredWeightDtype(out);
      if (declared && *declared != (how == ConfigRewrite::kCastBf16 ? "bfloat16" : "float16")) std::abort();
    } else if (!out.contains("quantization_config")) {
      std::abort();
    }
  }
  return 0;
}
