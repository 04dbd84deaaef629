#include "loom/config/yaml_reader.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "loom/config/yaml_scalar.h"
#include "loom/core/regular_file.h"

namespace loom::config {

namespace fs = std::filesystem;

std::string read_config_file(const std::string& path, const ReadLimits& limits) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    LOOM_THROW(ConfigReadError, path, ": configuration file not found (check the path; relative paths are "
               "taken from the current directory ", fs::current_path(ec).string(), ")");
  if (fs::is_directory(status))
    LOOM_THROW(ConfigReadError, path, ": is a directory, not a YAML configuration file");
  // A FIFO would block the read until a writer comes; a device streams forever.
  if (const std::string kind = non_regular_kind(path); !kind.empty())
    LOOM_THROW(ConfigReadError, path, ": is ", kind, ", not a regular file; give the path of a YAML configuration file");
  const auto size = fs::file_size(path, ec);
  if (!ec && size > limits.max_bytes)
    LOOM_THROW(ConfigReadError, path, ": file is ", size, " bytes; a Loom configuration is a few KB (limit ",
               limits.max_bytes, " bytes). Is this the right file (not a dataset or checkpoint)?");
  std::ifstream in(path, std::ios::binary);
  if (!in) LOOM_THROW(ConfigReadError, path, ": cannot be opened for reading (check its permissions)");
  std::string text;
  // Read at most one byte past the limit: a FIFO or a file that grows must not make us read forever.
  text.resize(limits.max_bytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > limits.max_bytes)
    LOOM_THROW(ConfigReadError, path, ": file is larger than ", limits.max_bytes,
               " bytes; a Loom configuration is a few KB. Is this the right file?");
  return text;
}

namespace {

struct LineCol {
  int line;
  int column;
};

LineCol line_col_at(const std::string& text, std::size_t offset) {
  LineCol lc{1, 1};
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++lc.line;
      lc.column = 1;
    } else {
      ++lc.column;
    }
  }
  return lc;
}

std::string at(const std::string& source, const std::string& text, std::size_t offset) {
  LineCol lc = line_col_at(text, offset);
  return source + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.column);
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid.
std::size_t utf8_sequence_length(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t len;
  std::uint32_t cp;
  if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
  else return 0;
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  static const std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_for_len[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return len;
}

bool is_block_scalar_header(std::string_view content) {
  // "key: |", "- >-", "key: |2 # comment"
  auto hash = content.find(" #");
  if (hash != std::string_view::npos) content = content.substr(0, hash);
  while (!content.empty() && (content.back() == ' ' || content.back() == '\t')) content.remove_suffix(1);
  std::size_t i = content.size();
  while (i > 0 && (content[i - 1] == '+' || content[i - 1] == '-' ||
                   (content[i - 1] >= '0' && content[i - 1] <= '9')))
    --i;
  if (i == 0 || (content[i - 1] != '|' && content[i - 1] != '>')) return false;
  return i == 1 || content[i - 2] == ' ';
}

}  // namespace

