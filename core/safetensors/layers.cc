#include "core/safetensors/layers.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <tuple>

namespace tensorfs {
namespace {

constexpr std::array<std::string_view, 5> kStackNames = {"layers", "layer", "h", "block", "blocks"};
constexpr std::array<std::string_view, 8> kHeadNames = {
    "lm_head", "embed_out", "output", "score", "classifier", "cls", "qa_outputs", "head"};
constexpr std::array<std::string_view, 3> kEmbeddingNames = {"wte", "wpe", "shared"};
// Token embeddings come before position embeddings among the embeddings.
constexpr std::array<std::string_view, 7> kTokenEmbeddingNames = {
    "embed_tokens", "wte", "shared", "word_embeddings", "tok_embeddings", "embed_in", "token_embedding"};

std::vector<std::string_view> SplitDots(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    if (dot == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, dot - start));
    start = dot + 1;
  }
}

bool IsNumber(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

template <size_t N>
bool OneOf(std::string_view s, const std::array<std::string_view, N>& set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// Index of the stack component of the leftmost "<stack>.<N>" in `parts`
// within parts[0, limit), or nullopt.
std::optional<size_t> FindBlock(const std::vector<std::string_view>& parts, size_t limit) {
  for (size_t i = 0; i + 1 < limit; ++i) {
    if (OneOf(parts[i], kStackNames) && IsNumber(parts[i + 1])) return i;
  }
  return std::nullopt;
}

// parts[0, n) joined with '.', plus a trailing '.' when n > 0.
std::string JoinPrefix(const std::vector<std::string_view>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += parts[i];
    out += '.';
  }
  return out;
}

// 0 for encoder and vision stacks, 2 for decoder stacks, 1 otherwise.
int Phase(std::string_view prefix) {
  int phase = 1;
  for (std::string_view part : SplitDots(prefix)) {
    if (part.find("decoder") != std::string_view::npos) return 2;
    if (part.find("encoder") != std::string_view::npos || part.find("vision") != std::string_view::npos ||
        part == "visual") {
      phase = 0;
    }
  }
  return phase;
}

// What a group prefix says about its group.
struct Classified {
  LayerGroup::Kind kind = LayerGroup::Kind::kOther;
  std::string stack;  // blocks: "model.layers."
  std::string owner;  // blocks: "model." (the stack's parent; "" at top level)
  std::string index;  // blocks: decimal index without leading zeros
};

Classified Classify(std::string_view prefix) {
  std::string_view trimmed = prefix;
  if (trimmed.ends_with('.')) trimmed.remove_suffix(1);
  const std::vector<std::string_view> parts = SplitDots(trimmed);
  Classified c;
  if (std::optional<size_t> i = FindBlock(parts, parts.size())) {
    c.kind = LayerGroup::Kind::kBlock;
    c.stack = JoinPrefix(parts, *i + 1);
    c.owner = JoinPrefix(parts, *i);
    std::string_view index = parts[*i + 1];
    while (index.size() > 1 && index.front() == '0') index.remove_prefix(1);
    c.index = std::string(index);
    return c;
  }
  for (std::string_view part : parts) {
    if (OneOf(part, kHeadNames)) {
      c.kind = LayerGroup::Kind::kHead;
      return c;
    }
  }
  for (std::string_view part : parts) {
    if (part.find("embed") != std::string_view::npos || OneOf(part, kEmbeddingNames)) {
      c.kind = LayerGroup::Kind::kEmbedding;
      return c;
    }
  }
  return c;
}

bool IsTokenEmbedding(std::string_view prefix) {
  for (std::string_view part : SplitDots(prefix)) {
    if (OneOf(part, kTokenEmbeddingNames)) return true;
  }
  return false;
}

std::string BuiltInGroupOf(std::string_view tensor) {
  const std::vector<std::string_view> parts = SplitDots(tensor);
  // The block must have something under it: "model.layers.3.x", not "model.layers.3".
  if (std::optional<size_t> i = FindBlock(parts, parts.size() - 1)) return JoinPrefix(parts, *i + 2);
  if (parts.size() == 1) return std::string(tensor);
  return JoinPrefix(parts, parts.size() - 1);
}

}  // namespace

std::string_view LayerGroupKindName(LayerGroup::Kind kind) {
  switch (kind) {
    case LayerGroup::Kind::kEmbedding: return "embedding";
    case LayerGroup::Kind::kBlock: return "block";
    case LayerGroup::Kind::kOther: return "other";
    case LayerGroup::Kind::kHead: return "head";
  }
  return "other";
}

Status CheckLayerRegex(std::string_view pattern) {
  if (pattern.size() > kMaxLayerRegexLength) {
    return InvalidArgumentError("layer grouping regex is " + std::to_string(pattern.size()) +
                                " characters long, over the limit of " + std::to_string(kMaxLayerRegexLength));
  }
  size_t run = 0;
  for (char c : pattern) {
    run = c >= '0' && c <= '9' ? run + 1 : 0;
    if (run > kMaxLayerRegexDigits) {
      return InvalidArgumentError("layer grouping regex '" + std::string(pattern) + "' holds a number of more than " +
                                  std::to_string(kMaxLayerRegexDigits) + " digits, over the limit of " +
                                  std::to_string(kMaxLayerRegexDigits));
    }
  }
  return OkStatus();
}

