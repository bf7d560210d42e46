#include "core/gguf/tokenizer.h"

#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/gguf/sentencepiece_model.h"

namespace tensorfs {
namespace {

using json = nlohmann::json;

// GGUF token types (gguf-py's TokenType; SentencePiece's piece types use the
// same codes).
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

constexpr std::string_view kSpaceMarker = "\xe2\x96\x81";  // "▁", SentencePiece's space

// No real vocabulary comes near (Gemma 3's has 262144 tokens); a vocab_size
// past this is a broken config.json, not a reason to allocate gigabytes.
constexpr uint64_t kMaxVocabSize = uint64_t{1} << 24;

Status Refuse(std::string why) { return UnimplementedError(std::move(why)); }

// ---- JSON helpers with Python's semantics ----

const json& NullJson() {
  static const json null_json;
  return null_json;
}

// dict.get(key) on a JSON object; null for a missing key or a non-object.
const json& Member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return NullJson();
  const auto it = obj.find(key);
  return it == obj.end() ? NullJson() : *it;
}

// Python's truth value of a JSON value.
bool Truthy(const json& v) {
  switch (v.type()) {
    case json::value_t::boolean:
      return v.get<bool>();
    case json::value_t::number_integer:
      return v.get<int64_t>() != 0;
    case json::value_t::number_unsigned:
      return v.get<uint64_t>() != 0;
    case json::value_t::number_float:
      return v.get<double>() != 0.0;
    case json::value_t::string:
      return !v.get_ref<const std::string&>().empty();
    case json::value_t::array:
    case json::value_t::object:
      return !v.empty();
    default:
      return false;
  }
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

// A short, printable rendering of a token for messages.
std::string Quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 60)) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += "\\x" + std::string(1, "0123456789abcdef"[(c >> 4) & 15]) + "0123456789abcdef"[c & 15];
    } else {
      out += c;
    }
  }
  return out + (s.size() > 60 ? "...'" : "'");
}

StatusOr<json> ParseJsonObject(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return CorruptError(file + " is not valid JSON: " + e.what());
  }
  if (!j.is_object()) return CorruptError(file + " is not a JSON object");
  return j;
}

// A vocabulary size as the converter reads hparams: config.json's key, or
// its text_config's for a multimodal wrapper. nullopt when absent.
StatusOr<std::optional<uint64_t>> ConfigInt(const json& config, std::initializer_list<std::string_view> keys) {
  for (const json* scope : {&config, &Member(config, "text_config")}) {
    for (std::string_view key : keys) {
      const json& v = Member(*scope, key);
      if (v.is_null()) continue;
      if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
        return InvalidArgumentError("config.json's " + std::string(key) + " is " + v.dump() + ", not a positive integer");
      }
      if (v.get<uint64_t>() > kMaxVocabSize) {
        return InvalidArgumentError("config.json's " + std::string(key) + " of " + v.dump() + " is over " +
                                    std::to_string(kMaxVocabSize) + " tokens");
      }
      return std::optional<uint64_t>(v.get<uint64_t>());
    }
  }
  return std::optional<uint64_t>();
}

// does_token_look_special: added tokens some models do not mark special.
bool LooksSpecial(std::string_view t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (StartsWith(t, "<|") && EndsWith(t, "|>")) return true;
  if (StartsWith(t, "<\xef\xbd\x9c") && EndsWith(t, "\xef\xbd\x9c>")) return true;  // <｜...｜>
  return StartsWith(t, "<unused") && EndsWith(t, ">");
}

// ---- tokenizer.json, parsed without holding its vocabulary as JSON ----

// model.vocab and model.merges are taken out while parsing (the rest stays in
// `doc`): a 150k-token tokenizer.json as a JSON tree would take far more
// memory than its strings.
struct TokenizerJson {
  json doc;
  std::vector<std::pair<std::string, int64_t>> vocab;  // model.vocab, in file order
  std::vector<std::string> merges;                     // model.merges as GGUF writes them: "a b"
  bool merges_are_pairs = false;
};

StatusOr<TokenizerJson> ParseTokenizerJson(const std::string& text) {
  TokenizerJson tj;
  std::vector<std::string> keys;  // keys[d - 1]: the key at depth d on the current path
  bool in_vocab = false;
  bool in_merges = false;
  std::string token;  // the vocab key whose id comes next
  std::unordered_set<std::string> seen;
  std::string error;
  const auto at = [&](std::string_view first, std::string_view second) {
    return keys.size() >= 2 && keys[0] == first && keys[1] == second;
  };
  const auto fail = [&](std::string e) {
    if (error.empty()) error = std::move(e);
    return false;
  };
  const json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::key:
        keys.resize(static_cast<size_t>(depth));
        keys[depth - 1] = parsed.get<std::string>();
        if (in_vocab && depth == 3) {
          token = keys[2];
          if (!seen.insert(token).second) return fail("tokenizer.json's vocabulary has the token " + Quoted(token) + " twice");
          return false;  // the value comes as its own event; keep neither in the tree
        }
        return true;
      case json::parse_event_t::object_start:
        if (depth == 2 && at("model", "vocab")) in_vocab = true;
        if ((in_vocab || in_merges) && depth == 3) return fail("tokenizer.json's model.vocab or model.merges holds an object");
        return true;
      case json::parse_event_t::object_end:
        if (depth == 2 && in_vocab) in_vocab = false;
        return true;
      case json::parse_event_t::array_start:
        if (depth == 2 && at("model", "merges")) in_merges = true;
        if (in_vocab && depth == 3) return fail("tokenizer.json's model.vocab holds an array");
        if (in_merges && depth == 4) return fail("tokenizer.json's merges nest arrays");
        return true;
      case json::parse_event_t::array_end:
        if (depth == 2 && in_merges) {
          in_merges = false;
          return true;
        }
        if (in_merges && depth == 3) {  // one ["a", "b"] pair
          if (!tj.merges.empty() && !tj.merges_are_pairs) return fail("tokenizer.json's merges mix strings and pairs");
          if (parsed.size() != 2 || !parsed[0].is_string() || !parsed[1].is_string()) {
            return fail("tokenizer.json's merge #" + std::to_string(tj.merges.size()) + " is " + parsed.dump() +
                        ", not a pair of strings");
          }
          tj.merges_are_pairs = true;
          // vocab.py: a space inside a part is written as chr(ord(' ') + 256).
          tj.merges.push_back(ReplaceAll(parsed[0].get<std::string>(), " ", "\xc4\xa0") + " " +
                              ReplaceAll(parsed[1].get<std::string>(), " ", "\xc4\xa0"));
          return false;
        }
        return true;
      case json::parse_event_t::value:
        if (in_vocab && depth == 3) {
          if (!parsed.is_number_integer() || parsed.get<int64_t>() < 0) {
            return fail("tokenizer.json gives the token " + Quoted(token) + " the id " + parsed.dump());
          }
          tj.vocab.emplace_back(std::move(token), parsed.get<int64_t>());
          return false;
        }
        if (in_merges && depth == 3) {
          if (!parsed.is_string()) return fail("tokenizer.json's merge #" + std::to_string(tj.merges.size()) + " is " + parsed.dump());
          if (tj.merges_are_pairs) return fail("tokenizer.json's merges mix strings and pairs");
          tj.merges.push_back(parsed.get<std::string>());
          return false;
        }
        return true;
    }
    return true;
  };
  try {
    tj.doc = json::parse(text, callback);
  } catch (const json::exception& e) {
    if (!error.empty()) return CorruptError(error);
    return CorruptError(std::string("tokenizer.json is not valid JSON: ") + e.what());
  }
  if (!error.empty()) return CorruptError(error);
  if (!tj.doc.is_object()) return CorruptError("tokenizer.json is not a JSON object");
  return tj;
}

