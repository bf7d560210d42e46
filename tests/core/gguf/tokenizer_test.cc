#include "core/gguf/tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/gguf/sentencepiece_model.h"
#include "tests/support/test_util.h"

namespace tensorfs {
namespace {

using json = nlohmann::json;

// The Split patterns of real tokenizer.json files (Llama 3, Qwen 2, Qwen 3.5,
// Mistral-Nemo), as they are stored there.
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen35Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kTekkenRegex[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A small byte-level BPE tokenizer.json in the shape Hugging Face writes them.
struct Bpe {
  std::string regex = kLlama3Regex;
  bool ignore_merges = true;
  bool pair_merges = false;
  json normalizer = nullptr;
  json vocab = json::object({{"a", 0}, {"b", 1}, {"\xc4\xa0", 2}, {"ab", 3}, {"\xc4\xa0" "ab", 4}, {"c", 5}});
  json added = json::array();
  json post_processor = nullptr;
  std::string model_type = "BPE";
  bool byte_fallback = false;
  std::string decoder = "ByteLevel";

  Bpe& Added(int id, const std::string& content, bool special, bool normalized = false) {
    added.push_back({{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false},   {"normalized", normalized}, {"special", special}});
    return *this;
  }

  json Json() const {
    json merges = pair_merges ? json::array({json::array({"a", "b"}), json::array({"\xc4\xa0", "ab"})})
                              : json::array({"a b", "\xc4\xa0 ab"});
    return {
        {"version", "1.0"},
        {"added_tokens", added},
        {"normalizer", normalizer},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           json::array({{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}}},
        {"post_processor", post_processor},
        {"decoder", {{"type", decoder}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", model_type},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", byte_fallback},
          {"ignore_merges", ignore_merges},
          {"vocab", vocab},
          {"merges", merges}}},
    };
  }
  std::string Text() const { return Json().dump(); }
};

json WithSpecialsForShapes() {
  Bpe bpe;
  bpe.ignore_merges = false;
  bpe.regex = kQwen2Regex;
  bpe.Added(6, "<s>", true);
  bpe.post_processor = {{"type", "TemplateProcessing"},
                        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
                        {"pair", json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}},
                                              {{"Sequence", {{"id", "B"}}}}})}};
  return bpe.Json();
}

TokenizerFiles BpeFiles(const Bpe& bpe, const json& tokenizer_config = nullptr) {
  TokenizerFiles files;
  files.tokenizer_json = bpe.Text();
  if (!tokenizer_config.is_null()) files.tokenizer_config_json = tokenizer_config.dump();
  return files;
}

GgufVocab Convert(const TokenizerFiles& files, const json& config = json::object(), std::string_view arch = "llama") {
  StatusOr<GgufVocab> vocab = ConvertTokenizer(files, config, arch);
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  return vocab.ok() ? std::move(vocab).value() : GgufVocab{};
}

std::string Refusal(const TokenizerFiles& files, const json& config = json::object(), std::string_view arch = "llama") {
  StatusOr<GgufVocab> vocab = ConvertTokenizer(files, config, arch);
  EXPECT_FALSE(vocab.ok());
  return vocab.ok() ? "" : vocab.status().message();
}

template <typename T>
T Value(const GgufVocab& v, std::string_view key) {
  const T* value = v.metadata.Get<T>(key);
  EXPECT_NE(value, nullptr) << key << " missing or of another type";
  return value != nullptr ? *value : T{};
}

std::vector<std::string> Tokens(const GgufVocab& v) { return Value<std::vector<std::string>>(v, "tokenizer.ggml.tokens"); }
std::vector<int32_t> Types(const GgufVocab& v) { return Value<std::vector<int32_t>>(v, "tokenizer.ggml.token_type"); }

constexpr int32_t kNormal = 1;
constexpr int32_t kUnknown = 2;
constexpr int32_t kControl = 3;
constexpr int32_t kUserDefined = 4;
constexpr int32_t kUnused = 5;
constexpr int32_t kByte = 6;

// ---- Byte-level BPE: the pre-tokenizer table ----

