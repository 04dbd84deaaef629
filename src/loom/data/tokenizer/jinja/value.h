// Values of the Jinja interpreter, with Python's semantics where chat templates can see them:
// truthiness, equality, str() and repr(), and json.dumps for `tojson`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::data::jinja {

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict

// Positional and keyword arguments of a call.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
  const Value* keyword(const std::string& name) const;
};

using Function = std::function<Value(const Arguments&)>;

struct Value {
  enum class Kind { undefined, none, boolean, integer, floating, string, array, object, function };
  Kind kind = Kind::undefined;
  bool boolean = false;
  int64_t integer = 0;
  double floating = 0;
  std::string string;
  std::shared_ptr<Array> array;
  std::shared_ptr<Object> object;  // shared: a namespace() is changed through any copy of it
  std::shared_ptr<Function> function;
  bool is_namespace = false;
  bool is_tuple = false;  // an array that prints as (a, b)

  static Value none() { Value v; v.kind = Kind::none; return v; }
  static Value of(bool b) { Value v; v.kind = Kind::boolean; v.boolean = b; return v; }
  static Value of(int64_t i) { Value v; v.kind = Kind::integer; v.integer = i; return v; }
  static Value of(double d) { Value v; v.kind = Kind::floating; v.floating = d; return v; }
  static Value of(std::string s) { Value v; v.kind = Kind::string; v.string = std::move(s); return v; }
  static Value of(Array a) { Value v; v.kind = Kind::array; v.array = std::make_shared<Array>(std::move(a)); return v; }
  static Value of(Object o) { Value v; v.kind = Kind::object; v.object = std::make_shared<Object>(std::move(o)); return v; }
  static Value of(Function f) { Value v; v.kind = Kind::function; v.function = std::make_shared<Function>(std::move(f)); return v; }
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_number() const { return kind == Kind::integer || kind == Kind::floating; }
  double number() const { return kind == Kind::integer ? static_cast<double>(integer) : floating; }
  // Python's bool(): empty strings, lists and dicts, 0 and None are false; undefined too.
  bool truthy() const;
  // A key of an object, or nullptr.
  const Value* find(const std::string& key) const;
  // Python's type name, for error messages ("str", "list", "dict", ...).
  std::string type_name() const;
};

// Python's ==.
bool equals(const Value& a, const Value& b);
// Python's str() as Jinja prints it ({{ x }}); undefined prints nothing.
std::string to_str(const Value& v);
// Python's repr().
std::string repr(const Value& v);
// Python's float repr: the shortest digits that round-trip, "1.0", "1e-05", "1e+20".
std::string float_repr(double d);

struct JsonFormat {
  int indent = -1;  // -1: one line
  std::string item_separator;  // "": Python's default, ", " (or "," with an indent)
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python's json.dumps as transformers' tojson filter calls it.
std::string to_json(const Value& v, const JsonFormat& format, int depth = 0);

}  // namespace loom::data::jinja
