// The parsed YAML document as Loom sees it: typed scalars resolved by the YAML 1.2 core schema,
// maps in file order, and the source position of every node so that any later check can point
// at the exact line. yaml-cpp is only used to build this tree (see yaml_reader.h); everything
// downstream works on ConfigNode.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::config {

using Json = nlohmann::ordered_json;

// Where a value came from: a file position or a command-line override.
struct SourceMark {
  std::string source;  // file path, or "--set training.steps=20"
  int line = 0;        // 1-based; 0 when the source has no lines (overrides)
  int column = 0;      // 1-based
  // "train.yaml:12:3", "train.yaml" or "--set training.steps=20".
  std::string str() const;
};

// Where every value and every key of a document sits, by dotted path (see child_path below), so
// that a check run long after parsing can still point at the line it is about.
struct SourceMarks {
  std::unordered_map<std::string, SourceMark> values;
  std::unordered_map<std::string, SourceMark> keys;
};

struct ConfigEntry;

struct ConfigNode {
  enum class Kind { null, boolean, integer, floating, string, list, map };

  Kind kind = Kind::null;
  bool boolean = false;
  std::int64_t integer = 0;
  double floating = 0.0;
  std::string text;     // the string value; for other scalars the text as written
  bool quoted = false;  // written in quotes (so a string whatever it looks like)
  std::vector<ConfigNode> items;     // list
  std::vector<ConfigEntry> entries;  // map, in file order
  SourceMark mark;

  bool is_map() const { return kind == Kind::map; }
  bool is_list() const { return kind == Kind::list; }
  bool is_null() const { return kind == Kind::null; }
  const ConfigNode* find(std::string_view key) const;
  ConfigNode* find(std::string_view key);
};

struct ConfigEntry {
  std::string key;
  SourceMark key_mark;
  ConfigNode value;
};

// "null", "bool", "int", "float", "str", "list", "map" (the reference's Python type names).
const char* kind_name(ConfigNode::Kind kind);

// A short description of a value for messages: "str 'abc'", "int 3", "list of 2 items", ...
std::string describe(const ConfigNode& node);

// The value as JSON (int/float/bool/str/list/map kept apart; map order kept).
Json to_json(const ConfigNode& node);

// Dotted paths used in every message: training.steps, callbacks[0].type,
// recompute.select_module['.*mlp'][1]. Keys that are not identifiers are quoted.
std::string child_path(const std::string& parent, const std::string& key);
std::string index_path(const std::string& parent, std::size_t index);
// Every prefix of a path, shortest first ("a", "a.b", "a.b[0]").
std::vector<std::string> path_prefixes(const std::string& path);

}  // namespace loom::config