TEST(BpeTokenizerTest, Llama3SplitPatternIsLlamaBpe) {
  const GgufVocab v = Convert(BpeFiles(Bpe{}));
  EXPECT_EQ(Value<std::string>(v, "tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(Value<std::string>(v, "tokenizer.ggml.pre"), "llama-bpe");
}

TEST(BpeTokenizerTest, Qwen2SplitPatternWithNfcIsQwen2) {
  Bpe bpe;
  bpe.regex = kQwen2Regex;
  bpe.ignore_merges = false;
  bpe.normalizer = {{"type", "NFC"}};
  EXPECT_EQ(Value<std::string>(Convert(BpeFiles(bpe), json::object(), "qwen2"), "tokenizer.ggml.pre"), "qwen2");
}

TEST(BpeTokenizerTest, Qwen35SplitPatternIsQwen35) {
  Bpe bpe;
  bpe.regex = kQwen35Regex;
  bpe.ignore_merges = false;
  EXPECT_EQ(Value<std::string>(Convert(BpeFiles(bpe), json::object(), "qwen3"), "tokenizer.ggml.pre"), "qwen35");
}

TEST(BpeTokenizerTest, TekkenSplitPatternIsTekken) {
  Bpe bpe;
  bpe.regex = kTekkenRegex;
  EXPECT_EQ(Value<std::string>(Convert(BpeFiles(bpe)), "tokenizer.ggml.pre"), "tekken");
}

TEST(BpeTokenizerTest, UnknownSplitPatternIsRefusedNotDefaulted) {
  Bpe bpe;
  bpe.regex = R"(\p{L}+|\p{N}+|\s+)";
  const std::string why = Refusal(BpeFiles(bpe));
  EXPECT_NE(why.find("pre-tokenizer splits with a pattern llama.cpp has no pre-tokenizer for (sha256 "), std::string::npos)
      << why;
  EXPECT_NE(why.find(R"('\p{L}+|\p{N}+|\s+')"), std::string::npos) << why;
}

TEST(BpeTokenizerTest, MissingPreTokenizerIsRefused) {
  json j = Bpe{}.Json();
  j["pre_tokenizer"] = nullptr;
  TokenizerFiles files;
  files.tokenizer_json = j.dump();
  EXPECT_EQ(Refusal(files), "tokenizer.json has no pre-tokenizer; llama.cpp would split text with its degraded default");
}

TEST(BpeTokenizerTest, ByteLevelWithItsOwnRegexIsRefused) {
  json j = Bpe{}.Json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  TokenizerFiles files;
  files.tokenizer_json = j.dump();
  EXPECT_EQ(Refusal(files), "tokenizer.json's ByteLevel pre-tokenizer splits with GPT-2's own regex, which tensorfs "
                            "does not map");
}

TEST(BpeTokenizerTest, IgnoreMergesUnlikeThePreTokenizersIsRefused) {
  Bpe bpe;
  bpe.ignore_merges = false;  // Llama 3's pattern, whose llama.cpp pre-tokenizer skips merges of whole words
  EXPECT_EQ(Refusal(BpeFiles(bpe)), "tokenizer.json's BPE merges words already in its vocabulary, but llama.cpp's "
                                    "llama-bpe pre-tokenizer skips them");
}

TEST(BpeTokenizerTest, NormalizerLlamaCppDoesNotApplyIsRefused) {
  Bpe bpe;
  bpe.normalizer = {{"type", "Lowercase"}};
  EXPECT_EQ(Refusal(BpeFiles(bpe)), "tokenizer.json normalizes text (\"Lowercase\"), which llama.cpp's BPE tokenizer "
                                    "does not");
}

TEST(BpeTokenizerTest, NfcWithLlama3PatternIsRefused) {
  Bpe bpe;
  bpe.normalizer = {{"type", "NFC"}};
  EXPECT_NE(Refusal(BpeFiles(bpe)).find("normalizes text (\"NFC\")"), std::string::npos);
}

// ---- Byte-level BPE: tokens, types, merges ----

TEST(BpeTokenizerTest, TokensAreTheVocabularyInIdOrder) {
  const GgufVocab v = Convert(BpeFiles(Bpe{}));
  EXPECT_EQ(Tokens(v), (std::vector<std::string>{"a", "b", "\xc4\xa0", "ab", "\xc4\xa0" "ab", "c"}));
  EXPECT_EQ(Types(v), (std::vector<int32_t>(6, kNormal)));
  EXPECT_EQ(v.tokens, 6u);
}

TEST(BpeTokenizerTest, HolesUpToVocabSizeArePadUnused) {
  Bpe bpe;
  bpe.vocab = json::object({{"a", 0}, {"b", 2}});
  bpe.vocab["ab"] = 3;
  const GgufVocab v = Convert(BpeFiles(bpe), {{"vocab_size", 6}});
  EXPECT_EQ(Tokens(v), (std::vector<std::string>{"a", "[PAD1]", "b", "ab", "[PAD4]", "[PAD5]"}));
  EXPECT_EQ(Types(v), (std::vector<int32_t>{kNormal, kUnused, kNormal, kNormal, kUnused, kUnused}));
  EXPECT_EQ(v.tokens, 6u);
}

TEST(BpeTokenizerTest, MergesAsStringsAreWrittenAsTheyAre) {
  EXPECT_EQ(Value<std::vector<std::string>>(Convert(BpeFiles(Bpe{})), "tokenizer.ggml.merges"),
            (std::vector<std::string>{"a b", "\xc4\xa0 ab"}));
}

TEST(BpeTokenizerTest, MergesAsPairsAreJoinedWithASpace) {
  Bpe bpe;
  bpe.pair_merges = true;
  EXPECT_EQ(Value<std::vector<std::string>>(Convert(BpeFiles(bpe)), "tokenizer.ggml.merges"),
            (std::vector<std::string>{"a b", "\xc4\xa0 ab"}));
}

TEST(BpeTokenizerTest, SpacesInsideMergePairsAreWrittenAsG) {
  json j = Bpe{}.Json();
  j["model"]["vocab"]["a b"] = 6;
  j["model"]["merges"] = json::array({json::array({"a b", "c"})});
  TokenizerFiles files;
  files.tokenizer_json = j.dump();
  EXPECT_EQ(Value<std::vector<std::string>>(Convert(files), "tokenizer.ggml.merges"),
            (std::vector<std::string>{"a\xc4\xa0" "b c"}));
}

TEST(BpeTokenizerTest, NoMergesIsRefused) {
  json j = Bpe{}.Json();
  j["model"]["merges"] = json::array();
  TokenizerFiles files;
  files.tokenizer_json = j.dump();
  EXPECT_EQ(Refusal(files), "tokenizer.json has no merges: llama.cpp's BPE tokenizer cannot load without them");
}

TEST(BpeTokenizerTest, SpecialAddedTokensAreControl) {
  Bpe bpe;
  bpe.Added(6, "<bos>", true);
  EXPECT_EQ(Types(Convert(BpeFiles(bpe)))[6], kControl);
}

TEST(BpeTokenizerTest, AddedTokensThatLookSpecialAreControl) {
  Bpe bpe;
  bpe.Added(6, "<|im_start|>", false).Added(7, "<unused3>", false).Added(8, "<pad>", false, true);
  const std::vector<int32_t> types = Types(Convert(BpeFiles(bpe)));
  EXPECT_EQ(types[6], kControl);
  EXPECT_EQ(types[7], kControl);
  EXPECT_EQ(types[8], kControl);
}

TEST(BpeTokenizerTest, OtherAddedTokensAreUserDefinedWithSpacesRestored) {
  Bpe bpe;
  bpe.Added(6, "<think>", false).Added(7, "\xe2\x96\x81\xe2\x96\x81indent", false, true);
  const GgufVocab v = Convert(BpeFiles(bpe));
  EXPECT_EQ(Types(v)[6], kUserDefined);
  EXPECT_EQ(Types(v)[7], kUserDefined);
  EXPECT_EQ(Tokens(v)[7], "  indent");
}

TEST(BpeTokenizerTest, UnnormalizedAddedTokenThatDecodesDifferentlyIsRefused) {
  Bpe bpe;
  bpe.Added(6, "caf\xc3\xa9", false);  // é is a byte-level character: decoding would change it
  EXPECT_EQ(Refusal(BpeFiles(bpe)), "added token 'caf\xc3\xa9' (id 6) is not normalized and would not come back "
                                    "unchanged from the tokenizer, as the converter needs");
}

TEST(BpeTokenizerTest, NormalizedAddedTokenIsWrittenAsItIs) {
  Bpe bpe;
  bpe.Added(6, "caf\xc3\xa9", false, true);
  EXPECT_EQ(Tokens(Convert(BpeFiles(bpe)))[6], "caf\xc3\xa9");
}

// ---- Byte-level BPE: refusals of the vocabulary itself ----

TEST(BpeTokenizerTest, DuplicateTokensAreRefused) {
  std::string text = Bpe{}.Text();
  const std::string from = "\"ab\":3";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"ab\":3,\"a\":7");
  TokenizerFiles files;
  files.tokenizer_json = text;
  EXPECT_EQ(Refusal(files), "tokenizer.json's vocabulary has the token 'a' twice");
}

TEST(BpeTokenizerTest, AddedTokenRepeatingAVocabularyTokenIsRefused) {
  Bpe bpe;
  bpe.Added(6, "ab", true);
  EXPECT_EQ(Refusal(BpeFiles(bpe)), "tokenizer.json has 'ab' both as token 3 and as added token 6");
}

TEST(BpeTokenizerTest, PaddingThatCollidesWithATokenIsRefused) {
  Bpe bpe;
  bpe.vocab = json::object({{"a", 0}, {"[PAD1]", 2}, {"ab", 3}});
  EXPECT_EQ(Refusal(BpeFiles(bpe), {{"vocab_size", 4}}), "tokenizer.json's vocabulary has the token '[PAD1]' twice (ids 1 and 2); "
                                    "llama.cpp refuses duplicate tokens");
}

TEST(BpeTokenizerTest, VocabularyLargerThanVocabSizeIsRefused) {
  EXPECT_EQ(Refusal(BpeFiles(Bpe{}), {{"vocab_size", 4}}),
            "tokenizer.json has the token id 5 ('c'), past config.json's vocab_size of 4");
}

TEST(BpeTokenizerTest, TwoTokensWithOneIdAreRefused) {
  Bpe bpe;
  bpe.vocab["d"] = 5;
  EXPECT_EQ(Refusal(BpeFiles(bpe)), "tokenizer.json gives the id 5 to both 'c' and 'd'");
}

TEST(BpeTokenizerTest, WordPieceIsRefused) {
  Bpe bpe;
  bpe.model_type = "WordPiece";
  EXPECT_EQ(Refusal(BpeFiles(bpe)), "tokenizer.json's model is WordPiece; tensorfs converts byte-level BPE tokenizers only");
}

TEST(BpeTokenizerTest, UnigramIsRefused) {
  Bpe bpe;
  bpe.model_type = "Unigram";
  EXPECT_EQ(Refusal(BpeFiles(bpe), json::object(), "qwen2"),
            "tokenizer.json's model is Unigram; tensorfs converts byte-level BPE tokenizers only");
}

TEST(BpeTokenizerTest, LlamaTokenizerJsonWithoutTokenizerModelIsRefused) {
  Bpe bpe;
  bpe.byte_fallback = true;
  bpe.ignore_merges = false;
  bpe.decoder = "Sequence";
  EXPECT_EQ(Refusal(BpeFiles(bpe)),
            "tokenizer.json is a SentencePiece-style BPE (byte_fallback) without tokenizer.model: the converter gives "
            "it flat scores, and llama.cpp would merge in another order than it");
}

TEST(BpeTokenizerTest, MalformedJsonIsRefused) {
  TokenizerFiles files;
  files.tokenizer_json = "{\"model\": {\"vocab\": {\"a\": 0,";
  EXPECT_EQ(Refusal(files).rfind("tokenizer.json is not valid JSON: ", 0), 0u);
}

TEST(BpeTokenizerTest, NonIntegerIdIsRefused) {
  Bpe bpe;
  bpe.vocab["d"] = "six";
  EXPECT_EQ(Refusal(BpeFiles(bpe)), "tokenizer.json gives the token 'd' the id \"six\"");
}

TEST(BpeTokenizerTest, OddlyShapedFilesAreErrorsNotCrashes) {
  // Every value replaced in turn by values of other JSON types: each
  // conversion ends with a result or an error, never an exception or abort.
  const json base = WithSpecialsForShapes();
  const std::vector<json> others = {nullptr, 7, -1, "s", json::array(), json::array({1, "x"}), json::object(),
                                    json::object({{"type", 3}})};
  size_t conversions = 0;
  std::function<void(json&, const std::function<void()>&)> each;
  each = [&](json& node, const std::function<void()>& run) {
    if (node.is_object()) {
      for (auto& [k, v] : node.items()) each(v, run);
    } else if (node.is_array()) {
      for (auto& v : node) each(v, run);
    }
    const json saved = node;
    for (const json& o : others) {
      node = o;
      run();
    }
    node = saved;
  };
  json doc = base;
  json tc = {{"bos_token", "<s>"}, {"chat_template", json::array({{{"name", "default"}, {"template", "t"}}})},
             {"added_tokens_decoder", {{"3", {{"content", "<s>"}}}}}};
  const auto run = [&] {
    TokenizerFiles files;
    files.tokenizer_json = doc.dump();
    files.tokenizer_config_json = tc.dump();
    (void)ConvertTokenizer(files, {{"bos_token_id", 3}}, "qwen2");
    ++conversions;
  };
  each(doc, run);
  each(tc, run);
  EXPECT_GT(conversions, 100u);
}

// ---- Special tokens (SpecialVocab) ----

json LlamaTemplate() {
  return {{"type", "TemplateProcessing"},
          {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
          {"pair", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 1}}}},
                                {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})}};
}

