#include "loom/config/config_node.h"

#include <cctype>

#include "loom/config/yaml_scalar.h"

namespace loom::config {

std::string SourceMark::str() const {
  if (line <= 0) return source;
  return source + ":" + std::to_string(line) + ":" + std::to_string(column);
}

const ConfigNode* ConfigNode::find(std::string_view key) const {
  for (const auto& e : entries)
    if (e.key == key) return &e.value;
  return nullptr;
}

ConfigNode* ConfigNode::find(std::string_view key) {
  for (auto& e : entries)
    if (e.key == key) return &e.value;
  return nullptr;
}

const char* kind_name(ConfigNode::Kind kind) {
  switch (kind) {
    case ConfigNode::Kind::null: return "null";
    case ConfigNode::Kind::boolean: return "bool";
    case ConfigNode::Kind::integer: return "int";
    case ConfigNode::Kind::floating: return "float";
    case ConfigNode::Kind::string: return "str";
    case ConfigNode::Kind::list: return "list";
    case ConfigNode::Kind::map: return "map";
  }
  return "?";
}

std::string describe(const ConfigNode& node) {
  switch (node.kind) {
    case ConfigNode::Kind::null: return "null";
    case ConfigNode::Kind::boolean: return node.boolean ? "bool true" : "bool false";
    case ConfigNode::Kind::integer: return "int " + std::to_string(node.integer);
    case ConfigNode::Kind::floating: return "float " + format_float(node.floating);
    case ConfigNode::Kind::string: {
      std::string s = node.text.size() > 60 ? node.text.substr(0, 57) + "..." : node.text;
      return "str '" + s + "'";
    }
    case ConfigNode::Kind::list:
      return "list of " + std::to_string(node.items.size()) +
             (node.items.size() == 1 ? " item" : " items");
    case ConfigNode::Kind::map: {
      std::string keys;
      for (std::size_t i = 0; i < node.entries.size() && i < 4; ++i)
        keys += (i ? ", " : "") + node.entries[i].key;
      if (node.entries.size() > 4) keys += ", ...";
      return "map {" + keys + "}";
    }
  }
  return "?";
}

Json to_json(const ConfigNode& node) {
  switch (node.kind) {
    case ConfigNode::Kind::null: return nullptr;
    case ConfigNode::Kind::boolean: return node.boolean;
    case ConfigNode::Kind::integer: return node.integer;
    case ConfigNode::Kind::floating: return node.floating;
    case ConfigNode::Kind::string: return node.text;
    case ConfigNode::Kind::list: {
      Json out = Json::array();
      for (const auto& item : node.items) out.push_back(to_json(item));
      return out;
    }
    case ConfigNode::Kind::map: {
      Json out = Json::object();
      for (const auto& e : node.entries) out[e.key] = to_json(e.value);
      return out;
    }
  }
  return nullptr;
}

static bool is_identifier(const std::string& key) {
  if (key.empty() || !(std::isalpha(static_cast<unsigned char>(key[0])) || key[0] == '_'))
    return false;
  for (char c : key)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

std::string child_path(const std::string& parent, const std::string& key) {
  // A pathological key must not make every message megabytes long.
  if (key.size() > 100) return child_path(parent, key.substr(0, 97) + "...");
  if (is_identifier(key)) return parent.empty() ? key : parent + "." + key;
  return parent + "['" + key + "']";
}

std::string index_path(const std::string& parent, std::size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::vector<std::string> path_prefixes(const std::string& path) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path.compare(i, 2, "['") == 0) {
      std::size_t end = path.find("']", i + 2);
      i = end == std::string::npos ? path.size() : end + 2;
    } else if (path[i] == '[') {
      std::size_t end = path.find(']', i);
      i = end == std::string::npos ? path.size() : end + 1;
    } else {
      if (path[i] == '.') ++i;
      while (i < path.size() && path[i] != '.' && path[i] != '[') ++i;
    }
    out.push_back(path.substr(0, i));
  }
  return out;
}

}  // namespace loom::config
