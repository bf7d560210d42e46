// ParseModelConfig: config.json read as nlohmann's parser reads it (order,
// repeated keys), in linear time, refusing nesting the rewrite and the
// serializer would recurse through.
#include "core/views/model_config.h"

#include <gtest/gtest.h>

#include <string>

namespace tensorfs {
namespace {

using Json = nlohmann::ordered_json;

TEST(ConfigParseTest, KeepsKeyOrderAsWritten) {
  std::optional<Json> config = ParseModelConfig(R"({"z":1,"a":{"y":[1,2.5,"s",null,true]},"m":false})");
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->dump(), R"({"z":1,"a":{"y":[1,2.5,"s",null,true]},"m":false})");
}

TEST(ConfigParseTest, RepeatedKeyKeepsItsFirstPlaceAndLastValue) {
  const std::string text = R"({"a":1,"b":2,"a":{"c":3,"c":4}})";
  std::optional<Json> config = ParseModelConfig(text);
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->dump(), R"({"a":{"c":4},"b":2})");
  EXPECT_EQ(*config, Json::parse(text));
}

TEST(ConfigParseTest, ObjectOfManyKeysMatchesNlohmann) {
  std::string text = "{";
  for (int i = 0; i < 3000; ++i) text += (i > 0 ? ",\"k" : "\"k") + std::to_string(i % 2500) + "\":" + std::to_string(i);
  text += "}";
  std::optional<Json> config = ParseModelConfig(text);
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->size(), 2500u);
  EXPECT_EQ(*config, Json::parse(text));
}

TEST(ConfigParseTest, RefusesInvalidJson) {
  EXPECT_FALSE(ParseModelConfig(R"({"a":1)").has_value());
  EXPECT_FALSE(ParseModelConfig(R"({"a":1} {})").has_value());
  EXPECT_FALSE(ParseModelConfig("").has_value());
}

TEST(ConfigParseTest, AcceptsNestingAtTheLimit) {
  const std::string text = std::string(kMaxConfigDepth, '[') + std::string(kMaxConfigDepth, ']');
  EXPECT_TRUE(ParseModelConfig(text).has_value());
}

TEST(ConfigParseTest, RefusesNestingPastTheLimit) {
  // Two million levels: recursing through them would overflow the stack.
  const std::string text = R"({"a":)" + std::string(2'000'000, '[') + std::string(2'000'000, ']') + "}";
  EXPECT_FALSE(ParseModelConfig(text).has_value());
}

}  // namespace
}  // namespace tensorfs