Bpe WithLlamaSpecials() {
  Bpe bpe;
  bpe.Added(6, "<|begin_of_text|>", true).Added(7, "<|end_of_text|>", true).Added(8, "<|eot_id|>", true);
  bpe.post_processor = {{"type", "Sequence"},
                        {"processors", json::array({{{"type", "ByteLevel"}, {"add_prefix_space", true}}, LlamaTemplate()})}};
  return bpe;
}

TEST(SpecialVocabTest, TokenizerConfigNamesSpecialTokensByContent) {
  const json tc = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", {{"content", "<|eot_id|>"}, {"special", true}}}};
  const GgufVocab v = Convert(BpeFiles(WithLlamaSpecials(), tc));
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.bos_token_id"), 6u);
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.eos_token_id"), 8u);
}

TEST(SpecialVocabTest, ConfigJsonIdsCountOnlyWhenInts) {
  const json config = {{"bos_token_id", 6}, {"eos_token_id", json::array({7, 8})}, {"pad_token_id", 7}};
  const GgufVocab v = Convert(BpeFiles(WithLlamaSpecials()), config);
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.bos_token_id"), 6u);
  EXPECT_FALSE(v.metadata.Has("tokenizer.ggml.eos_token_id"));
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.padding_token_id"), 7u);
}

