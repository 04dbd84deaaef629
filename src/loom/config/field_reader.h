// Internal to the config layer: reads ConfigNode values into the typed fields of sections.h
// with the reference's check_type rules (bool is not int, float accepts int, lists are lists,
// None only for Optional fields), reporting every mismatch to Diagnostics with the field's
// dotted path and keeping the default so that the rest of the file is still checked.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "loom/config/diagnostics.h"
#include "loom/config/sections.h"

namespace loom::config::detail {

struct ReadContext {
  Diagnostics& diag;
  std::set<std::string>& explicit_fields;
};

template <class T>
concept Section = requires {
  T::kClassName;
  T::kAllowExtra;
};

template <class T> struct is_vector : std::false_type {};
template <class T> struct is_vector<std::vector<T>> : std::true_type {};
template <class T> struct is_optional : std::false_type {};
template <class T> struct is_optional<std::optional<T>> : std::true_type {};
template <class T> struct is_variant : std::false_type {};
template <class... Ts> struct is_variant<std::variant<Ts...>> : std::true_type {};

// ---- type names, as the reference writes them ---------------------------------------------
template <class T>
std::string type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else if constexpr (std::is_same_v<T, std::string>) return "str";
  else if constexpr (std::is_same_v<T, Json>) return "any";
  else if constexpr (std::is_same_v<T, LayerSpecs>) return "list of layer specs like ['0-3', '5']";
  else if constexpr (std::is_same_v<T, ModuleSelectMap>) return "dict (module path -> list of layer ranges)";
  else if constexpr (std::is_same_v<T, PipelineLayersPerStage>) return "'auto' or a list of strings";
  else if constexpr (is_vector<T>::value) return "List[" + type_name<typename T::value_type>() + "]";
  else if constexpr (is_optional<T>::value) return "Optional[" + type_name<typename T::value_type>() + "]";
  else if constexpr (is_variant<T>::value) {
    return []<class... Ts>(std::variant<Ts...>*) {
      std::string s;
      ((s += (s.empty() ? "" : ", ") + type_name<Ts>()), ...);
      return "Union[" + s + "]";
    }(static_cast<T*>(nullptr));
  } else if constexpr (Section<T>) return std::string(T::kClassName);
  else return "?";
}

// ---- a value as YAML-ish text for messages ("the default is ...") --------------------------
std::string render_scalar(bool v);
std::string render_scalar(std::int64_t v);
std::string render_scalar(double v);
std::string render_scalar(const std::string& v);

template <class T>
std::string render(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return render_scalar(v);
  else if constexpr (std::is_integral_v<T>) return render_scalar(static_cast<std::int64_t>(v));
  else if constexpr (std::is_floating_point_v<T>) return render_scalar(static_cast<double>(v));
  else if constexpr (std::is_same_v<T, std::string>) return render_scalar(v);
  else if constexpr (is_vector<T>::value) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + render(v[i]);
    return s + "]";
  } else if constexpr (is_optional<T>::value) return v ? render(*v) : "null";
  else if constexpr (is_variant<T>::value) return std::visit([](const auto& x) { return render(x); }, v);
  else if constexpr (std::is_same_v<T, PipelineLayersPerStage>) return v.is_auto ? "auto" : render(v.stages);
  else return "{...}";
}

// ---- does a node have the shape of T? (used to pick a Union arm, like check_type) ----------
template <class T>
bool accepts(const ConfigNode& n) {
  using K = ConfigNode::Kind;
  if constexpr (std::is_same_v<T, bool>) return n.kind == K::boolean;
  else if constexpr (std::is_integral_v<T>) return n.kind == K::integer;
  else if constexpr (std::is_floating_point_v<T>) return n.kind == K::integer || n.kind == K::floating;
  else if constexpr (std::is_same_v<T, std::string>) return n.kind == K::string;
  else if constexpr (std::is_same_v<T, Json>) return true;
  else if constexpr (is_vector<T>::value) {
    if (n.kind != K::list) return false;
    for (const auto& item : n.items)
      if (!accepts<typename T::value_type>(item)) return false;
    return true;
  } else if constexpr (is_optional<T>::value) return n.is_null() || accepts<typename T::value_type>(n);
  else if constexpr (is_variant<T>::value) {
    return []<class... Ts>(const ConfigNode& node, std::variant<Ts...>*) {
      return (accepts<Ts>(node) || ...);
    }(n, static_cast<T*>(nullptr));
  } else if constexpr (std::is_same_v<T, LayerSpecs>) return n.is_list();
  else if constexpr (std::is_same_v<T, PipelineLayersPerStage>) return n.is_list() || n.kind == K::string;
  else return n.is_map();
}