// ---- SpecialVocab (gguf-py vocab.py) ----

class SpecialVocab {
 public:
  SpecialVocab(bool load_merges, std::optional<uint64_t> n_vocab,
               std::vector<std::string> types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"})
      : load_merges_(load_merges), n_vocab_(n_vocab), types_(std::move(types)) {}

  // _load: tokenizer.json (may be null), tokenizer_config.json (null when
  // absent), then config.json.
  Status Load(const TokenizerJson* tokenizer, json tokenizer_config, const TokenizerFiles& files, const json& config) {
    RETURN_IF_ERROR(LoadFromTokenizerJson(tokenizer, std::move(tokenizer_config), files));
    for (const std::string& type : types_) {
      json id = Member(config, type + "_token_id");
      if (id.is_null() && config.contains("text_config")) id = Member(config["text_config"], type + "_token_id");
      RETURN_IF_ERROR(SetSpecialToken(type, id));
    }
    return OkStatus();
  }

  // add_to_gguf.
  Status AddTo(GgufMetadata& m) const {
    if (!merges_.empty()) {
      m.SetStringArray("tokenizer.ggml.merges", merges_);
    } else if (load_merges_) {
      return Refuse("tokenizer.json has no merges: llama.cpp's BPE tokenizer cannot load without them");
    }
    static const std::map<std::string, std::string, std::less<>> kIdKeys = {
        {"bos", "tokenizer.ggml.bos_token_id"},       {"eos", "tokenizer.ggml.eos_token_id"},
        {"unk", "tokenizer.ggml.unknown_token_id"},   {"sep", "tokenizer.ggml.seperator_token_id"},
        {"pad", "tokenizer.ggml.padding_token_id"},   {"mask", "tokenizer.ggml.mask_token_id"},
        {"eot", "tokenizer.ggml.eot_token_id"},       {"eom", "tokenizer.ggml.eom_token_id"},
    };
    for (const auto& [type, id] : ids_) {
      if (const auto it = kIdKeys.find(type); it != kIdKeys.end()) m.SetU32(it->second, id);  // cls: no key
    }
    for (const auto& [type, value] : add_) {
      if (type == "bos" || type == "eos" || type == "sep") m.SetBool("tokenizer.ggml.add_" + type + "_token", value);
    }
    RETURN_IF_ERROR(AddChatTemplate(m));
    if (lowercase_) m.SetBool("tokenizer.ggml.normalizer.lowercase", *lowercase_);
    if (strip_accents_) m.SetBool("tokenizer.ggml.normalizer.strip_accents", *strip_accents_);
    return OkStatus();
  }

  // _set_special_token.
  Status SetSpecialToken(const std::string& type, const json& tid) {
    if (!tid.is_number_integer() && !tid.is_boolean()) return OkStatus();  // isinstance(tid, int); bools are ints
    const int64_t id = tid.is_boolean() ? (tid.get<bool>() ? 1 : 0)
                       : tid.is_number_unsigned() && tid.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}
                           ? std::numeric_limits<int64_t>::max()
                           : tid.get<int64_t>();
    if (id < 0) return InvalidArgumentError("special token " + type + " has the id " + std::to_string(id));
    if (n_vocab_ && static_cast<uint64_t>(id) >= *n_vocab_) return OkStatus();  // skipped, as the converter does
    for (const auto& [t, unused] : ids_) {
      if (t == type) return OkStatus();  // the first one set wins
    }
    if (id > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgumentError("special token " + type + " has the id " + std::to_string(id) + ", over u32");
    }
    ids_.emplace_back(type, static_cast<uint32_t>(id));
    return OkStatus();
  }

  bool HasId(std::string_view type) const {
    return std::any_of(ids_.begin(), ids_.end(), [&](const auto& e) { return e.first == type; });
  }

  void SetMerges(std::vector<std::string> merges) { merges_ = std::move(merges); }

 private:
  void SetAdd(const std::string& type, bool value) {
    for (auto& [t, v] : add_) {
      if (t == type) {
        v = value;
        return;
      }
    }
    add_.emplace_back(type, value);
  }

  bool HasType(std::string_view type) const { return std::find(types_.begin(), types_.end(), type) != types_.end(); }

  void ParseNormalizer(const json& n) {
    const json& type = Member(n, "type");
    if (type == "Lowercase") {
      lowercase_ = true;
    } else if (type == "StripAccents") {
      strip_accents_ = true;
    } else if (type == "BertNormalizer") {
      if (n.contains("lowercase")) lowercase_ = Truthy(n["lowercase"]);
      if (n.contains("strip_accents")) strip_accents_ = Truthy(n["strip_accents"]);
    } else if (type == "Sequence") {
      const json& list = Member(n, "normalizers");
      if (list.is_array()) {
        for (const json& e : list) ParseNormalizer(e);
      }
    }
  }

  static const json& SpecialTokenIdOf(const json& item) { return Member(Member(item, "SpecialToken"), "id"); }
  static const json& SequenceIdOf(const json& item) { return Member(Member(item, "Sequence"), "id"); }

