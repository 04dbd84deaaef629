#include "loom/config/overrides.h"

#include "loom/config/yaml_reader.h"
#include "loom/core/error.h"

namespace loom::config {

namespace {

std::string where(const std::string& text) { return "--set " + text; }

}  // namespace

Override parse_override(const std::string& text) {
  Override o;
  o.text = text;
  // The key ends at the first '=' outside a quoted key.
  std::size_t i = 0;
  std::size_t eq = std::string::npos;
  bool expect_key = true;
  std::string current;
  auto fail = [&](const std::string& why) {
    LOOM_THROW(ConfigError, where(text), ": ", why,
               " (write --set section.field=value, e.g. --set training.steps=20)");
  };
  auto push_key = [&]() {
    if (current.empty()) fail("empty key in '" + text.substr(0, i) + "'");
    o.path.push_back(OverrideStep{false, current, 0});
    current.clear();
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '=') {
      eq = i;
      break;
    }
    if (c == '[') {
      if (!current.empty()) push_key();
      else if (expect_key && o.path.empty()) fail("the path must start with a section name");
      if (i + 1 < text.size() && (text[i + 1] == '\'' || text[i + 1] == '"')) {
        const char q = text[i + 1];
        const std::size_t end = text.find(std::string(1, q) + "]", i + 2);
        if (end == std::string::npos) fail("unterminated quoted key");
        o.path.push_back(OverrideStep{false, text.substr(i + 2, end - i - 2), 0});
        i = end + 2;
      } else {
        const std::size_t end = text.find(']', i);
        if (end == std::string::npos) fail("missing ']'");
        const std::string digits = text.substr(i + 1, end - i - 1);
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
          fail("list index '[" + digits + "]' must be a non-negative integer");
        o.path.push_back(OverrideStep{true, "", std::stoul(digits)});
        i = end + 1;
      }
      expect_key = false;
      continue;
    }
    if (c == '.') {
      if (!current.empty()) push_key();
      else if (expect_key) fail("empty key in '" + text.substr(0, i + 1) + "'");
      expect_key = true;
      ++i;
      continue;
    }
    current += c;
    expect_key = false;
    ++i;
  }
  if (eq == std::string::npos) fail("missing '=' between the key and the value");
  if (!current.empty()) push_key();
  if (o.path.empty() || expect_key) fail("empty key");
  o.value_text = text.substr(eq + 1);
  return o;
}

void apply_override(ConfigNode& root, const Override& o) {
  const SourceMark mark{where(o.text), 0, 0};
  ConfigNode value = parse_inline_value(o.value_text, mark);
  ConfigNode* node = &root;
  std::string path;
  for (std::size_t s = 0; s < o.path.size(); ++s) {
    const OverrideStep& step = o.path[s];
    const bool last = s + 1 == o.path.size();
    if (step.is_index) {
      if (!node->is_list())
        LOOM_THROW(ConfigError, mark.str(), ": ", path, " is ", describe(*node), ", not a list; [", step.index,
                   "] cannot be set");
      if (step.index > node->items.size())
        LOOM_THROW(ConfigError, mark.str(), ": ", path, " has ", node->items.size(), " items; index ", step.index,
                   " is past its end (use index ", node->items.size(), " to append)");
      if (step.index == node->items.size()) {
        ConfigNode fresh;
        fresh.mark = mark;
        node->items.push_back(fresh);
      }
      path = index_path(path, step.index);
      node = &node->items[step.index];
    } else {
      if (node->is_null()) {  // "training:" with nothing under it becomes a mapping
        node->kind = ConfigNode::Kind::map;
        node->mark = mark;
      }
      if (!node->is_map())
        LOOM_THROW(ConfigError, mark.str(), ": ", path.empty() ? "the top level" : path, " is ", describe(*node),
                   ", not a mapping; '", step.key, "' cannot be set under it");
      ConfigNode* child = node->find(step.key);
      if (!child) {
        ConfigEntry entry;
        entry.key = step.key;
        entry.key_mark = mark;
        entry.value.mark = mark;
        node->entries.push_back(std::move(entry));
        child = &node->entries.back().value;
      } else {
        for (auto& e : node->entries)
          if (e.key == step.key) e.key_mark = mark;  // messages about this key now point at the override
      }
      path = child_path(path, step.key);
      node = child;
    }
    if (last) *node = value;
  }
}

}  // namespace loom::config