StatusOr<LayerGrouper> LayerGrouper::Create(std::string_view override_regex) {
  LayerGrouper grouper;
  grouper.pattern_ = std::string(override_regex);
  if (override_regex.empty()) return grouper;
  RETURN_IF_ERROR(CheckLayerRegex(override_regex));
  try {
    grouper.regex_ = std::make_shared<const std::regex>(grouper.pattern_, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return InvalidArgumentError(
        "layer grouping regex '" + grouper.pattern_ + "' is not a valid ECMAScript regular expression (" +
        e.what() + "); write one whose first capture group is the layer prefix, for example "
        "'^(model\\.layers\\.\\d+\\.)'");
  }
  return grouper;
}

std::string LayerGrouper::GroupOf(std::string_view tensor) const {
  if (regex_ != nullptr) {
    std::match_results<std::string_view::const_iterator> m;
    if (std::regex_search(tensor.begin(), tensor.end(), m, *regex_)) {
      const bool use_group = m.size() > 1 && m[1].matched;
      std::string group = use_group ? m[1].str() : m[0].str();
      if (!group.empty()) return group;
    }
  }
  return BuiltInGroupOf(tensor);
}

std::vector<LayerGroup> LayerGrouper::Group(const std::vector<std::string>& tensor_names) const {
  struct Pending {
    LayerGroup group;
    Classified c;
    size_t first = 0;  // first appearance among the groups
  };
  std::vector<Pending> pending;
  std::map<std::string, size_t, std::less<>> by_prefix;
  for (const std::string& name : tensor_names) {
    std::string prefix = GroupOf(name);
    auto [it, inserted] = by_prefix.try_emplace(prefix, pending.size());
    if (inserted) {
      Pending p;
      p.c = Classify(prefix);
      p.group.prefix = std::move(prefix);
      p.group.kind = p.c.kind;
      p.group.stack = p.c.stack;
      p.first = pending.size();
      pending.push_back(std::move(p));
    }
    pending[it->second].group.tensors.push_back(name);
  }

  // Stacks, with the first appearance of any of their blocks.
  struct Stack {
    std::string owner;
    int phase = 1;
    size_t first = 0;
  };
  std::map<std::string, Stack> stacks;
  for (const Pending& p : pending) {
    if (p.c.kind != LayerGroup::Kind::kBlock) continue;
    auto [it, inserted] = stacks.try_emplace(p.c.stack);
    if (inserted) it->second = Stack{p.c.owner, Phase(p.c.stack), p.first};
  }
  // The stack that an "other" group lives beside: the one with the longest
  // owner that starts the group's prefix (the first-appearing on a tie).
  auto stack_of = [&](const std::string& prefix) -> const std::pair<const std::string, Stack>* {
    const std::pair<const std::string, Stack>* best = nullptr;
    for (const auto& entry : stacks) {
      if (!prefix.starts_with(entry.second.owner)) continue;
      if (best == nullptr || entry.second.owner.size() > best->second.owner.size() ||
          (entry.second.owner.size() == best->second.owner.size() &&
           entry.second.first < best->second.first)) {
        best = &entry;
      }
    }
    return best;
  };

  // Sort key: (section, a, b, c, numeric index, d).
  using Key = std::tuple<int, size_t, size_t, size_t, size_t, std::string, size_t>;
  auto key_of = [&](const Pending& p) -> Key {
    switch (p.c.kind) {
      case LayerGroup::Kind::kEmbedding:
        return {0, Phase(p.group.prefix) == 2 ? 1 : 0, IsTokenEmbedding(p.group.prefix) ? 0 : 1, p.first,
                0, "", 0};
      case LayerGroup::Kind::kBlock: {
        const Stack& s = stacks.at(p.c.stack);
        return {1, static_cast<size_t>(s.phase), s.first, 0, p.c.index.size(), p.c.index, p.first};
      }
      case LayerGroup::Kind::kOther:
        if (const auto* s = stack_of(p.group.prefix)) {
          return {1, static_cast<size_t>(s->second.phase), s->second.first, 1, 0, "", p.first};
        }
        return {2, 0, p.first, 0, 0, "", 0};
      case LayerGroup::Kind::kHead:
        return {3, 0, p.first, 0, 0, "", 0};
    }
    return {2, 0, p.first, 0, 0, "", 0};
  };
  std::vector<std::pair<Key, size_t>> order;
  order.reserve(pending.size());
  for (size_t i = 0; i < pending.size(); ++i) order.emplace_back(key_of(pending[i]), i);
  std::sort(order.begin(), order.end());

  std::vector<LayerGroup> groups;
  groups.reserve(pending.size());
  for (const auto& [key, i] : order) groups.push_back(std::move(pending[i].group));
  return groups;
}

}  // namespace tensorfs