  Status LoadFromTokenizerJson(const TokenizerJson* tokenizer, json tc, const TokenizerFiles& files) {
    json added_tokens = json::array();
    if (tokenizer != nullptr) {
      if (load_merges_) merges_ = tokenizer->merges;
      if (const json& n = Member(tokenizer->doc, "normalizer"); Truthy(n)) ParseNormalizer(n);
      added_tokens = Member(tokenizer->doc, "added_tokens");
      if (!added_tokens.is_array()) added_tokens = json::array();
    }
    if (tokenizer != nullptr) {
      const json empty = json::object();
      const json& tc_or_empty = Truthy(tc) ? tc : empty;
      json special_bos = Member(tc_or_empty, "bos_token");
      json special_cls = Member(tc_or_empty, "cls_token");
      json special_eos = Member(tc_or_empty, "eos_token");
      json special_sep = Member(tc_or_empty, "sep_token");
      if (!Truthy(special_bos) && Truthy(special_cls) && Truthy(tc)) tc["bos_token"] = special_bos = special_cls;
      if (!Truthy(special_eos) && Truthy(special_sep) && Truthy(tc)) tc["eos_token"] = special_eos = special_sep;
      const json& post_processor = Member(tokenizer->doc, "post_processor");
      if (Truthy(post_processor)) {
        json processors = json::array({post_processor});
        if (post_processor.contains("processors")) processors = post_processor["processors"];
        if (!processors.is_array()) return CorruptError("tokenizer.json's post_processor.processors is not a list");
        for (const json& processor : processors) {
          const json& type = Member(processor, "type");
          if (type == "RobertaProcessing") {
            SetAdd("bos", true);
            SetAdd("eos", true);
            SetAdd("sep", true);
            if (!Truthy(special_cls) && Truthy(tc)) {
              const json& cls = Member(processor, "cls");
              special_cls = cls.is_array() && !cls.empty() ? cls[0] : special_bos;
              tc["cls_token"] = special_cls;
            }
            if (!Truthy(special_sep) && Truthy(tc)) {
              const json& sep = Member(processor, "sep");
              special_sep = sep.is_array() && !sep.empty() ? sep[0] : special_eos;
              tc["sep_token"] = special_sep;
            }
            continue;
          }
          if (type != "TemplateProcessing") continue;
          // "Crude parsing of TemplateProcessing", exactly as vocab.py does it.
          const json& single_json = Member(processor, "single");
          const json& pair_json = Member(processor, "pair");
          const json single = single_json.is_array() ? single_json : json::array();
          json pair = pair_json.is_array() ? pair_json : json::array();
          json special_first;
          json special_last;
          if (single.size() > 1) {
            special_first = SpecialTokenIdOf(single[0]);
            if (Truthy(special_first)) {
              if (!Truthy(tc)) {
                special_bos = special_first;
              } else if (special_first != special_bos && special_first != special_cls) {
                if (!Truthy(special_bos)) tc["bos_token"] = special_bos = special_first;
                if (!Truthy(special_cls)) tc["cls_token"] = special_cls = special_first;
              }
              SetAdd("bos", special_first == special_bos || special_first == special_cls);
            }
            special_last = SpecialTokenIdOf(single[single.size() - 1]);
            if (Truthy(special_last)) {
              if (!Truthy(tc)) {
                special_eos = special_last;
              } else if (special_last != special_eos) {
                if (!HasType("eot")) {
                  types_.push_back("eot");
                  tc["eot_token"] = special_eos;
                } else if (!HasType("eom")) {
                  types_.push_back("eom");
                  tc["eom_token"] = special_eos;
                }
                tc["eos_token"] = special_eos = special_last;
              }
              SetAdd("eos", special_last == special_eos);
            }
          }
          if (!pair.empty()) {
            const size_t seq_start = Truthy(special_first) && SpecialTokenIdOf(pair[0]) == special_first ? 1 : 0;
            const bool drop_last = Truthy(special_last) && SpecialTokenIdOf(pair[pair.size() - 1]) == special_last;
            json middle = json::array();
            for (size_t i = seq_start; i + (drop_last ? 1 : 0) < pair.size(); ++i) middle.push_back(pair[i]);
            if (!middle.empty()) {
              const json& a = SequenceIdOf(middle[0]);
              const json& b = SequenceIdOf(middle[middle.size() - 1]);
              json inner = json::array();
              for (size_t i = 1; i + 1 < middle.size(); ++i) inner.push_back(middle[i]);
              if (a == "A" && b == "B" && !inner.empty()) {
                bool add_sep = false;
                const json& first = SpecialTokenIdOf(inner[0]);
                if (Truthy(first) && (first == special_sep || first == special_eos) && !Truthy(special_last)) {
                  add_sep = true;
                }
                if (inner.size() == 2) {
                  const json& second = SpecialTokenIdOf(inner[1]);
                  if (Truthy(second) && (second == special_sep || second == special_eos)) add_sep = true;
                }
                SetAdd("sep", add_sep);
                if (add_sep && !Truthy(special_sep) && Truthy(tc)) tc["sep_token"] = special_eos;
              }
            }
          }
        }
      }
    }
    if (!Truthy(tc)) return OkStatus();
    json alt;  // chat_template.jinja; chat_template.json and additional templates are not read
    if (files.chat_template_jinja) alt = *files.chat_template_jinja;
    const json chat_template = tc.contains("chat_template") ? tc["chat_template"] : alt;
    if (chat_template.is_null() || chat_template.is_string() || chat_template.is_array()) chat_template_ = chat_template;
    for (size_t i = 0; i < types_.size(); ++i) {  // types_ may have grown above
      const std::string type = types_[i];
      const json& add_entry = Member(tc, "add_" + type + "_token");
      if (add_entry.is_boolean()) SetAdd(type, add_entry.get<bool>());
      const json& entry = Member(tc, type + "_token");
      std::string content;
      if (entry.is_string()) {
        content = entry.get<std::string>();
      } else if (entry.is_object() && Member(entry, "content").is_string()) {
        content = entry["content"].get<std::string>();
      } else {
        continue;
      }
      json id;
      for (const json& token : added_tokens) {
        if (Member(token, "content") == content) {
          id = Member(token, "id");
          break;
        }
      }
      RETURN_IF_ERROR(SetSpecialToken(type, id));
    }
    return OkStatus();
  }