TEST(SpecialVocabTest, TokenizerConfigWinsOverConfigJson) {
  const json tc = {{"bos_token", "<|begin_of_text|>"}};
  const GgufVocab v = Convert(BpeFiles(WithLlamaSpecials(), tc), {{"bos_token_id", 7}});
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.bos_token_id"), 6u);
}

TEST(SpecialVocabTest, TemplateProcessingWithLeadingBosAddsBos) {
  const json tc = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  const GgufVocab v = Convert(BpeFiles(WithLlamaSpecials(), tc));
  EXPECT_TRUE(Value<bool>(v, "tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(Value<bool>(v, "tokenizer.ggml.add_sep_token"));  // the pair's middle BOS is no SEP
  EXPECT_FALSE(v.metadata.Has("tokenizer.ggml.add_eos_token"));
}

TEST(SpecialVocabTest, TemplateProcessingWithTrailingTokenMakesItEosAndOldEosEot) {
  Bpe bpe = WithLlamaSpecials();
  bpe.post_processor = {{"type", "TemplateProcessing"},
                        {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}},
                                                {{"Sequence", {{"id", "A"}}}},
                                                {{"SpecialToken", {{"id", "<|end_of_text|>"}}}}})}};
  const json tc = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  const GgufVocab v = Convert(BpeFiles(bpe, tc));
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.eos_token_id"), 7u);
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.eot_token_id"), 8u);
  EXPECT_TRUE(Value<bool>(v, "tokenizer.ggml.add_eos_token"));
}

