#include "loom/data/tokenizer/jinja/interpreter.h"

#include <cmath>

#include "loom/core/error.h"
#include "loom/data/tokenizer/jinja/builtins.h"

namespace loom::data::jinja {

namespace {

[[noreturn]] void fail(int line, const std::string& what) { LOOM_THROW(DataError, "line ", line, ": ", what); }

// An undefined value remembers why it is undefined, for the error when it is used.
Value undefined(std::string why) {
  Value v;
  v.string = std::move(why);
  return v;
}

// The items a for loop visits: a list's elements, a dict's keys, a string's characters.
Array iterate(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::array: return *v.array;
    case Value::Kind::object: {
      Array keys;
      for (const auto& [k, item] : *v.object) keys.push_back(Value::of(k));
      return keys;
    }
    case Value::Kind::string: {
      Array chars;
      for (auto& c : code_points(v.string)) chars.push_back(Value::of(std::move(c)));
      return chars;
    }
    case Value::Kind::undefined: return {};  // jinja2's Undefined iterates as empty
    default: fail(line, "'" + v.type_name() + "' object is not iterable");
  }
}

int64_t python_index(int64_t i, size_t size) { return i < 0 ? i + static_cast<int64_t>(size) : i; }

}  // namespace

Interpreter::Interpreter(const Object& variables) {
  scopes_.emplace_back();
  for (auto& [name, fn] : global_functions()) scopes_.back()[name] = fn;
  for (const auto& [name, value] : variables) scopes_.back()[name] = value;
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  if (execute(body, out) != Flow::next) LOOM_THROW(DataError, "{% break %} or {% continue %} outside a for loop");
  return out;
}

Interpreter::Flow Interpreter::execute(const Body& body, std::string& out) {
  for (const auto& node : body) {
    const Flow flow = execute(*node, out);
    if (flow != Flow::next) return flow;
  }
  return Flow::next;
}

Interpreter::Flow Interpreter::execute(const Node& n, std::string& out) {
  switch (n.kind) {
    case Node::Kind::text: out += n.text; return Flow::next;
    case Node::Kind::output: out += to_str(eval(*n.expr)); return Flow::next;
    case Node::Kind::if_chain:
      for (const auto& [condition, body] : n.branches) {
        if (!condition || eval(*condition).truthy()) return execute(body, out);
      }
      return Flow::next;
    case Node::Kind::for_loop: return for_loop(n, out);
    case Node::Kind::set: set(n, eval(*n.expr)); return Flow::next;
    case Node::Kind::block_set: {
      std::string captured;
      execute(n.body, captured);
      set(n, Value::of(std::move(captured)));
      return Flow::next;
    }
    case Node::Kind::break_loop: return Flow::break_loop;
    case Node::Kind::continue_loop: return Flow::continue_loop;
  }
  return Flow::next;
}

void Interpreter::set(const Node& n, Value value) {
  if (!n.attribute_target) {
    scopes_.back()[n.targets[0]] = std::move(value);
    return;
  }
  const Value target = lookup(n.targets[0]);
  if (target.kind != Value::Kind::object || !target.is_namespace) {
    fail(n.line, "cannot set the attribute '" + n.targets[1] + "' of '" + n.targets[0] +
                     "': only namespace() objects can be changed in a template");
  }
  for (auto& [k, v] : *target.object) {
    if (k == n.targets[1]) {
      v = std::move(value);
      return;
    }
  }
  target.object->emplace_back(n.targets[1], std::move(value));
}