  // gguf_writer.add_chat_template: a string, or a list of named templates
  // ("default" as tokenizer.chat_template, the others by name).
  Status AddChatTemplate(GgufMetadata& m) const {
    if (chat_template_.is_null()) return OkStatus();
    if (chat_template_.is_string()) {
      if (!chat_template_.get_ref<const std::string&>().empty()) {
        m.SetString("tokenizer.chat_template", chat_template_.get<std::string>());
      }
      return OkStatus();
    }
    std::optional<std::string> default_template;
    std::set<std::string> names;  // sorted: the converter's set has no fixed order
    for (const json& choice : chat_template_) {
      std::string name = Member(choice, "name").is_string() ? choice["name"].get<std::string>() : "";
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      const json& tmpl = Member(choice, "template");
      if (name.empty() || tmpl.is_null()) continue;
      if (!tmpl.is_string()) return CorruptError("tokenizer_config.json's chat template " + Quoted(name) + " is not a string");
      if (name == "default") {
        default_template = tmpl.get<std::string>();
      } else {
        names.insert(name);
        if (!tmpl.get_ref<const std::string&>().empty()) m.SetString("tokenizer.chat_template." + name, tmpl.get<std::string>());
      }
    }
    if (!names.empty()) m.SetStringArray("tokenizer.chat_templates", std::vector<std::string>(names.begin(), names.end()));
    if (default_template && !default_template->empty()) m.SetString("tokenizer.chat_template", *default_template);
    return OkStatus();
  }

  bool load_merges_;
  std::optional<uint64_t> n_vocab_;
  std::vector<std::string> types_;  // special_token_types
  std::vector<std::pair<std::string, uint32_t>> ids_;  // in the order set
  std::vector<std::pair<std::string, bool>> add_;      // in the order set
  std::vector<std::string> merges_;
  json chat_template_;
  std::optional<bool> lowercase_;
  std::optional<bool> strip_accents_;
};

// ---- Byte-level BPE (get_vocab_base, _set_vocab_gpt2) ----

// A pre-tokenizer llama.cpp implements, keyed by the tokenizer.json Split
// patterns it reproduces (the "original regex from tokenizer.json" of
// llama-vocab.cpp), and what else llama.cpp's pre type assumes.
struct PreTokenizer {
  std::string_view name;                       // tokenizer.ggml.pre
  std::vector<std::string_view> split_regexes;  // in order
  bool ignore_merges;                          // llama.cpp emits a word in the vocabulary whole
  bool allows_nfc;                             // the converter writes it for NFC-normalizing tokenizers too
};

const std::vector<PreTokenizer>& PreTokenizers() {
  static const std::vector<PreTokenizer> kTable = {
      {"llama-bpe",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true, false},
      {"qwen2",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false, true},
      {"qwen35",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false, true},
      {"tekken",
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true, false},
  };
  return kTable;
}

std::string Sha256Hex(std::string_view s) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), digest);
  std::string hex;
  for (unsigned char b : digest) {
    hex += "0123456789abcdef"[b >> 4];
    hex += "0123456789abcdef"[b & 15];
  }
  return hex;
}

StatusOr<const PreTokenizer*> MatchPreTokenizer(const json& doc) {
  const json& pre = Member(doc, "pre_tokenizer");
  if (pre.is_null()) {
    return Refuse("tokenizer.json has no pre-tokenizer; llama.cpp would split text with its degraded default");
  }
  json steps = json::array({pre});
  if (Member(pre, "type") == "Sequence") steps = Member(pre, "pretokenizers");
  if (!steps.is_array()) return CorruptError("tokenizer.json's pre_tokenizer.pretokenizers is not a list");
  std::vector<std::string> regexes;
  bool byte_level = false;
  for (const json& step : steps) {
    const json& type = Member(step, "type");
    if (type == "Split") {
      const json& regex = Member(Member(step, "pattern"), "Regex");
      if (!regex.is_string()) {
        return Refuse("tokenizer.json's pre-tokenizer splits on a fixed string, which no llama.cpp pre-tokenizer does");
      }
      if (Member(step, "behavior") != "Isolated" || Truthy(Member(step, "invert"))) {
        return Refuse("tokenizer.json's pre-tokenizer Split is " + Member(step, "behavior").dump() +
                      (Truthy(Member(step, "invert")) ? " and inverted" : "") +
                      "; llama.cpp's pre-tokenizers isolate each match");
      }
      regexes.push_back(regex.get<std::string>());
    } else if (type == "ByteLevel") {
      if (Truthy(Member(step, "add_prefix_space"))) {
        return Refuse("tokenizer.json's ByteLevel pre-tokenizer adds a prefix space, which llama.cpp's BPE does not");
      }
      if (Member(step, "use_regex").is_null() || Truthy(Member(step, "use_regex"))) {
        return Refuse("tokenizer.json's ByteLevel pre-tokenizer splits with GPT-2's own regex, which tensorfs does not map");
      }
      byte_level = true;
    } else {
      return Refuse("tokenizer.json's pre-tokenizer has a " + type.dump() + " step, which tensorfs does not map");
    }
  }
  if (!byte_level) return Refuse("tokenizer.json's pre-tokenizer is not byte-level");
  for (const PreTokenizer& p : PreTokenizers()) {
    if (p.split_regexes.size() == regexes.size() && std::equal(regexes.begin(), regexes.end(), p.split_regexes.begin())) {
      return &p;
    }
  }
  std::string joined;
  for (const std::string& r : regexes) joined += r;
  return Refuse("tokenizer.json's pre-tokenizer splits with a pattern llama.cpp has no pre-tokenizer for (sha256 " +
                Sha256Hex(joined).substr(0, 16) + ", " + Quoted(joined) + ")");
}

// GPT-2's bytes_to_unicode, reversed: the code point standing for each byte.
const std::map<uint32_t, uint8_t>& ByteLevelChars() {
  static const std::map<uint32_t, uint8_t> kMap = [] {
    std::map<uint32_t, uint8_t> m;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      m[printable ? b : next++] = static_cast<uint8_t>(b);
    }
    return m;
  }();
  return kMap;
}

// Decodes UTF-8 into code points; false if it is not valid UTF-8.
bool CodePoints(std::string_view s, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    out->push_back(cp);
    i += n;
  }
  return true;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// The converter round-trips an added token that is not normalized through the
