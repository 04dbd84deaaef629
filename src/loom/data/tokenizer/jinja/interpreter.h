// Renders a parsed template: jinja2's scoping (a for loop's body is its own scope, namespace()
// objects are how a loop changes outer state), undefined values that print as nothing and fail
// when used further, and Python's operators.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "loom/data/tokenizer/jinja/ast.h"

namespace loom::data::jinja {

class Interpreter {
 public:
  // `variables` are the template's globals (messages, add_generation_prompt, ...).
  explicit Interpreter(const Object& variables);
  // DataError "line N: ..." when the template fails (or calls raise_exception).
  std::string render(const Body& body);

 private:
  enum class Flow { next, break_loop, continue_loop };
  Flow execute(const Body& body, std::string& out);
  Flow execute(const Node& node, std::string& out);
  Flow for_loop(const Node& node, std::string& out);
  void set(const Node& node, Value value);

  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value arithmetic(const std::string& op, const Value& a, const Value& b, int line);
  Value attribute(const Value& target, const std::string& name, int line);
  Value item(const Value& target, const Value& key, int line);
  Value slice(const Expr& e);
  Value call(const Expr& e);
  Arguments arguments(const Expr& e, size_t first);

  Value lookup(const std::string& name) const;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
};

}  // namespace loom::data::jinja