TEST(SpecialVocabTest, TokenizerConfigBoolsSetAddBosAndEos) {
  const json tc = {{"add_bos_token", false}, {"add_eos_token", true}, {"add_unk_token", true}};
  const GgufVocab v = Convert(BpeFiles(Bpe{}, tc));
  EXPECT_FALSE(Value<bool>(v, "tokenizer.ggml.add_bos_token"));
  EXPECT_TRUE(Value<bool>(v, "tokenizer.ggml.add_eos_token"));
  EXPECT_FALSE(v.metadata.Has("tokenizer.ggml.add_unk_token"));  // no such GGUF key
}

TEST(SpecialVocabTest, ChatTemplateComesFromTokenizerConfig) {
  TokenizerFiles files = BpeFiles(Bpe{}, {{"chat_template", "{{ messages }}"}});
  files.chat_template_jinja = "{{ other }}";
  EXPECT_EQ(Value<std::string>(Convert(files), "tokenizer.chat_template"), "{{ messages }}");
}

TEST(SpecialVocabTest, ChatTemplateJinjaFileIsTheFallback) {
  TokenizerFiles files = BpeFiles(Bpe{}, {{"model_max_length", 8192}});
  files.chat_template_jinja = "{% for m in messages %}{{ m }}{% endfor %}";
  EXPECT_EQ(Value<std::string>(Convert(files), "tokenizer.chat_template"), "{% for m in messages %}{{ m }}{% endfor %}");
}

TEST(SpecialVocabTest, NamedChatTemplatesGetTheirOwnKeys) {
  const json tc = {{"chat_template", json::array({{{"name", "default"}, {"template", "D"}},
                                                  {{"name", "tool use"}, {"template", "T"}}})}};
  const GgufVocab v = Convert(BpeFiles(Bpe{}, tc));
  EXPECT_EQ(Value<std::string>(v, "tokenizer.chat_template"), "D");
  EXPECT_EQ(Value<std::string>(v, "tokenizer.chat_template.tool_use"), "T");
  EXPECT_EQ(Value<std::vector<std::string>>(v, "tokenizer.chat_templates"), (std::vector<std::string>{"tool_use"}));
}

TEST(SpecialVocabTest, EmptyChatTemplateIsNotWritten) {
  EXPECT_FALSE(Convert(BpeFiles(Bpe{}, {{"chat_template", ""}})).metadata.Has("tokenizer.chat_template"));
}

TEST(SpecialVocabTest, AddPrefixSpaceOfALlamaTokenizerConfigIsWritten) {
  const GgufVocab v = Convert(BpeFiles(Bpe{}, {{"add_prefix_space", false}}));
  EXPECT_FALSE(Value<bool>(v, "tokenizer.ggml.add_space_prefix"));
}

TEST(SpecialVocabTest, AddPrefixSpaceTrueOfAByteLevelTokenizerIsRefused) {
  EXPECT_EQ(Refusal(BpeFiles(Bpe{}, {{"add_prefix_space", true}})),
            "tokenizer_config.json's add_prefix_space is true for a byte-level BPE tokenizer, which llama.cpp and the "
            "tokenizer's own class may treat differently");
}

TEST(SpecialVocabTest, NegativeSpecialTokenIdIsRefused) {
  EXPECT_EQ(Refusal(BpeFiles(Bpe{}), {{"eos_token_id", -1}}), "special token eos has the id -1");
}

TEST(SpecialVocabTest, AllTokenizerKeysAreOfLlamaCppsTypes) {
  const json tc = {{"bos_token", "<|begin_of_text|>"}, {"chat_template", "x"}};
  const GgufVocab v = Convert(BpeFiles(WithLlamaSpecials(), tc));
  for (const GgufMetadata::Entry& e : v.metadata.entries()) {
    EXPECT_EQ(e.key.rfind("tokenizer.", 0), 0u) << e.key;
    if (e.key.size() > 9 && e.key.substr(e.key.size() - 9) == "_token_id") {
      EXPECT_TRUE(std::holds_alternative<uint32_t>(e.value)) << e.key;
    }
  }
}