// Hugging Face tokenizer (decode(encode(t))): the byte-level decoder turns
// each of its characters that stands for a byte into that byte, and
// transformers may clean up spaces before punctuation. A token that comes back
// as it went in is written as it is; one that would change is refused, since
// its converted text would depend on transformers' version.
Status CheckRoundTrip(std::string_view token, int64_t id) {
  std::vector<uint32_t> cps;
  bool same = CodePoints(token, &cps);
  if (same) {
    std::string bytes;
    for (uint32_t cp : cps) {
      const auto it = ByteLevelChars().find(cp);
      if (it != ByteLevelChars().end()) {
        bytes += static_cast<char>(it->second);
      } else {
        AppendUtf8(cp, &bytes);
      }
    }
    same = bytes == token;
  }
  for (std::string_view cleaned : {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"}) {
    if (token.find(cleaned) != std::string_view::npos) same = false;
  }
  if (same) return OkStatus();
  return Refuse("added token " + Quoted(token) + " (id " + std::to_string(id) +
                ") is not normalized and would not come back unchanged from the tokenizer, as the converter needs");
}

struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = true;
};

StatusOr<std::vector<AddedToken>> AddedTokensOf(const json& doc) {
  std::vector<AddedToken> out;
  const json& list = Member(doc, "added_tokens");
  if (list.is_null()) return out;
  if (!list.is_array()) return CorruptError("tokenizer.json's added_tokens is not a list");
  for (const json& t : list) {
    const json& id = Member(t, "id");
    const json& content = Member(t, "content");
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || !content.is_string()) {
      return CorruptError("tokenizer.json's added token " + t.dump().substr(0, 80) + " has no id or content");
    }
    out.push_back({id.get<int64_t>(), content.get<std::string>(), Truthy(Member(t, "special")),
                   Member(t, "normalized").is_null() || Truthy(Member(t, "normalized"))});
  }
  return out;
}

Status RefuseDuplicates(const std::vector<std::string>& tokens, std::string_view what) {
  std::unordered_map<std::string_view, size_t> first;
  first.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (const auto [it, inserted] = first.emplace(tokens[i], i); !inserted) {
      return InvalidArgumentError(std::string(what) + " has the token " + Quoted(tokens[i]) + " twice (ids " +
                                  std::to_string(it->second) + " and " + std::to_string(i) +
                                  "); llama.cpp refuses duplicate tokens");
    }
  }
  return OkStatus();
}

StatusOr<GgufVocab> Gpt2Vocab(const TokenizerFiles& files, const TokenizerJson& tj, const json& tc,
                              const json& config) {
  const json& model = Member(tj.doc, "model");
  const json& model_type = Member(model, "type");
  if (model_type != "BPE") {
    return Refuse("tokenizer.json's model is " + (model_type.is_string() ? model_type.get<std::string>() : model_type.dump()) +
                  "; tensorfs converts byte-level BPE tokenizers only");
  }
  if (Truthy(Member(model, "byte_fallback"))) {
    return Refuse("tokenizer.json's BPE falls back to bytes (a SentencePiece-style vocabulary) without a tokenizer.model");
  }
  if (Truthy(Member(model, "continuing_subword_prefix")) || Truthy(Member(model, "end_of_word_suffix"))) {
    return Refuse("tokenizer.json's BPE marks subwords with a prefix or suffix, which llama.cpp's BPE does not");
  }
  ASSIGN_OR_RETURN(const PreTokenizer* pre, MatchPreTokenizer(tj.doc));
  if (const json& n = Member(tj.doc, "normalizer"); !n.is_null()) {
    if (!(pre->allows_nfc && Member(n, "type") == "NFC")) {
      return Refuse("tokenizer.json normalizes text (" + Member(n, "type").dump() +
                    "), which llama.cpp's BPE tokenizer does not");
    }
  }
  if (Member(Member(tj.doc, "decoder"), "type") != "ByteLevel") {
    return Refuse("tokenizer.json's decoder is not ByteLevel, as llama.cpp's BPE detokenizer is");
  }
  if (Truthy(Member(model, "ignore_merges")) != pre->ignore_merges) {
    return Refuse(std::string("tokenizer.json's BPE ") + (pre->ignore_merges ? "merges" : "skips the merges of") +
                  " words already in its vocabulary, but llama.cpp's " + std::string(pre->name) +
                  " pre-tokenizer " + (pre->ignore_merges ? "skips them" : "merges them"));
  }
  if (tj.vocab.empty()) return CorruptError("tokenizer.json has no vocabulary");

  // tokenizer.vocab (get_vocab with added tokens): the model's, with each
  // added token's content at its id.
  // (Hash tables and an id-indexed vector: a vocabulary has 100k-250k tokens.)
  std::unordered_map<std::string_view, int64_t> token_to_id;
  token_to_id.reserve(tj.vocab.size());
  for (const auto& [token, id] : tj.vocab) token_to_id.emplace(token, id);
  ASSIGN_OR_RETURN(const std::vector<AddedToken> added, AddedTokensOf(tj.doc));
  std::unordered_map<int64_t, const AddedToken*> added_by_id;
  std::unordered_set<std::string_view> added_contents;
  for (const AddedToken& t : added) {
    if (const auto it = token_to_id.find(t.content); it != token_to_id.end() && it->second != t.id) {
      return InvalidArgumentError("tokenizer.json has " + Quoted(t.content) + " both as token " +
                                  std::to_string(it->second) + " and as added token " + std::to_string(t.id));
    }
    if (!added_by_id.emplace(t.id, &t).second) {
      return InvalidArgumentError("tokenizer.json has two added tokens with the id " + std::to_string(t.id));
    }
    added_contents.insert(t.content);
  }
  int64_t max_id = 0;
  std::string_view max_token;
  const auto note_max = [&](int64_t id, std::string_view token) {
    if (id >= max_id) {
      max_id = id;
      max_token = token;
    }
  };
  for (const auto& [token, id] : tj.vocab) note_max(id, token);
  for (const AddedToken& t : added) note_max(t.id, t.content);
  ASSIGN_OR_RETURN(const std::optional<uint64_t> config_vocab, ConfigInt(config, {"vocab_size"}));
  const uint64_t distinct = tj.vocab.size() + std::count_if(added.begin(), added.end(), [&](const AddedToken& t) {
                              return !token_to_id.count(t.content);
                            });
  const uint64_t vocab_size = config_vocab.value_or(distinct);
  if (static_cast<uint64_t>(max_id) >= vocab_size) {
    return InvalidArgumentError("tokenizer.json has the token id " + std::to_string(max_id) + " (" +
                                Quoted(max_token) + "), past config.json's vocab_size of " + std::to_string(vocab_size));
  }
  std::vector<std::string_view> id_to_token(vocab_size);
  std::vector<bool> has_id(vocab_size, false);
  const auto claim = [&](int64_t id, std::string_view token) -> Status {
    if (has_id[id]) {
      if (id_to_token[id] == token) return OkStatus();
      return InvalidArgumentError("tokenizer.json gives the id " + std::to_string(id) + " to both " +
                                  Quoted(id_to_token[id]) + " and " + Quoted(token));
    }
    has_id[id] = true;
    id_to_token[id] = token;
    return OkStatus();
  };
  for (const auto& [token, id] : tj.vocab) RETURN_IF_ERROR(claim(id, token));
  for (const AddedToken& t : added) RETURN_IF_ERROR(claim(t.id, t.content));
  // tokenizer_config.json's added_tokens_decoder must agree with tokenizer.json.
  if (const json& decoder = Member(tc, "added_tokens_decoder"); decoder.is_object()) {
    for (const auto& [key, entry] : decoder.items()) {
      const json& content = Member(entry, "content");
      const long long id = std::strtoll(key.c_str(), nullptr, 10);
      if (!content.is_string() || id < 0 || static_cast<uint64_t>(id) >= vocab_size || !has_id[id] ||
          id_to_token[id] != content.get<std::string>()) {
        return InvalidArgumentError("tokenizer_config.json's added token " + key + " (" +
                                    (content.is_string() ? Quoted(content.get<std::string>()) : content.dump()) +
                                    ") is not tokenizer.json's");
      }
    }
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(vocab_size);
  types.reserve(vocab_size);
  for (uint64_t i = 0; i < vocab_size; ++i) {
    if (!has_id[i]) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(kUnused);
      continue;
    }
    std::string token(id_to_token[i]);
    if (added_contents.count(token)) {
      // The id holding an added token's content is that token's: a vocabulary
      // token of the same content at another id was refused above.
      const auto added_it = added_by_id.find(static_cast<int64_t>(i));
      TENSORFS_CHECK(added_it != added_by_id.end());
      const AddedToken& a = *added_it->second;
      if (!a.normalized) RETURN_IF_ERROR(CheckRoundTrip(token, a.id));
      if (a.special || LooksSpecial(token)) {
        types.push_back(kControl);
      } else {
        token = ReplaceAll(std::move(token), kSpaceMarker, " ");  // pre-normalize user-defined spaces
        types.push_back(kUserDefined);
      }
    } else {
      types.push_back(kNormal);
    }
    tokens.push_back(std::move(token));
  }
  RETURN_IF_ERROR(RefuseDuplicates(tokens, "tokenizer.json's vocabulary"));

  GgufVocab vocab;
  vocab.tokens = tokens.size();
  GgufMetadata& m = vocab.metadata;
  m.SetString("tokenizer.ggml.model", "gpt2");
  m.SetString("tokenizer.ggml.pre", std::string(pre->name));
  m.SetStringArray("tokenizer.ggml.tokens", std::move(tokens));
  m.SetI32Array("tokenizer.ggml.token_type", std::move(types));
  SpecialVocab special(/*load_merges=*/true, std::nullopt);
  RETURN_IF_ERROR(special.Load(&tj, tc, files, config));
  RETURN_IF_ERROR(special.AddTo(m));
  return vocab;
}

