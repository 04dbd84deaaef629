#include "loom/config/field_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/config/yaml_scalar.h"

namespace loom::config::detail {

std::string render_scalar(bool v) { return v ? "true" : "false"; }
std::string render_scalar(std::int64_t v) { return std::to_string(v); }
std::string render_scalar(double v) { return format_float(v); }
std::string render_scalar(const std::string& v) { return "'" + v + "'"; }

namespace {

bool is_yaml11_bool_word(const std::string& s) {
  static const char* const words[] = {"yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON",
                                      "off", "Off", "OFF", "y", "Y", "n", "N"};
  for (const char* w : words)
    if (s == w) return true;
  return false;
}

}  // namespace

void type_mismatch(ReadContext& ctx, const ConfigNode& node, const std::string& path, const std::string& expected,
                   const std::string& default_text, bool optional) {
  using K = ConfigNode::Kind;
  std::string msg = "expected " + expected + ", got " + describe(node);
  if (node.is_null() && !optional) {
    msg += "; this field cannot be None: delete the key to use the default (" + default_text + ")";
  } else if (node.kind == K::string && node.quoted) {
    ConfigNode unquoted;
    std::string err;
    if (resolve_plain_scalar(node.text, unquoted, &err) && unquoted.kind != K::string)
      msg += " (quoted, so a string); remove the quotes";
  } else if (node.kind == K::string && expected == "bool" && is_yaml11_bool_word(node.text)) {
    msg += "; write true or false (YAML 1.2 reads yes/no/on/off as strings)";
  } else if (node.kind == K::floating && expected == "int" && std::isfinite(node.floating) &&
             node.floating == std::floor(node.floating)) {
    msg += "; write it without a decimal point";
  } else if (node.kind == K::boolean && (expected == "int" || expected == "float")) {
    msg += "; a bool is not a number here";
  }
  ctx.diag.error(path, msg);
}

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, bool& out) {
  if (node.kind != ConfigNode::Kind::boolean) return type_mismatch(ctx, node, path, "bool", render(out), false);
  out = node.boolean;
}

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, std::int64_t& out) {
  if (node.kind != ConfigNode::Kind::integer) return type_mismatch(ctx, node, path, "int", render(out), false);
  out = node.integer;
}

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, int& out) {
  if (node.kind != ConfigNode::Kind::integer) return type_mismatch(ctx, node, path, "int", render(out), false);
  if (node.integer < std::numeric_limits<int>::min() || node.integer > std::numeric_limits<int>::max()) {
    ctx.diag.error(path, "int " + std::to_string(node.integer) + " is out of range (at most " +
                             std::to_string(std::numeric_limits<int>::max()) + ")");
    return;
  }
  out = static_cast<int>(node.integer);
}

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, double& out) {
  if (node.kind == ConfigNode::Kind::integer) out = static_cast<double>(node.integer);
  else if (node.kind == ConfigNode::Kind::floating) out = node.floating;
  else type_mismatch(ctx, node, path, "float", render(out), false);
}

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, std::string& out) {
  if (node.kind != ConfigNode::Kind::string) return type_mismatch(ctx, node, path, "str", render(out), false);
  out = node.text;
}

void read_value(ReadContext&, const ConfigNode& node, const std::string&, Json& out) { out = to_json(node); }

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, LayerSpecs& out) {
  if (!node.is_list()) {
    std::string msg = "expected a list of layer specs like ['0-3', '5'], got " + describe(node);
    if (node.kind == ConfigNode::Kind::string || node.kind == ConfigNode::Kind::integer)
      msg += "; write it as a list: ['" + node.text + "']";
    ctx.diag.error(path, msg);
    return;
  }
  LayerSpecs specs;
  for (std::size_t i = 0; i < node.items.size(); ++i) {
    const ConfigNode& item = node.items[i];
    if (item.is_list() || item.is_map()) {
      ctx.diag.error(index_path(path, i), "invalid layer spec " + describe(item) +
                                              "; expected one non-negative integer or 'start-end' (e.g. '5', '0-19')");
      continue;
    }
    // Like the reference's str(value).strip(): YAML ints become their text, strings are trimmed.
    std::string text = item.is_null() ? "None" : item.text;
    const auto first = text.find_first_not_of(" \t");
    const auto last = text.find_last_not_of(" \t");
    text = first == std::string::npos ? "" : text.substr(first, last - first + 1);
    specs.specs.push_back(text);
  }
  out = std::move(specs);
}

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, ModuleSelectMap& out) {
  if (!node.is_map()) {
    ctx.diag.error(path, std::string("must be a dict (module path -> list of layer ranges), got ") +
                             kind_name(node.kind) + "; write e.g. {'.*mlp': ['0-3']}");
    return;
  }
  ModuleSelectMap map;
  for (const auto& e : node.entries) {
    const std::string p = child_path(path, e.key);
    if (e.key.find_first_not_of(" \t") == std::string::npos) {
      ctx.diag.key_error(p, "invalid module path key '" + e.key + "'; keys are regular expressions over module paths");
      continue;
    }
    if (!e.value.is_list()) {
      ctx.diag.error(p, std::string("value must be a list or tuple of layer ranges, got ") + kind_name(e.value.kind) +
                            (e.value.is_null() ? "" : "; write it as a list: ['" + e.value.text + "']"));
      continue;
    }
    ModuleSelection sel;
    sel.pattern = e.key;
    read_value(ctx, e.value, p, sel.layers);
    map.entries.push_back(std::move(sel));
  }
  out = std::move(map);
}

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, PipelineLayersPerStage& out) {
  using K = ConfigNode::Kind;
  const std::string how = "write 'auto', or one string per pipeline rank such as ['0-1, 4-8', '2-3, 9']";
  PipelineLayersPerStage value;
  if (node.kind == K::string) {
    if (node.text != "auto") {
      ctx.diag.error(path, "expected 'auto' or a list, got " + describe(node) + "; " + how);
      return;
    }
    out = value;
    return;
  }
  if (!node.is_list()) {
    ctx.diag.error(path, "expected 'auto' or a list, got " + describe(node) + "; " + how);
    return;
  }
  value.is_auto = false;
  bool all_strings = true, all_int_lists = true;
  for (const auto& item : node.items) {
    all_strings &= item.kind == K::string;
    bool ints = item.is_list();
    for (const auto& x : item.items) ints &= x.kind == K::integer;
    all_int_lists &= ints;
  }
  if (all_strings) {
    for (const auto& item : node.items) value.stages.push_back(item.text);
  } else if (all_int_lists && !node.items.empty()) {
    for (const auto& item : node.items) {
      std::vector<std::int64_t> ids;
      for (const auto& x : item.items) ids.push_back(x.integer);
      value.nested_ints.push_back(std::move(ids));
    }
  } else {
    ctx.diag.error(path, "expected a list of strings (one per pipeline rank), got " + describe(node) +
                             "; quote each entry: " + how);
    return;
  }
  out = std::move(value);
}