// Each iteration gets its own scope holding the loop variables and `loop`; what the body sets
// stays inside it, as in jinja2.
Interpreter::Flow Interpreter::for_loop(const Node& n, std::string& out) {
  Array items = iterate(eval(*n.expr), n.line);
  if (n.loop_filter) {
    Array kept;
    for (auto& item : items) {
      scopes_.emplace_back();
      scopes_.back()[n.targets[0]] = item;
      const bool keep = eval(*n.loop_filter).truthy();
      scopes_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items.swap(kept);
  }
  const auto length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    scopes_.emplace_back();
    auto& scope = scopes_.back();
    const Value& item = items[static_cast<size_t>(i)];
    if (n.targets.size() == 1) {
      scope[n.targets[0]] = item;
    } else {
      if (item.kind != Value::Kind::array || item.array->size() != n.targets.size()) {
        fail(n.line, "cannot unpack a " + item.type_name() + " into " + std::to_string(n.targets.size()) + " loop variables");
      }
      for (size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = (*item.array)[k];
    }
    Object loop = {{"index", Value::of(i + 1)},          {"index0", Value::of(i)},
                   {"revindex", Value::of(length - i)},  {"revindex0", Value::of(length - i - 1)},
                   {"first", Value::of(i == 0)},         {"last", Value::of(i == length - 1)},
                   {"length", Value::of(length)},
                   {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : undefined("there is no previous item")},
                   {"nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : undefined("there is no next item")}};
    loop.emplace_back("cycle", Value::of(Function([i](const Arguments& a) {
      if (a.positional.empty()) LOOM_THROW(DataError, "loop.cycle() needs at least one value");
      return a.positional[static_cast<size_t>(i) % a.positional.size()];
    })));
    scope["loop"] = Value::of(std::move(loop));
    const Flow flow = execute(n.body, out);
    scopes_.pop_back();
    if (flow == Flow::break_loop) break;
  }
  if (length == 0) return execute(n.else_body, out);
  return Flow::next;
}

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    if (const auto found = it->find(name); found != it->end()) return found->second;
  }
  return undefined("'" + name + "' is undefined");
}

Value Interpreter::eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::literal: return e.value;
    case Expr::Kind::name: return lookup(e.name);
    case Expr::Kind::attribute: return attribute(eval(*e.args[0]), e.name, e.line);
    case Expr::Kind::item: return item(eval(*e.args[0]), eval(*e.args[1]), e.line);
    case Expr::Kind::slice: return slice(e);
    case Expr::Kind::call: return call(e);
    case Expr::Kind::filter: return apply_filter(e.name, eval(*e.args[0]), arguments(e, 1), e.line);
    case Expr::Kind::test: return Value::of(apply_test(e.name, eval(*e.args[0]), arguments(e, 1), e.line) != e.negated);
    case Expr::Kind::unary: {
      const Value v = eval(*e.args[0]);
      if (e.name == "not") return Value::of(!v.truthy());
      if (v.kind == Value::Kind::integer) return Value::of(e.name == "-" ? -v.integer : v.integer);
      if (v.kind == Value::Kind::floating) return Value::of(e.name == "-" ? -v.floating : v.floating);
      fail(e.line, "bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
    }
    case Expr::Kind::binary: return eval_binary(e);
    case Expr::Kind::conditional:
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : undefined("the conditional expression has no else");
    case Expr::Kind::list:
    case Expr::Kind::tuple: {
      Array a;
      for (const auto& x : e.args) a.push_back(eval(*x));
      Value v = Value::of(std::move(a));
      v.is_tuple = e.kind == Expr::Kind::tuple;
      return v;
    }
    case Expr::Kind::dict: {
      Object o;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = eval(*e.args[i]);
        if (key.kind != Value::Kind::string) fail(e.line, "dict keys in a template must be strings");
        o.emplace_back(key.string, eval(*e.args[i + 1]));
      }
      return Value::of(std::move(o));
    }
  }
  return Value();
}

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  const Value a = eval(*e.args[0]);
  if (op == "and") return a.truthy() ? eval(*e.args[1]) : a;  // Python returns the deciding operand
  if (op == "or") return a.truthy() ? a : eval(*e.args[1]);
  const Value b = eval(*e.args[1]);
  if (op == "==") return Value::of(equals(a, b));
  if (op == "!=") return Value::of(!equals(a, b));
  if (op == "in" || op == "not in") {
    Arguments args;
    args.positional.push_back(b);
    return Value::of(apply_test("in", a, args, e.line) == (op == "in"));
  }
  if (op == "~") return Value::of(to_str(a) + to_str(b));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int order = 0;
    if (a.is_number() && b.is_number()) {
      order = a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
    } else if (a.kind == Value::Kind::string && b.kind == Value::Kind::string) {
      order = a.string.compare(b.string);  // UTF-8 byte order is code point order
    } else {
      fail(e.line, "'" + op + "' not supported between '" + a.type_name() + "' and '" + b.type_name() + "'");
    }
    const bool r = op == "<" ? order < 0 : op == ">" ? order > 0 : op == "<=" ? order <= 0 : order >= 0;
    return Value::of(r);
  }
  return arithmetic(op, a, b, e.line);
}

Value Interpreter::arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "+" && a.kind == Value::Kind::string && b.kind == Value::Kind::string) return Value::of(a.string + b.string);
  if (op == "+" && a.kind == Value::Kind::array && b.kind == Value::Kind::array) {
    Array joined = *a.array;
    joined.insert(joined.end(), b.array->begin(), b.array->end());
    return Value::of(std::move(joined));
  }
  if (op == "*" && a.kind == Value::Kind::string && b.kind == Value::Kind::integer) {
    std::string s;
    for (int64_t i = 0; i < b.integer; ++i) s += a.string;
    return Value::of(std::move(s));
  }
  if (!a.is_number() || !b.is_number()) {
    const std::string why = a.is_undefined() ? a.string : b.is_undefined() ? b.string : "";
    fail(line, "unsupported operand types for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'" +
                   (why.empty() ? "" : " (" + why + ")"));
  }
  const bool integers = a.kind == Value::Kind::integer && b.kind == Value::Kind::integer;
  if ((op == "/" || op == "//" || op == "%") && b.number() == 0) fail(line, "division by zero");
  if (integers && op != "/" && !(op == "**" && b.integer < 0)) {
    const int64_t x = a.integer, y = b.integer;
    if (op == "+") return Value::of(x + y);
    if (op == "-") return Value::of(x - y);
    if (op == "*") return Value::of(x * y);
    if (op == "//") return Value::of(static_cast<int64_t>(std::floor(static_cast<double>(x) / static_cast<double>(y))));
    if (op == "%") return Value::of(((x % y) + y) % y);  // Python's sign follows the divisor
    if (op == "**") {
      int64_t r = 1;
      for (int64_t i = 0; i < y; ++i) r *= x;
      return Value::of(r);
    }
  }
  const double x = a.number(), y = b.number();
  if (op == "+") return Value::of(x + y);
  if (op == "-") return Value::of(x - y);
  if (op == "*") return Value::of(x * y);
  if (op == "/") return Value::of(x / y);
  if (op == "//") return Value::of(std::floor(x / y));
  if (op == "%") return Value::of(x - y * std::floor(x / y));
  if (op == "**") return Value::of(std::pow(x, y));
  fail(line, "unknown operator " + op);
}

