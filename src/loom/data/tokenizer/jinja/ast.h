// The parsed template: statements (Node) holding expressions (Expr).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/data/tokenizer/jinja/value.h"

namespace loom::data::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,      // value
    name,         // name
    attribute,    // args[0].name
    item,         // args[0][args[1]]
    slice,        // args[0][args[1]:args[2]:args[3]], absent parts null
    call,         // args[0](args[1:], keywords)
    filter,       // args[0] | name(args[1:], keywords)
    test,         // args[0] is [not] name(args[1:])
    unary,        // name ("not", "-", "+") args[0]
    binary,       // args[0] name args[1]
    conditional,  // args[0] if args[1] else args[2] (null: undefined)
    list,         // [args...]
    tuple,        // (args...)
    dict,         // {args[0]: args[1], ...}
  };
  Kind kind = Kind::literal;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { text, output, if_chain, for_loop, set, block_set, break_loop, continue_loop };
  Kind kind = Kind::text;
  int line = 0;
  std::string text;                                // text
  ExprPtr expr;                                    // output; set value; for iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // if/elif conditions and bodies (else: null)
  std::vector<std::string> targets;                // for: loop variables; set: name, or namespace and attribute
  bool attribute_target = false;                   // set ns.attr = ...
  ExprPtr loop_filter;                             // for x in xs if cond
  Body body, else_body;                            // for; block set
};

}  // namespace loom::data::jinja