void screen_config_text(const std::string& text, const std::string& source, const ReadLimits& limits) {
  if (text.size() > limits.max_bytes)
    LOOM_THROW(ConfigReadError, source, ": ", text.size(), " bytes; a Loom configuration is a few KB (limit ",
               limits.max_bytes, " bytes). Is this the right file?");
  if (text.size() >= 2 && ((text[0] == '\xFF' && text[1] == '\xFE') || (text[0] == '\xFE' && text[1] == '\xFF')))
    LOOM_THROW(ConfigReadError, source, ": file is UTF-16 encoded; save it as UTF-8");
  std::size_t start = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (std::size_t i = start; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0)
      LOOM_THROW(ConfigReadError, at(source, text, i), ": NUL byte at offset ", i,
                 ": this is a binary file, not a YAML configuration");
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F)
      LOOM_THROW(ConfigReadError, at(source, text, i), ": control character 0x", std::hex, int(c), std::dec,
                 " at offset ", i, ": not a text file (YAML allows only printable characters, tab and newline)");
    const std::size_t len = utf8_sequence_length(text, i);
    if (len == 0)
      LOOM_THROW(ConfigReadError, at(source, text, i), ": invalid UTF-8 byte 0x", std::hex, int(c), std::dec,
                 " at offset ", i, ": save the file as UTF-8 text");
    i += len;
  }

  // Structure scan: indentation levels + open flow brackets on each line. It over-estimates
  // rather than misses, and runs before yaml-cpp so that deep input never reaches its
  // recursive parser.
  std::vector<std::size_t> indents;
  int flow = 0;
  long block_scalar_indent = -1;
  std::size_t pos = start;
  int line_no = 0;
  while (pos <= text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    ++line_no;
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t ws = 0;
    bool tab_in_indent = false;
    while (ws < line.size() && (line[ws] == ' ' || line[ws] == '\t')) {
      tab_in_indent |= line[ws] == '\t';
      ++ws;
    }
    std::string_view rest = line.substr(ws);
    if (block_scalar_indent >= 0) {
      if (rest.empty() || static_cast<long>(ws) > block_scalar_indent) continue;
      block_scalar_indent = -1;
    }
    if (rest.empty() || rest[0] == '#') continue;
    if (flow == 0) {
      if (tab_in_indent)
        LOOM_THROW(ConfigReadError, source, ":", line_no, ":1: tab character in the indentation; YAML "
                   "indentation must use spaces (replace the tabs with spaces)");
      while (!indents.empty() && indents.back() > ws) indents.pop_back();
      if (indents.empty() || indents.back() < ws) indents.push_back(ws);
      std::size_t p = 0;
      while (p < rest.size() && rest[p] == '-' && (p + 1 == rest.size() || rest[p + 1] == ' ')) {
        ++p;
        while (p < rest.size() && rest[p] == ' ') ++p;
        indents.push_back(ws + p);
      }
      // ',' cannot start a value outside [ ] or { } (it is a YAML indicator); yaml-cpp loops
      // allocating on a document that starts with one, so it is refused here.
      std::string_view value = rest.substr(p);
      if (value.rfind("---", 0) == 0) value = value.substr(value.find_first_not_of(" -") == std::string_view::npos
                                                                ? value.size()
                                                                : value.find_first_not_of(" -"));
      if (!value.empty() && value[0] == ',')
        LOOM_THROW(ConfigReadError, source, ":", line_no, ":", ws + 1 + (rest.size() - value.size()),
                   ": not valid YAML: ',' cannot start a value outside [ ] or { } (quote it: \",...\")");
    }
    int line_max_flow = flow;
    char quote = 0;
    for (std::size_t i = 0; i < rest.size(); ++i) {
      const char c = rest[i];
      if (quote) {
        if (quote == '"' && c == '\\') { ++i; continue; }
        if (c == quote) {
          if (quote == '\'' && i + 1 < rest.size() && rest[i + 1] == '\'') { ++i; continue; }
          quote = 0;
        }
        continue;
      }
      if (c == '#' && (i == 0 || rest[i - 1] == ' ' || rest[i - 1] == '\t')) break;
      if (c == '"' || c == '\'') quote = c;
      else if (c == '[' || c == '{') line_max_flow = std::max(line_max_flow, ++flow);
      else if ((c == ']' || c == '}') && flow > 0) --flow;
    }
    const std::size_t depth = indents.size() + static_cast<std::size_t>(line_max_flow);
    if (depth > static_cast<std::size_t>(limits.max_depth))
      LOOM_THROW(ConfigReadError, source, ":", line_no, ":1: values are nested more than ", limits.max_depth,
                 " levels deep; a Loom configuration nests a few levels (section, field, list). "
                 "Is this the right file?");
    if (flow == 0 && quote == 0 && is_block_scalar_header(rest)) block_scalar_indent = static_cast<long>(ws);
    if (eol == text.size()) break;
  }
}

namespace {

class Converter {
 public:
  Converter(const std::string& text, const std::string& source, Diagnostics* diag, const ReadLimits& limits,
            const SourceMark* fixed_mark)
      : source_(source), diag_(diag), limits_(limits), fixed_mark_(fixed_mark) {
    std::size_t pos = 0;
    while (pos <= text.size()) {
      std::size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      lines_.emplace_back(text.data() + pos, eol - pos);
      pos = eol + 1;
    }
  }

  ConfigNode convert(const YAML::Node& node, const std::string& path, int depth) {
    if (++nodes_ > limits_.max_nodes)
      LOOM_THROW(ConfigReadError, source_, ": more than ", limits_.max_nodes,
                 " values after expanding aliases (*name); a configuration has a few hundred. "
                 "Aliases that multiply each other (an alias bomb) are refused");
    if (depth > limits_.max_depth)
      LOOM_THROW(ConfigReadError, mark_of(node).str(), ": ", path.empty() ? "value" : path,
                 ": nested more than ", limits_.max_depth,
                 " levels deep (an alias that contains itself?)");
    ConfigNode out;
    out.mark = mark_of(node);
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        out.kind = ConfigNode::Kind::null;
        break;
      case YAML::NodeType::Scalar:
        convert_scalar(node, path, out);
        break;
      case YAML::NodeType::Sequence: {
        check_collection_tag(node, path, out.mark);
        out.kind = ConfigNode::Kind::list;
        std::size_t i = 0;
        for (auto it = node.begin(); it != node.end(); ++it, ++i)
          out.items.push_back(convert(*it, index_path(path, i), depth + 1));
        break;
      }
      case YAML::NodeType::Map:
        check_collection_tag(node, path, out.mark);
        convert_map(node, path, depth, out);
        break;
    }
    return out;
  }