// jinja2's getattr: a dict's methods come first, then its keys; a str's methods; anything else
// has no attributes (undefined). Undefined itself has none: using it is the error.
Value Interpreter::attribute(const Value& target, const std::string& name, int line) {
  if (target.is_undefined()) fail(line, target.string + ", so it has no attribute '" + name + "'");
  Value m = method(target, name, line);
  if (!m.is_undefined()) return m;
  if (target.kind == Value::Kind::object) {
    if (const Value* v = target.find(name)) return *v;
    return undefined("'" + target.type_name() + " object' has no attribute '" + name + "'");
  }
  return undefined("'" + target.type_name() + " object' has no attribute '" + name + "'");
}

// jinja2's getitem: keys and indexes first, then attributes of that name.
Value Interpreter::item(const Value& target, const Value& key, int line) {
  if (target.is_undefined()) fail(line, target.string + ", so it cannot be indexed");
  if (target.kind == Value::Kind::object && key.kind == Value::Kind::string) {
    if (const Value* v = target.find(key.string)) return *v;
    return attribute(target, key.string, line);
  }
  if ((target.kind == Value::Kind::array || target.kind == Value::Kind::string) && key.kind == Value::Kind::integer) {
    if (target.kind == Value::Kind::array) {
      const int64_t i = python_index(key.integer, target.array->size());
      if (i >= 0 && i < static_cast<int64_t>(target.array->size())) return (*target.array)[static_cast<size_t>(i)];
    } else {
      const auto chars = code_points(target.string);
      const int64_t i = python_index(key.integer, chars.size());
      if (i >= 0 && i < static_cast<int64_t>(chars.size())) return Value::of(chars[static_cast<size_t>(i)]);
    }
    return undefined("index " + std::to_string(key.integer) + " is out of range");
  }
  if (key.kind == Value::Kind::string) return attribute(target, key.string, line);
  return undefined("'" + target.type_name() + " object' has no item " + repr(key));
}

// Python's slice of a list or a str: start:stop:step with negatives and defaults.
Value Interpreter::slice(const Expr& e) {
  const Value target = eval(*e.args[0]);
  int64_t bounds[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.args[static_cast<size_t>(k) + 1]) continue;
    const Value v = eval(*e.args[static_cast<size_t>(k) + 1]);
    if (v.kind == Value::Kind::none) continue;
    if (v.kind != Value::Kind::integer) fail(e.line, "slice indices must be integers");
    bounds[k] = v.integer;
    given[k] = true;
  }
  const int64_t step = bounds[2];
  if (step == 0) fail(e.line, "slice step cannot be zero");
  std::vector<Value> items;
  if (target.kind == Value::Kind::array) {
    items = *target.array;
  } else if (target.kind == Value::Kind::string) {
    for (auto& c : code_points(target.string)) items.push_back(Value::of(std::move(c)));
  } else {
    fail(e.line, "'" + target.type_name() + "' object cannot be sliced");
  }
  const auto n = static_cast<int64_t>(items.size());
  auto clamp = [&](int64_t i, bool is_given, int64_t fallback) {
    if (!is_given) return fallback;
    if (i < 0) i += n;
    return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t start = clamp(bounds[0], given[0], step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(bounds[1], given[1], step > 0 ? n : -1);
  Array out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(items[static_cast<size_t>(i)]);
  if (target.kind == Value::Kind::string) {
    std::string s;
    for (const auto& c : out) s += c.string;
    return Value::of(std::move(s));
  }
  return Value::of(std::move(out));
}

Value Interpreter::call(const Expr& e) {
  const Value callee = eval(*e.args[0]);
  if (callee.kind != Value::Kind::function) {
    const std::string what = callee.is_undefined() ? callee.string : "'" + callee.type_name() + "' object";
    fail(e.line, what + " cannot be called");
  }
  try {
    return (*callee.function)(arguments(e, 1));
  } catch (const DataError& err) {
    const std::string message = err.what();
    if (message.rfind("line ", 0) == 0) throw;
    fail(e.line, message);
  }
}

Arguments Interpreter::arguments(const Expr& e, size_t first) {
  Arguments args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.keywords) args.keywords.emplace_back(k, eval(*v));
  return args;
}

}  // namespace loom::data::jinja