// ---- Which vocabulary each architecture reads ----

TEST(TokenizerArchTest, MissingTokenizerFilesAreNotFound) {
  const StatusOr<GgufVocab> v = ConvertTokenizer(TokenizerFiles{}, json::object(), "qwen2");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(v.status().message(), "the directory has neither tokenizer.model nor tokenizer.json");
}

TEST(TokenizerArchTest, Gemma2NeedsTokenizerModel) {
  EXPECT_EQ(Refusal(BpeFiles(Bpe{}), json::object(), "gemma2"),
            "the directory has no tokenizer.model, which Gemma 2's converter reads");
}

TEST(TokenizerArchTest, Phi3WithGpt2TokenizerClassReadsTokenizerJson) {
  const GgufVocab v = Convert(BpeFiles(Bpe{}, {{"tokenizer_class", "GPT2Tokenizer"}}), json::object(), "phi3");
  EXPECT_EQ(Value<std::string>(v, "tokenizer.ggml.model"), "gpt2");
}

TEST(TokenizerArchTest, UnknownArchitectureIsRefused) {
  EXPECT_EQ(Refusal(BpeFiles(Bpe{}), json::object(), "bert"), "tensorfs has no tokenizer rules for the bert architecture");
}

// ---- SentencePiece ----

// Models trained by Debian's python3-sentencepiece (make_spm_model.py), with
// what its API reports of each.
const std::string& SpmDir() {
  return testing::SharedData("gguf_tokenizer_test/spm-models-v2", [](const std::string& dir) {
    const testing::CommandResult r = testing::RunCommand("/usr/bin/python3 " TENSORFS_SOURCE_DIR
                                                         "/tests/core/gguf/make_spm_model.py " + dir + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  });
}

std::string SpmModel(const std::string& name) { return testing::ReadWhole(SpmDir() + "/" + name + ".model"); }
json SpmApi(const std::string& name) { return json::parse(testing::ReadWhole(SpmDir() + "/" + name + ".json")); }

TokenizerFiles SpmFiles(const std::string& name, const json& tokenizer_config = nullptr) {
  TokenizerFiles files;
  files.tokenizer_model = SpmModel(name);
  if (!tokenizer_config.is_null()) files.tokenizer_config_json = tokenizer_config.dump();
  return files;
}

// The type sentencepiece's API reports, as a GGUF type (its API has no
// user-defined query: those read as normal).
int32_t ApiType(const json& p) {
  if (p["unknown"].get<bool>()) return kUnknown;
  if (p["control"].get<bool>()) return kControl;
  if (p["unused"].get<bool>()) return kUnused;
  if (p["byte"].get<bool>()) return kByte;
  return kNormal;
}

TEST(SentencePieceModelTest, PiecesMatchSentencepiecesApi) {
  for (const std::string name : {"llama", "gemma", "nobytes", "unigram"}) {
    SCOPED_TRACE(name);
    const StatusOr<SentencePieceModel> model = ParseSentencePieceModel(SpmModel(name));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const json api = SpmApi(name);
    ASSERT_EQ(model->pieces.size(), api["vocab_size"].get<size_t>());
    for (size_t i = 0; i < model->pieces.size(); ++i) {
      const json& p = api["pieces"][i];
      ASSERT_EQ(model->pieces[i].piece, p["piece"].get<std::string>()) << i;
      ASSERT_EQ(model->pieces[i].score, p["score"].get<float>()) << i;
      const int32_t type = model->pieces[i].type == SentencePieceModel::kUserDefined ? kNormal : model->pieces[i].type;
      ASSERT_EQ(type, ApiType(p)) << i;
    }
  }
}

TEST(SentencePieceModelTest, TrainerAndNormalizerSettingsAreRead) {
  const SentencePieceModel llama = *ParseSentencePieceModel(SpmModel("llama"));
  EXPECT_EQ(llama.model_type, SentencePieceModel::kBpe);
  EXPECT_TRUE(llama.byte_fallback);
  EXPECT_EQ(llama.normalizer_name, "identity");
  EXPECT_TRUE(llama.precompiled_charsmap.empty());
  EXPECT_TRUE(llama.add_dummy_prefix);
  EXPECT_FALSE(llama.remove_extra_whitespaces);
  EXPECT_FALSE(ParseSentencePieceModel(SpmModel("gemma"))->add_dummy_prefix);
  const SentencePieceModel unigram = *ParseSentencePieceModel(SpmModel("unigram"));
  EXPECT_EQ(unigram.model_type, SentencePieceModel::kUnigram);
  EXPECT_FALSE(unigram.byte_fallback);
  EXPECT_FALSE(unigram.precompiled_charsmap.empty());
}

TEST(SentencePieceModelTest, UserDefinedPieceIsTypedSo) {
  const SentencePieceModel gemma = *ParseSentencePieceModel(SpmModel("gemma"));
  EXPECT_EQ(gemma.pieces[3].piece, "<start_of_turn>");
  EXPECT_EQ(gemma.pieces[3].type, SentencePieceModel::kUserDefined);
}

TEST(SentencePieceModelTest, TruncatedModelIsAnError) {
  // A download cut short: the last field (normalizer_spec) lacks its end.
  const std::string bytes = SpmModel("llama");
  const StatusOr<SentencePieceModel> model = ParseSentencePieceModel(std::string_view(bytes).substr(0, bytes.size() - 3));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(model.status().message().find("tokenizer.model is malformed at byte "), std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find(" left"), std::string::npos) << model.status().message();
}

TEST(SentencePieceModelTest, EveryTruncationIsAnErrorNotACrash) {
  const std::string bytes = SpmModel("llama");
  size_t ok = 0;
  for (size_t n = 0; n < bytes.size(); n += 7) {
    const StatusOr<SentencePieceModel> model = ParseSentencePieceModel(std::string_view(bytes).substr(0, n));
    // A cut between two whole fields parses (with fewer pieces); any other
    // cut is an error naming where.
    if (model.ok()) ++ok;
  }
  EXPECT_LT(ok, bytes.size() / 7 / 2);
}

TEST(SentencePieceModelTest, GarbageIsAnError) {
  EXPECT_FALSE(ParseSentencePieceModel("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff").ok());
  EXPECT_EQ(ParseSentencePieceModel("").status().message(), "tokenizer.model holds no pieces");
  EXPECT_EQ(ParseSentencePieceModel("\x0b").status().message(),
            "tokenizer.model is malformed at byte 0: field 1 of wire type 3 (groups are not used by sentencepiece)");
}

TEST(SentencePieceVocabTest, TokensScoresAndTypesAreThePieces) {
  const GgufVocab v = Convert(SpmFiles("llama"));
  const json api = SpmApi("llama");
  EXPECT_EQ(Value<std::string>(v, "tokenizer.ggml.model"), "llama");
  EXPECT_EQ(Value<std::string>(v, "tokenizer.ggml.pre"), "default");
  const std::vector<std::string> tokens = Tokens(v);
  const std::vector<float> scores = Value<std::vector<float>>(v, "tokenizer.ggml.scores");
  const std::vector<int32_t> types = Types(v);
  ASSERT_EQ(tokens.size(), api["vocab_size"].get<size_t>());
  ASSERT_EQ(v.tokens, tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(tokens[i], api["pieces"][i]["piece"].get<std::string>());
    EXPECT_EQ(scores[i], api["pieces"][i]["score"].get<float>());
    EXPECT_EQ(types[i], ApiType(api["pieces"][i]));
  }
}

TEST(SentencePieceVocabTest, PaddingToVocabSizeIsPadUnused) {
  const size_t pieces = SpmApi("llama")["vocab_size"].get<size_t>();
  const GgufVocab v = Convert(SpmFiles("llama"), {{"vocab_size", pieces + 2}});
  ASSERT_EQ(Tokens(v).size(), pieces + 2);
  EXPECT_EQ(Tokens(v)[pieces + 1], "[PAD" + std::to_string(pieces + 1) + "]");
  EXPECT_EQ(Types(v)[pieces], kUnused);
  EXPECT_EQ(Value<std::vector<float>>(v, "tokenizer.ggml.scores")[pieces], -10000.0f);
}

TEST(SentencePieceVocabTest, AddedTokensJsonIsUserDefined) {
  const size_t pieces = SpmApi("llama")["vocab_size"].get<size_t>();
  TokenizerFiles files = SpmFiles("llama");
  files.added_tokens_json = json({{"<tool>", pieces}}).dump();
  const GgufVocab v = Convert(files, {{"vocab_size", pieces + 1}});
  EXPECT_EQ(Tokens(v)[pieces], "<tool>");
  EXPECT_EQ(Types(v)[pieces], kUserDefined);
  EXPECT_EQ(Value<std::vector<float>>(v, "tokenizer.ggml.scores")[pieces], -1000.0f);
}

TEST(SentencePieceVocabTest, AddedTokensDecoderOverridesPieces) {
  const size_t pieces = SpmApi("llama")["vocab_size"].get<size_t>();
  const json tc = {{"added_tokens_decoder",
                    {{std::to_string(pieces), {{"content", "<|im_end|>"}, {"special", false}}},
                     {std::to_string(pieces + 1), {{"content", "\xe2\x96\x81tab"}, {"special", false}}}}}};
  const GgufVocab v = Convert(SpmFiles("llama", tc), {{"vocab_size", pieces + 2}});
  EXPECT_EQ(Types(v)[pieces], kControl);  // looks special
  EXPECT_EQ(Tokens(v)[pieces + 1], " tab");
  EXPECT_EQ(Types(v)[pieces + 1], kUserDefined);
}

TEST(SentencePieceVocabTest, GemmaHasNoSpacePrefixAndItsUserPieceAsAddedToken) {
  const json tc = {{"added_tokens_decoder", {{"3", {{"content", "<start_of_turn>"}, {"special", true}}}}}};
  const GgufVocab v = Convert(SpmFiles("gemma", tc), json::object(), "gemma2");
  EXPECT_FALSE(Value<bool>(v, "tokenizer.ggml.add_space_prefix"));
  EXPECT_EQ(Types(v)[3], kControl);
}

TEST(SentencePieceVocabTest, UserDefinedPieceNotAnAddedTokenIsRefused) {
  EXPECT_EQ(Refusal(SpmFiles("gemma"), json::object(), "gemma2"),
            "tokenizer.model's user-defined piece '<start_of_turn>' (id 3) is not an added token, so llama.cpp would "
            "not match it whole");
}

TEST(SentencePieceVocabTest, DummyPrefixUnlikeTheFilesIsRefused) {
  EXPECT_EQ(Refusal(SpmFiles("llama", {{"add_prefix_space", false}})),
            "tokenizer.model adds a space before the text, but the converted file tells llama.cpp not to");
  EXPECT_EQ(Refusal(SpmFiles("gemma"), json::object(), "qwen2"),
            "tokenizer.model does not add a space before the text, but the converted file tells llama.cpp to add one");
}

TEST(SentencePieceVocabTest, UnigramModelIsRefused) {
  EXPECT_EQ(Refusal(SpmFiles("unigram")),
            "tokenizer.model is a SentencePiece unigram model; llama.cpp tokenizes SentencePiece vocabularies as BPE");
}

TEST(SentencePieceVocabTest, ModelWithoutByteFallbackIsRefused) {
  EXPECT_EQ(Refusal(SpmFiles("nobytes")),
            "tokenizer.model has no byte fallback: where sentencepiece gives <unk>, llama.cpp spells bytes");
}

TEST(SentencePieceVocabTest, AddedTokenReplacingAByteTokenIsRefused) {
  TokenizerFiles files = SpmFiles("llama");
  files.added_tokens_json = json({{"<tool>", 10}}).dump();  // piece 10 is <0x07>
  EXPECT_EQ(Refusal(files), "the SentencePiece vocabulary has no byte token <0x07>");
}

TEST(SentencePieceVocabTest, MorePiecesThanVocabSizeIsRefused) {
  EXPECT_EQ(Refusal(SpmFiles("llama"), {{"vocab_size", 300}}),
            "tokenizer.model has 400 pieces, more than config.json's vocab_size of 300");
}

TEST(SentencePieceVocabTest, AddedTokenPastVocabSizeIsRefused) {
  TokenizerFiles files = SpmFiles("llama");
  files.added_tokens_json = json({{"<tool>", 400}}).dump();
  EXPECT_EQ(Refusal(files), "added_tokens.json has the token '<tool>' at id 400, past config.json's vocab_size of 400");
}

TEST(SentencePieceVocabTest, DuplicatePieceIsRefused) {
  // A second "<s>" piece appended to the ModelProto (field 1, length 5:
  // field 1 string "<s>").
  TokenizerFiles files = SpmFiles("llama");
  *files.tokenizer_model += std::string("\x0a\x05\x0a\x03<s>", 7);
  EXPECT_EQ(Refusal(files, {{"vocab_size", 401}}), "tokenizer.model has the piece '<s>' twice (ids 1 and 400)");
}

TEST(SentencePieceVocabTest, TruncatedTokenizerModelIsRefused) {
  TokenizerFiles files = SpmFiles("llama");
  files.tokenizer_model->resize(files.tokenizer_model->size() - 3);
  EXPECT_EQ(Refusal(files).rfind("tokenizer.model is malformed at byte ", 0), 0u);
}

TEST(SentencePieceVocabTest, SpecialIdsFromTokenizerJsonAndConfig) {
  TokenizerFiles files = SpmFiles("llama", {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"add_bos_token", true}});
  files.tokenizer_json = json({{"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                                               {{"id", 2}, {"content", "</s>"}, {"special", true}}})}})
                             .dump();
  const GgufVocab v = Convert(files, {{"unk_token_id", 0}});
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(Value<uint32_t>(v, "tokenizer.ggml.unknown_token_id"), 0u);
  EXPECT_TRUE(Value<bool>(v, "tokenizer.ggml.add_bos_token"));
}

TEST(SentencePieceVocabTest, Phi3TakesTokenizerJsonAddedTokens) {
  TokenizerFiles files = SpmFiles("llama");
  files.tokenizer_json =
      json({{"added_tokens", json::array({{{"id", 400}, {"content", "<|end|>"}, {"special", true}},
                                          {{"id", 401}, {"content", "<|placeholder1|>"}, {"special", false}}})}})
          .dump();
  const GgufVocab v = Convert(files, {{"vocab_size", 402}}, "phi3");
  EXPECT_EQ(Types(v)[400], kControl);
  EXPECT_EQ(Types(v)[401], kUserDefined);  // Phi-3's rules: looking special does not count
  EXPECT_EQ(Tokens(v)[401], "<|placeholder1|>");
}

}  // namespace
}  // namespace tensorfs