// ---- SentencePiece (_create_vocab_sentencepiece, Phi3MiniModel.set_vocab) ----

enum class SpmRules {
  kConverter,  // conversion/base.py's _create_vocab_sentencepiece
  kPhi3,       // conversion/phi.py's Phi3MiniModel.set_vocab
};

// sentencepiece and llama.cpp's SentencePiece tokenizer agree only for
// models like Llama's, Mistral's and Gemma's.
Status CheckSentencePieceModel(const SentencePieceModel& spm, bool add_space_prefix) {
  if (spm.model_type != SentencePieceModel::kBpe) {
    static const std::map<int32_t, std::string> kNames = {{1, "unigram"}, {3, "word"}, {4, "char"}};
    const auto it = kNames.find(spm.model_type);
    return Refuse("tokenizer.model is a SentencePiece " +
                  (it != kNames.end() ? it->second : "type-" + std::to_string(spm.model_type)) +
                  " model; llama.cpp tokenizes SentencePiece vocabularies as BPE");
  }
  if (!spm.precompiled_charsmap.empty() || !spm.normalization_rule_tsv.empty()) {
    return Refuse("tokenizer.model normalizes text (" + (spm.normalizer_name.empty() ? "rules" : spm.normalizer_name) +
                  "), which llama.cpp's SentencePiece tokenizer does not");
  }
  if (spm.remove_extra_whitespaces) {
    return Refuse("tokenizer.model removes extra whitespace, which llama.cpp's SentencePiece tokenizer keeps");
  }
  if (!spm.escape_whitespaces || spm.treat_whitespace_as_suffix) {
    return Refuse("tokenizer.model does not mark spaces as a prefix \xe2\x96\x81, as llama.cpp's tokenizer does");
  }
  if (spm.add_dummy_prefix != add_space_prefix) {
    return Refuse(std::string("tokenizer.model ") + (spm.add_dummy_prefix ? "adds" : "does not add") +
                  " a space before the text, but the converted file tells llama.cpp " +
                  (add_space_prefix ? "to add one" : "not to"));
  }
  if (!spm.byte_fallback) {
    return Refuse("tokenizer.model has no byte fallback: where sentencepiece gives <unk>, llama.cpp spells bytes");
  }
  return OkStatus();
}