// Reports "expected <type>, got <value>" with a hint that fixes the common mistakes.
void type_mismatch(ReadContext& ctx, const ConfigNode& node, const std::string& path,
                   const std::string& expected, const std::string& default_text, bool optional);

void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, bool& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, int& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, std::int64_t& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, double& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, std::string& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, Json& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, LayerSpecs& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, ModuleSelectMap& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, PipelineLayersPerStage& out);
// optimizer and lr_scheduler are kept as written, for optim to type and check (optimizer_checks.cpp
// then fills their typed fields from what optim read).
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, OptimizerConfig& out);
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, LrSchedulerConfig& out);

// "expected a mapping of <class_name> fields, got ...": a section written as something else.
void not_a_mapping(ReadContext& ctx, const ConfigNode& node, const std::string& path, const char* class_name);

template <Section S>
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, S& out);

template <class T>
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, std::vector<T>& out) {
  if (!node.is_list()) {
    type_mismatch(ctx, node, path, type_name<std::vector<T>>(), render(out), false);
    return;
  }
  std::vector<T> items(node.items.size());
  for (std::size_t i = 0; i < node.items.size(); ++i) read_value(ctx, node.items[i], index_path(path, i), items[i]);
  out = std::move(items);
}

template <class T>
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, std::optional<T>& out) {
  if (node.is_null()) {
    out.reset();
    return;
  }
  T value{};
  if (out) value = *out;
  read_value(ctx, node, path, value);
  out = std::move(value);
}

template <class... Ts>
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, std::variant<Ts...>& out) {
  bool done = false;
  auto try_arm = [&]<class T>(T*) {
    if (done || !accepts<T>(node)) return;
    T value{};
    read_value(ctx, node, path, value);
    out = std::move(value);
    done = true;
  };
  (try_arm(static_cast<Ts*>(nullptr)), ...);
  if (!done) type_mismatch(ctx, node, path, type_name<std::variant<Ts...>>(), render(out), false);
}

// Visits the fields of a section: reads each key that is present, remembers it as explicit.
class FieldReader {
 public:
  FieldReader(ReadContext& ctx, const ConfigNode& node, const std::string& path, std::vector<bool>& used)
      : ctx_(ctx), node_(node), path_(path), used_(used) {}

  template <class T>
  void operator()(const char* name, T& field) {
    names.emplace_back(name);
    const int i = index_of(name);
    if (i < 0) return;
    used_[i] = true;
    const std::string p = child_path(path_, name);
    ctx_.explicit_fields.insert(p);
    read_value(ctx_, node_.entries[i].value, p, field);
  }

  // An older name of `name`; setting both is an error.
  template <class T>
  void alias(const char* old_name, const char* name, T& field) {
    const int i = index_of(old_name);
    if (i < 0) return;
    used_[i] = true;
    const std::string old_path = child_path(path_, old_name);
    if (index_of(name) >= 0) {
      ctx_.diag.key_error(old_path, std::string("'") + old_name + "' is the older name of '" + name +
                                    "'; set only one of them");
      return;
    }
    ctx_.explicit_fields.insert(child_path(path_, name));
    read_value(ctx_, node_.entries[i].value, old_path, field);
  }

  std::vector<std::string> names;

 private:
  int index_of(const char* key) const {
    for (std::size_t i = 0; i < node_.entries.size(); ++i)
      if (node_.entries[i].key == key) return static_cast<int>(i);
    return -1;
  }

  ReadContext& ctx_;
  const ConfigNode& node_;
  const std::string& path_;
  std::vector<bool>& used_;
};

void report_unknown_key(ReadContext& ctx, const std::string& path, const std::string& key,
                        const char* class_name, const std::vector<std::string>& allowed);

template <Section S>
void read_value(ReadContext& ctx, const ConfigNode& node, const std::string& path, S& out) {
  if (!node.is_map()) {
    not_a_mapping(ctx, node, path, S::kClassName);
    return;
  }
  std::vector<bool> used(node.entries.size(), false);
  FieldReader reader(ctx, node, path, used);
  S::visit(out, reader);
  for (std::size_t i = 0; i < node.entries.size(); ++i) {
    if (used[i]) continue;
    const auto& e = node.entries[i];
    if constexpr (S::kAllowExtra) {
      out.extras[e.key] = to_json(e.value);
    } else {
      report_unknown_key(ctx, child_path(path, e.key), e.key, S::kClassName, reader.names);
    }
  }
}

}  // namespace loom::config::detail
