// Filters, tests and global functions (builtins.h); string and dict methods are in builtins.cpp.
#include <algorithm>
#include <ctime>

#include "loom/core/error.h"
#include "loom/data/tokenizer/jinja/builtins.h"

namespace loom::data::jinja {

namespace {

[[noreturn]] void fail(int line, const std::string& what) { LOOM_THROW(DataError, "line ", line, ": ", what); }

Value argument(const Arguments& a, size_t index, const std::string& name, Value fallback) {
  if (index < a.positional.size()) return a.positional[index];
  if (const Value* v = a.keyword(name)) return *v;
  return fallback;
}

Value call_method(const Value& target, const std::string& name, const Arguments& args, int line) {
  const Value m = method(target, name, line);
  return (*m.function)(args);
}

// The items of `target` as a filter sees them (a dict's keys, a string's characters).
Array items_of(const Value& target, const std::string& filter, int line) {
  if (target.kind == Value::Kind::array) return *target.array;
  if (target.kind == Value::Kind::undefined) return {};
  if (target.kind == Value::Kind::string) {
    Array out;
    for (auto& c : code_points(target.string)) out.push_back(Value::of(std::move(c)));
    return out;
  }
  if (target.kind == Value::Kind::object) {
    Array out;
    for (const auto& [k, v] : *target.object) out.push_back(Value::of(k));
    return out;
  }
  fail(line, "the filter '" + filter + "' needs a list, got " + target.type_name());
}

Value attribute_of(const Value& item, const std::string& name) {
  if (const Value* v = item.find(name)) return *v;
  return Value();
}

Value tojson(const Value& target, const Arguments& args, int line) {
  // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  JsonFormat f;
  f.ensure_ascii = argument(args, 0, "ensure_ascii", Value::of(false)).truthy();
  const Value indent = argument(args, 1, "indent", Value::none());
  if (indent.kind == Value::Kind::integer) f.indent = static_cast<int>(indent.integer);
  const Value separators = argument(args, 2, "separators", Value::none());
  if (separators.kind == Value::Kind::array && separators.array->size() == 2) {
    f.item_separator = to_str((*separators.array)[0]);
    f.key_separator = to_str((*separators.array)[1]);
  }
  f.sort_keys = argument(args, 3, "sort_keys", Value::of(false)).truthy();
  try {
    return Value::of(to_json(target, f));
  } catch (const ValueError& e) {
    fail(line, e.what());
  }
}

Value to_int(const Value& v) {
  if (v.kind == Value::Kind::integer) return v;
  if (v.kind == Value::Kind::floating) return Value::of(static_cast<int64_t>(v.floating));
  if (v.kind == Value::Kind::boolean) return Value::of(static_cast<int64_t>(v.boolean));
  try {
    size_t used = 0;
    const std::string s = python_strip(to_str(v), nullptr, true, true);
    const int64_t i = std::stoll(s, &used);
    if (used == s.size()) return Value::of(i);
  } catch (const std::exception&) {
  }
  return Value::of(int64_t{0});  // jinja2's int filter falls back to its default, 0
}

Value select(const Value& target, const Arguments& args, bool keep, const std::string& name, int line) {
  const Value attr = argument(args, 0, "attribute", Value());
  Array out;
  for (const Value& item : items_of(target, name, line)) {
    const Value v = attribute_of(item, to_str(attr));
    bool passed = v.truthy();
    if (args.positional.size() > 1) {
      Arguments test_args;
      test_args.positional.assign(args.positional.begin() + 2, args.positional.end());
      passed = apply_test(args.positional[1].string, v, test_args, line);
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::of(std::move(out));
}

Value reverse(const Value& target, int line) {
  if (target.kind == Value::Kind::string) {
    auto cps = code_points(target.string);
    std::reverse(cps.begin(), cps.end());
    std::string s;
    for (const auto& c : cps) s += c;
    return Value::of(std::move(s));
  }
  Array items = items_of(target, "reverse", line);
  std::reverse(items.begin(), items.end());
  return Value::of(std::move(items));
}

// map(attribute='x') takes an attribute of each item; map('filter', args...) applies a filter.
Value map(const Value& target, const Arguments& args, int line) {
  Array out;
  const Value* attr = args.keyword("attribute");
  if (!attr && args.positional.empty()) fail(line, "map() needs a filter name or attribute=");
  for (const Value& item : items_of(target, "map", line)) {
    if (attr) {
      out.push_back(attribute_of(item, to_str(*attr)));
    } else {
      Arguments rest;
      rest.positional.assign(args.positional.begin() + 1, args.positional.end());
      out.push_back(apply_filter(to_str(args.positional[0]), item, rest, line));
    }
  }
  return Value::of(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& target, const Arguments& args, int line) {
  if (name == "length" || name == "count") {
    if (target.kind == Value::Kind::string) return Value::of(static_cast<int64_t>(code_point_count(target.string)));
    return Value::of(static_cast<int64_t>(items_of(target, name, line).size()));
  }
  if (name == "trim") {
    const Value chars = argument(args, 0, "chars", Value::none());
    return Value::of(python_strip(to_str(target), chars.kind == Value::Kind::string ? &chars : nullptr, true, true));
  }
  if (name == "tojson") return tojson(target, args, line);
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return call_method(Value::of(to_str(target)), name, {}, line);
  }
  if (name == "replace") return call_method(Value::of(to_str(target)), name, args, line);
  if (name == "string") return Value::of(to_str(target));
  if (name == "safe") return target;
  if (name == "int") return to_int(target);
  if (name == "float") {
    if (target.is_number()) return Value::of(target.number());
    try {
      return Value::of(std::stod(python_strip(to_str(target), nullptr, true, true)));
    } catch (const std::exception&) {
      return Value::of(0.0);  // jinja2's float filter falls back to its default, 0.0
    }
  }
  if (name == "abs") {
    if (target.kind == Value::Kind::integer) return Value::of(target.integer < 0 ? -target.integer : target.integer);
    if (target.kind == Value::Kind::floating) return Value::of(target.floating < 0 ? -target.floating : target.floating);
    fail(line, "abs needs a number, got " + target.type_name());
  }
  if (name == "default" || name == "d") {
    const bool use_default = argument(args, 1, "boolean", Value::of(false)).truthy() ? !target.truthy() : target.is_undefined();
    return use_default ? argument(args, 0, "default_value", Value::of(std::string())) : target;
  }
  if (name == "first" || name == "last") {
    const Array items = items_of(target, name, line);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::of(items_of(target, name, line));
  if (name == "reverse") return reverse(target, line);
  if (name == "join") {
    const std::string sep = to_str(argument(args, 0, "d", Value::of(std::string())));
    const Value attr = argument(args, 1, "attribute", Value::none());
    std::string out;
    size_t i = 0;
    for (const Value& item : items_of(target, name, line)) {
      out += (i++ ? sep : "") + to_str(attr.kind == Value::Kind::none ? item : attribute_of(item, to_str(attr)));
    }
    return Value::of(std::move(out));
  }
  if (name == "items") {
    if (target.kind != Value::Kind::object) fail(line, "the filter 'items' needs a dict, got " + target.type_name());
    return call_method(target, "items", {}, line);
  }
  if (name == "selectattr" || name == "rejectattr") return select(target, args, name == "selectattr", name, line);
  if (name == "map") return map(target, args, line);
  fail(line, "the filter '" + name + "' is not part of the Jinja subset Loom renders");
}

bool apply_test(const std::string& name, const Value& v, const Arguments& args, int line) {
  using K = Value::Kind;
  const auto other = [&] { return argument(args, 0, "value", Value()); };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == K::none;
  if (name == "boolean") return v.kind == K::boolean;
  if (name == "true") return v.kind == K::boolean && v.boolean;
  if (name == "false") return v.kind == K::boolean && !v.boolean;
  if (name == "integer") return v.kind == K::integer;
  if (name == "float") return v.kind == K::floating;
  if (name == "number") return v.is_number() || v.kind == K::boolean;  // Python's bool is a number
  if (name == "string") return v.kind == K::string;
  if (name == "mapping") return v.kind == K::object;
  if (name == "iterable") return v.kind == K::array || v.kind == K::object || v.kind == K::string || v.is_undefined();
  if (name == "sequence") return v.kind == K::array || v.kind == K::object || v.kind == K::string;
  if (name == "callable") return v.kind == K::function;
  if (name == "odd" || name == "even") {
    if (v.kind != K::integer) fail(line, "the test '" + name + "' needs an integer, got " + v.type_name());
    return (((v.integer % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value d = other();
    if (v.kind != K::integer || d.kind != K::integer || d.integer == 0) fail(line, "divisibleby needs non-zero integers");
    return v.integer % d.integer == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "lt" || name == "<" || name == "gt" || name == ">" || name == "le" || name == "<=" || name == "ge" || name == ">=") {
    const Value o = other();
    if (!v.is_number() || !o.is_number()) fail(line, "the test '" + name + "' compares numbers");
    const double a = v.number(), b = o.number();
    if (name == "lt" || name == "<") return a < b;
    if (name == "gt" || name == ">") return a > b;
    if (name == "le" || name == "<=") return a <= b;
    return a >= b;
  }
  if (name == "in") {
    const Value seq = other();
    if (seq.kind == K::string) {
      if (v.kind != K::string) fail(line, "'in <string>' requires a string on the left, got " + v.type_name());
      return seq.string.find(v.string) != std::string::npos;
    }
    if (seq.kind == K::array) return std::any_of(seq.array->begin(), seq.array->end(), [&](const Value& x) { return equals(v, x); });
    if (seq.kind == K::object) return v.kind == K::string && seq.find(v.string) != nullptr;
    if (seq.is_undefined()) return false;
    fail(line, "argument of type '" + seq.type_name() + "' is not iterable");
  }
  if (name == "lower" || name == "upper") {
    return v.kind == K::string && to_str(apply_filter(name, v, {}, line)) == v.string;
  }
  fail(line, "the test '" + name + "' is not part of the Jinja subset Loom renders");
}

Object global_functions() {
  Object g;
  g.emplace_back("namespace", Value::of(Function([](const Arguments& a) {
    Object attrs;
    if (!a.positional.empty() && a.positional[0].kind == Value::Kind::object) attrs = *a.positional[0].object;
    for (const auto& kv : a.keywords) attrs.push_back(kv);
    Value ns = Value::of(std::move(attrs));
    ns.is_namespace = true;
    return ns;
  })));
  g.emplace_back("dict", Value::of(Function([](const Arguments& a) {
    Object attrs(a.keywords.begin(), a.keywords.end());
    return Value::of(std::move(attrs));
  })));
  g.emplace_back("raise_exception", Value::of(Function([](const Arguments& a) -> Value {
    LOOM_THROW(DataError, "the template raised an error: ", a.positional.empty() ? "" : to_str(a.positional[0]));
  })));
  g.emplace_back("range", Value::of(Function([](const Arguments& a) {
    int64_t start = 0, stop = 0, step = 1;
    const auto n = [&](size_t i) { return a.positional[i].kind == Value::Kind::integer ? a.positional[i].integer : 0; };
    if (a.positional.size() == 1) stop = n(0);
    if (a.positional.size() >= 2) start = n(0), stop = n(1);
    if (a.positional.size() >= 3) step = n(2);
    if (step == 0) LOOM_THROW(DataError, "range() step must not be zero");
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::of(i));
    return Value::of(std::move(out));
  })));
  // transformers' strftime_now: the local time formatted with strftime.
  g.emplace_back("strftime_now", Value::of(Function([](const Arguments& a) {
    const std::string format = a.positional.empty() ? "" : to_str(a.positional[0]);
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
    return Value::of(std::string(buf, n));
  })));
  return g;
}

}  // namespace loom::data::jinja