 private:
  SourceMark mark_of(const YAML::Node& node) const {
    if (fixed_mark_) return *fixed_mark_;
    const auto m = node.Mark();
    if (m.line < 0) return SourceMark{source_, 0, 0};
    return SourceMark{source_, m.line + 1, m.column + 1};
  }

  void check_collection_tag(const YAML::Node& node, const std::string& path, const SourceMark& mark) {
    const std::string& tag = node.Tag();
    if (tag.empty() || tag == "?" || tag == "!" || tag == "tag:yaml.org,2002:seq" || tag == "tag:yaml.org,2002:map")
      return;
    error(mark, path, "unsupported YAML tag '" + tag + "'; remove it (Loom reads plain YAML values)");
  }

  void error(const SourceMark& mark, const std::string& path, const std::string& message) {
    if (diag_) diag_->error_at(mark, path, message);
    else LOOM_THROW(ConfigError, mark.str(), ": ", path.empty() ? "" : path + ": ", message);
  }

  void convert_scalar(const YAML::Node& node, const std::string& path, ConfigNode& out) {
    const std::string& text = node.Scalar();
    const std::string& tag = node.Tag();
    if (text.find('\0') != std::string::npos) {
      error(out.mark, path, "string contains a NUL character (\\0 escape); remove it");
      out.kind = ConfigNode::Kind::string;
      out.text = text;
      out.quoted = true;
      return;
    }
    std::string err;
    if (tag == "?") {
      if (!resolve_plain_scalar(text, out, &err)) error(out.mark, path, err);
      return;
    }
    if (tag == "!" || tag == "tag:yaml.org,2002:str") {
      out.kind = ConfigNode::Kind::string;
      out.text = text;
      out.quoted = true;
      return;
    }
    // Explicit core-schema tags: the value must really be of that type.
    static const std::unordered_map<std::string, ConfigNode::Kind> core_tags = {
        {"tag:yaml.org,2002:int", ConfigNode::Kind::integer},
        {"tag:yaml.org,2002:float", ConfigNode::Kind::floating},
        {"tag:yaml.org,2002:bool", ConfigNode::Kind::boolean},
        {"tag:yaml.org,2002:null", ConfigNode::Kind::null}};
    auto wanted = core_tags.find(tag);
    if (wanted == core_tags.end()) {
      error(out.mark, path, "unsupported YAML tag '" + tag + "'; remove it (Loom reads plain YAML values)");
      resolve_plain_scalar(text, out, &err);
      return;
    }
    if (!resolve_plain_scalar(text, out, &err)) {
      error(out.mark, path, err);
      return;
    }
    if (wanted->second == ConfigNode::Kind::floating && out.kind == ConfigNode::Kind::integer) {
      out.kind = ConfigNode::Kind::floating;
      out.floating = static_cast<double>(out.integer);
    }
    if (out.kind != wanted->second)
      error(out.mark, path, "value '" + text + "' does not match its tag " + tag);
  }

  // yaml-cpp reads a bare word on its own line inside a mapping as "word: null"; YAML says it is
  // an error, and it is almost always a forgotten ':'.
  void check_colon_after_key(const YAML::Node& key, const SourceMark& key_mark, const std::string& path) {
    if (fixed_mark_ || key.Tag() != "?" || key_mark.line <= 0) return;
    const std::size_t line = static_cast<std::size_t>(key_mark.line - 1);
    if (line >= lines_.size()) return;
    std::string_view rest = lines_[line];
    const std::size_t col = static_cast<std::size_t>(key_mark.column - 1);
    if (col > rest.size() || rest.substr(col, key.Scalar().size()) != key.Scalar()) return;
    rest = rest.substr(col + key.Scalar().size());
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    if (!rest.empty() && (rest.front() == ':' || rest.front() == ',' || rest.front() == '}')) return;
    error(key_mark, path, "'" + key.Scalar() + "' is not a 'key: value' line (missing ':'?)");
  }