StatusOr<GgufVocab> SentencePieceVocab(const TokenizerFiles& files, const TokenizerJson* tj, const json& tc,
                                       const json& config, SpmRules rules, bool add_space_prefix) {
  StatusOr<SentencePieceModel> parsed = ParseSentencePieceModel(*files.tokenizer_model);
  if (!parsed.ok()) return parsed.status();
  const SentencePieceModel& spm = *parsed;
  RETURN_IF_ERROR(CheckSentencePieceModel(spm, add_space_prefix));
  {
    std::map<std::string_view, size_t> seen;
    for (size_t i = 0; i < spm.pieces.size(); ++i) {
      if (const auto [it, inserted] = seen.emplace(spm.pieces[i].piece, i); !inserted) {
        return CorruptError("tokenizer.model has the piece " + Quoted(spm.pieces[i].piece) + " twice (ids " +
                            std::to_string(it->second) + " and " + std::to_string(i) + ")");
      }
    }
  }
  std::optional<uint64_t> config_vocab;
  if (rules == SpmRules::kConverter) {
    ASSIGN_OR_RETURN(config_vocab, ConfigInt(config, {"vocab_size_per_layer_input", "vocab_size"}));
  } else {
    ASSIGN_OR_RETURN(config_vocab, ConfigInt(config, {"vocab_size"}));
  }
  const uint64_t vocab_size = config_vocab.value_or(spm.pieces.size());
  if (spm.pieces.size() > vocab_size) {
    return InvalidArgumentError("tokenizer.model has " + std::to_string(spm.pieces.size()) +
                                " pieces, more than config.json's vocab_size of " + std::to_string(vocab_size));
  }
  std::vector<std::string> tokens(vocab_size);
  std::vector<float> scores(vocab_size, -10000.0f);
  std::vector<int32_t> types(vocab_size, kUnused);
  for (uint64_t i = 0; i < vocab_size; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  for (size_t i = 0; i < spm.pieces.size(); ++i) {
    const SentencePieceModel::Piece& p = spm.pieces[i];
    tokens[i] = p.piece;
    scores[i] = p.score;
    types[i] = (p.type == kUnknown || p.type == kControl || p.type == kUnused || p.type == kByte) ? p.type : kNormal;
  }
  const auto check_id = [&](int64_t id, const std::string& file, std::string_view token) -> Status {
    if (id < 0 || static_cast<uint64_t>(id) >= vocab_size) {
      return InvalidArgumentError(file + " has the token " + Quoted(token) + " at id " + std::to_string(id) +
                                  ", past config.json's vocab_size of " + std::to_string(vocab_size));
    }
    return OkStatus();
  };
  if (files.added_tokens_json) {
    ASSIGN_OR_RETURN(const json added, ParseJsonObject(*files.added_tokens_json, "added_tokens.json"));
    for (const auto& [key, id] : added.items()) {
      if (!id.is_number_integer()) return CorruptError("added_tokens.json gives " + Quoted(key) + " the id " + id.dump());
      RETURN_IF_ERROR(check_id(id.get<int64_t>(), "added_tokens.json", key));
      tokens[id.get<size_t>()] = key;
      scores[id.get<size_t>()] = -1000.0f;
      types[id.get<size_t>()] = kUserDefined;
    }
  }
  // The added tokens of tokenizer_config.json (and, for Phi-3, tokenizer.json).
  const auto apply_added = [&](int64_t id, const std::string& content, bool special, const std::string& file) -> Status {
    RETURN_IF_ERROR(check_id(id, file, content));
    std::string token = content;
    int32_t type;
    if (rules == SpmRules::kPhi3) {
      type = special ? kControl : kUserDefined;
    } else if (special || LooksSpecial(token)) {
      type = kControl;
    } else {
      token = ReplaceAll(std::move(token), kSpaceMarker, " ");
      type = kUserDefined;
    }
    tokens[id] = std::move(token);
    scores[id] = -1000.0f;
    types[id] = type;
    return OkStatus();
  };
  if (const json& decoder = Member(tc, "added_tokens_decoder"); decoder.is_object()) {
    for (const auto& [key, entry] : decoder.items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      const json& content = Member(entry, "content");
      if (key.empty() || *end != '\0' || !content.is_string()) {
        return CorruptError("tokenizer_config.json's added_tokens_decoder entry " + Quoted(key) + " is malformed");
      }
      RETURN_IF_ERROR(apply_added(id, content.get<std::string>(), Truthy(Member(entry, "special")),
                                  "tokenizer_config.json"));
    }
  }
  if (rules == SpmRules::kPhi3 && tj != nullptr) {
    ASSIGN_OR_RETURN(const std::vector<AddedToken> added, AddedTokensOf(tj->doc));
    for (const AddedToken& a : added) RETURN_IF_ERROR(apply_added(a.id, a.content, a.special, "tokenizer.json"));
  }
  // sentencepiece matches a user-defined piece whole; llama.cpp does only for
  // the added tokens (CONTROL or USER_DEFINED), not for a NORMAL token.
  for (size_t i = 0; i < spm.pieces.size(); ++i) {
    if (spm.pieces[i].type == SentencePieceModel::kUserDefined && types[i] == kNormal) {
      return Refuse("tokenizer.model's user-defined piece " + Quoted(spm.pieces[i].piece) + " (id " +
                    std::to_string(i) + ") is not an added token, so llama.cpp would not match it whole");
    }
  }
  RETURN_IF_ERROR(RefuseDuplicates(tokens, "the converted SentencePiece vocabulary"));
  // llama.cpp spells what no token covers in byte tokens, looked up by their
  // text: all 256 must be there, after the added tokens too.
  {
    const std::set<std::string_view> present(tokens.begin(), tokens.end());
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (!present.count(name)) return Refuse(std::string("the SentencePiece vocabulary has no byte token ") + name);
    }
  }

  GgufVocab vocab;
  vocab.tokens = tokens.size();
  GgufMetadata& m = vocab.metadata;
  m.SetString("tokenizer.ggml.model", "llama");
  m.SetString("tokenizer.ggml.pre", "default");
  m.SetStringArray("tokenizer.ggml.tokens", std::move(tokens));
  m.SetF32Array("tokenizer.ggml.scores", std::move(scores));
  m.SetI32Array("tokenizer.ggml.token_type", std::move(types));
  SpecialVocab special(/*load_merges=*/false, vocab.tokens);
  RETURN_IF_ERROR(special.Load(tj, tc, files, config));
  RETURN_IF_ERROR(special.AddTo(m));
  // Without an id in the file, llama.cpp's SentencePiece loader takes unk 0,
  // bos 1, eos 2; they must be the model's own.
  const auto piece_type = [&](size_t id) { return id < spm.pieces.size() ? spm.pieces[id].type : 0; };
  if (!m.Has("tokenizer.ggml.unknown_token_id") && piece_type(0) != SentencePieceModel::kUnknown) {
    return Refuse("tokenizer.model's piece 0 is not its unknown piece, which llama.cpp assumes when no file names it");
  }
  if (!m.Has("tokenizer.ggml.bos_token_id") && piece_type(1) != SentencePieceModel::kControl) {
    return Refuse("tokenizer.model's piece 1 is not a control piece, yet llama.cpp takes it as BOS when no file names one");
  }
  if (!m.Has("tokenizer.ggml.eos_token_id") && piece_type(2) != SentencePieceModel::kControl) {
    return Refuse("tokenizer.model's piece 2 is not a control piece, yet llama.cpp takes it as EOS when no file names one");
  }
  return vocab;
}