namespace {

struct NameCollector {
  std::vector<std::string> names;
  template <class T>
  void operator()(const char* n, T&) { names.emplace_back(n); }
  template <class T>
  void alias(const char*, const char*, T&) {}
};

template <class S>
std::vector<std::string> field_names() {
  S section;
  NameCollector names;
  S::visit(section, names);
  return names.names;
}

// The section whose field `key` is, for keys written in the wrong section.
std::string owning_section(const std::string& key) {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> owners = {
      {"training", field_names<TrainingConfig>()},     {"parallelism", field_names<ParallelismConfig>()},
      {"checkpoint", field_names<CheckpointConfig>()}, {"optimizer", field_names<OptimizerConfig>()},
      {"lr_scheduler", field_names<LrSchedulerConfig>()}, {"train_dataset", field_names<TrainDatasetConfig>()},
      {"train_dataset.dataloader", field_names<DataloaderConfig>()}, {"profiler", field_names<ProfilerConfig>()},
      {"recompute", field_names<RecomputeConfig>()},   {"swap", field_names<SwapConfig>()},
      {"monitor", field_names<MonitorConfig>()}};
  for (const auto& [section, names] : owners)
    for (const auto& n : names)
      if (n == key && n != "type" && n != "enable" && n != "select_module") return section;
  return "";
}

// The section as written, and its keys that are not dataclass fields as extras.
template <class S>
void read_as_written(ReadContext& ctx, const ConfigNode& node, const std::string& path, S& out) {
  if (!node.is_map()) {
    not_a_mapping(ctx, node, path, S::kClassName);
    return;
  }
  out.section = to_json(node);
  const std::vector<std::string> fields = field_names<S>();
  for (const auto& e : node.entries) {
    if (std::find(fields.begin(), fields.end(), e.key) != fields.end()) {
      ctx.explicit_fields.insert(child_path(path, e.key));
    } else {
      out.extras[e.key] = to_json(e.value);
    }
  }
}

}  // namespace

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, OptimizerConfig& out) {
  read_as_written(ctx, node, path, out);
}

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, LrSchedulerConfig& out) {
  read_as_written(ctx, node, path, out);
}

void not_a_mapping(ReadContext& ctx, const ConfigNode& node, const std::string& path, const char* class_name) {
  const std::string hint =
      node.is_null() ? "; write its fields indented under it, or delete the line to use the defaults" : "";
  ctx.diag.error(path, std::string("expected a mapping of ") + class_name + " fields, got " + describe(node) + hint);
}

void report_unknown_key(ReadContext& ctx, const std::string& path, const std::string& key, const char* class_name,
                        const std::vector<std::string>& allowed) {
  const std::string shown = key.size() > 100 ? key.substr(0, 97) + "..." : key;
  std::string msg = std::string("Unknown configuration keys for ") + class_name + ": ['" + shown + "']";
  std::string suggestion = did_you_mean(key, allowed);
  const std::string owner = owning_section(key);
  if (!suggestion.empty()) {
    msg += suggestion;
  } else if (!owner.empty()) {
    msg += "; '" + key + "' is a field of the " + owner + " section: move it there";
  } else {
    msg += "; allowed keys:";
    for (std::size_t i = 0; i < allowed.size(); ++i) msg += (i ? ", " : " ") + allowed[i];
  }
  ctx.diag.key_error(path, msg);
}

}  // namespace loom::config::detail