  void convert_map(const YAML::Node& node, const std::string& path, int depth, ConfigNode& out) {
    out.kind = ConfigNode::Kind::map;
    std::unordered_map<std::string, int> first_line;
    std::vector<YAML::Node> merge_storage;
    for (auto it = node.begin(); it != node.end(); ++it) {
      // Copies: `it->first` refers into a temporary proxy that dies at the end of the statement.
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      const SourceMark key_mark = mark_of(key);
      if (key.Type() != YAML::NodeType::Scalar) {
        error(key_mark, path, key.IsNull() ? "empty mapping key; write 'name: value'"
                                           : "mapping keys must be plain names, not lists or maps");
        continue;
      }
      const std::string name = key.Scalar();
      const std::string p = child_path(path, name);
      if (name == "<<" && key.Tag() == "?") {  // YAML merge key: "<<: *defaults"
        merge_storage.push_back(value);
        continue;
      }
      if (auto seen = first_line.find(name); seen != first_line.end()) {
        error(key_mark, p, "duplicate key '" + name + "' (first defined at line " + std::to_string(seen->second) +
                               "); YAML keys must be unique, delete one of them");
        ConfigNode* existing = out.find(name);
        *existing = convert(value, p, depth + 1);
        continue;
      }
      first_line[name] = key_mark.line;
      ConfigEntry entry{name, key_mark, convert(value, p, depth + 1)};
      if (entry.value.is_null()) {
        check_colon_after_key(key, key_mark, p);
        entry.value.mark = key_mark;
      }
      out.entries.push_back(std::move(entry));
    }
    // Merged maps fill in keys the mapping does not set itself; earlier merges win (YAML 1.1).
    for (const YAML::Node& merge : merge_storage) {
      std::vector<YAML::Node> sources;
      if (merge.IsMap()) sources.push_back(merge);
      else if (merge.IsSequence())
        for (auto it = merge.begin(); it != merge.end(); ++it) sources.push_back(*it);
      for (const YAML::Node& src : sources) {
        if (!src.IsMap()) {
          error(mark_of(merge), child_path(path, "<<"), "a merge key '<<' takes a mapping or a list of mappings");
          continue;
        }
        ConfigNode merged = convert(src, path, depth);
        for (auto& e : merged.entries)
          if (!out.find(e.key)) out.entries.push_back(std::move(e));
      }
    }
  }

  const std::string& source_;
  Diagnostics* diag_;
  const ReadLimits& limits_;
  const SourceMark* fixed_mark_;
  std::vector<std::string_view> lines_;
  std::size_t nodes_ = 0;
};

std::string syntax_hint(const std::string& message) {
  if (message.find("tab") != std::string::npos) return " (YAML indentation must use spaces, not tabs)";
  if (message.find("illegal map value") != std::string::npos)
    return " (a value cannot hold another 'key: value' on the same line; put it on its own, indented line)";
  if (message.find("end of map not found") != std::string::npos || message.find("end of sequence") != std::string::npos)
    return " (check the indentation and the closing brackets above this line)";
  return "";
}

}  // namespace

ConfigNode parse_config_text(const std::string& text, const std::string& source, Diagnostics& diag,
                             const ReadLimits& limits) {
  screen_config_text(text, source, limits);
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
    const int col = e.mark.column >= 0 ? e.mark.column + 1 : 0;
    std::string what = e.msg;
    // yaml-cpp's recursion guard reports itself as "bad file".
    if (what == "bad file") what = "nesting too deep";
    LOOM_THROW(ConfigReadError, SourceMark{source, line, col}.str(), ": not valid YAML: ", what, syntax_hint(what));
  }
  if (docs.empty() || docs.front().IsNull())
    LOOM_THROW(ConfigReadError, source, ": the file is empty; a configuration needs at least the model, "
               "train_dataset and lr_scheduler sections");
  if (docs.size() > 1) {
    const auto m = docs[1].Mark();
    LOOM_THROW(ConfigReadError, source, m.line >= 0 ? ":" + std::to_string(m.line + 1) : std::string(),
               ": the file holds ", docs.size(), " YAML documents; a configuration is one mapping "
               "(a '---' separator, or a line that starts a new block at the wrong indentation)");
  }
  Converter converter(text, source, &diag, limits, nullptr);
  ConfigNode root = converter.convert(docs.front(), "", 0);
  if (!root.is_map())
    LOOM_THROW(ConfigReadError, source, ": the top level must be a mapping of sections (checkpoint:, "
               "training:, model:, ...), found ", describe(root));
  return root;
}

ConfigNode parse_inline_value(const std::string& text, const SourceMark& mark) {
  ReadLimits limits;
  try {
    screen_config_text(text, mark.source, limits);
  } catch (const ConfigReadError& e) {
    throw ConfigError(e.what());  // a bad override is an invalid setting, not an unreadable file
  }
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    LOOM_THROW(ConfigError, mark.str(), ": value '", text, "' is not valid YAML: ", e.msg,
               " (quote strings that contain ':' or '#'; lists are written [a, b])");
  }
  Converter converter(text, mark.source, nullptr, limits, &mark);
  return converter.convert(node, "", 0);
}

}  // namespace loom::config