// ---- Which vocabulary an architecture gets (each model class's set_vocab) ----

// LlamaModel.set_vocab: SentencePiece, else a Llama-HF BPE tokenizer.json
// (refused), else byte-level BPE.
bool IsLlamaHfTokenizer(const TokenizerJson& tj) {
  const json& model = Member(tj.doc, "model");
  const bool is_llama3 = Member(model, "type") == "BPE" && Truthy(Member(model, "ignore_merges")) &&
                         !(Member(model, "byte_fallback").is_null() || Truthy(Member(model, "byte_fallback")));
  if (is_llama3) return false;
  return Member(model, "type") == "BPE" && Truthy(Member(model, "byte_fallback")) &&
         Member(Member(tj.doc, "decoder"), "type") == "Sequence";
}

}  // namespace

StatusOr<GgufVocab> ConvertTokenizer(const TokenizerFiles& files, const nlohmann::json& config,
                                     std::string_view arch) {
  json tc;  // null when absent
  if (files.tokenizer_config_json) {
    ASSIGN_OR_RETURN(tc, ParseJsonObject(*files.tokenizer_config_json, "tokenizer_config.json"));
  }
  std::optional<TokenizerJson> tj;
  if (files.tokenizer_json) {
    ASSIGN_OR_RETURN(tj, ParseTokenizerJson(*files.tokenizer_json));
  }
  const TokenizerJson* tj_ptr = tj ? &*tj : nullptr;
  const bool has_spm = files.tokenizer_model.has_value();
  const auto need_bpe = [&]() -> Status {
    if (!tj) return NotFoundError("the directory has neither tokenizer.model nor tokenizer.json");
    return OkStatus();
  };

  if (arch == "llama") {
    GgufMetadata before;  // set_vocab writes add_space_prefix first
    bool add_space_prefix = true;
    if (const json& a = Member(tc, "add_prefix_space"); !a.is_null()) {
      if (!a.is_boolean()) return CorruptError("tokenizer_config.json's add_prefix_space is " + a.dump() + ", not a bool");
      add_space_prefix = a.get<bool>();
      before.SetBool("tokenizer.ggml.add_space_prefix", add_space_prefix);
    }
    const auto convert = [&]() -> StatusOr<GgufVocab> {
      if (has_spm) return SentencePieceVocab(files, tj_ptr, tc, config, SpmRules::kConverter, add_space_prefix);
      RETURN_IF_ERROR(need_bpe());
      if (IsLlamaHfTokenizer(*tj)) {
        return Refuse("tokenizer.json is a SentencePiece-style BPE (byte_fallback) without tokenizer.model: the "
                      "converter gives it flat scores, and llama.cpp would merge in another order than it");
      }
      if (add_space_prefix && before.Has("tokenizer.ggml.add_space_prefix")) {
        // llama.cpp would then put a space before the text; whether the
        // Hugging Face tokenizer does depends on its class.
        return Refuse("tokenizer_config.json's add_prefix_space is true for a byte-level BPE tokenizer, which llama.cpp "
                      "and the tokenizer's own class may treat differently");
      }
      return Gpt2Vocab(files, *tj, tc, config);
    };
    StatusOr<GgufVocab> vocab = convert();
    if (!vocab.ok()) return vocab.status();
    before.Merge(vocab->metadata);
    vocab->metadata = std::move(before);
    ASSIGN_OR_RETURN(const std::optional<uint64_t> config_vocab, ConfigInt(config, {"vocab_size"}));
    const uint64_t hparams_vocab = config_vocab.value_or(32000);
    if (hparams_vocab == 32016) {
      // CodeLlama's infill tokens, a second SpecialVocab over the same files;
      // of prefix, suffix, middle and EOT only EOT has a GGUF key.
      SpecialVocab infill(/*load_merges=*/false, std::nullopt, {"prefix", "suffix", "middle", "eot"});
      RETURN_IF_ERROR(infill.Load(tj_ptr, tc, files, config));
      RETURN_IF_ERROR(infill.SetSpecialToken("prefix", 32007));
      RETURN_IF_ERROR(infill.SetSpecialToken("suffix", 32008));
      RETURN_IF_ERROR(infill.SetSpecialToken("middle", 32009));
      RETURN_IF_ERROR(infill.SetSpecialToken("eot", 32010));
      RETURN_IF_ERROR(infill.AddTo(vocab->metadata));
    }
    if (hparams_vocab == 49152) vocab->metadata.SetBool("tokenizer.ggml.add_bos_token", false);  // granite
    return vocab;
  }
  if (arch == "qwen2" || arch == "qwen3" || arch == "qwen2moe" || arch == "qwen3moe") {
    if (has_spm) return SentencePieceVocab(files, tj_ptr, tc, config, SpmRules::kConverter, true);
    RETURN_IF_ERROR(need_bpe());
    return Gpt2Vocab(files, *tj, tc, config);
  }
  if (arch == "gemma2" || arch == "gemma3") {
    if (has_spm) {
      ASSIGN_OR_RETURN(GgufVocab vocab, SentencePieceVocab(files, tj_ptr, tc, config, SpmRules::kConverter, false));
      vocab.metadata.SetBool("tokenizer.ggml.add_space_prefix", false);
      return vocab;
    }
    if (arch == "gemma2") return NotFoundError("the directory has no tokenizer.model, which Gemma 2's converter reads");
    RETURN_IF_ERROR(need_bpe());
    return Gpt2Vocab(files, *tj, tc, config);
  }
  if (arch == "phi3") {
    if (Member(tc, "tokenizer_class") == "GPT2Tokenizer") {
      RETURN_IF_ERROR(need_bpe());
      return Gpt2Vocab(files, *tj, tc, config);
    }
    if (!has_spm) return NotFoundError("the directory has no tokenizer.model, which Phi-3's converter reads");
    return SentencePieceVocab(files, tj_ptr, tc, config, SpmRules::kPhi3, true);
  }
  return UnimplementedError("tensorfs has no tokenizer rules for the " + std::string(arch) + " architecture");
}

}  // namespace tensorfs
