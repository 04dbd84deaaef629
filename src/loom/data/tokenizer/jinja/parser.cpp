#include "loom/data/tokenizer/jinja/parser.h"

#include <set>

#include "loom/core/error.h"

namespace loom::data::jinja {

namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() { return parse_body({}); }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().type == TokenType::op && peek().value == op; }
  bool at_name(const char* name) const { return peek().type == TokenType::name && peek().value == name; }

  [[noreturn]] void fail(const Token& at, const std::string& what) const {
    LOOM_THROW(DataError, "line ", at.line, ": ", what);
  }
  void expect_op(const char* op) {
    if (!at_op(op)) fail(peek(), std::string("expected '") + op + "', found " + describe(peek()));
    next();
  }
  void expect(TokenType type, const char* what) {
    if (peek().type != type) fail(peek(), std::string("expected ") + what + ", found " + describe(peek()));
    next();
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::end: return "the end of the template";
      case TokenType::statement_close: return "%}";
      case TokenType::expression_close: return "}}";
      case TokenType::string: return "a string";
      default: return "'" + t.value + "'";
    }
  }
  std::string expect_name() {
    if (peek().type != TokenType::name) fail(peek(), "expected a name, found " + describe(peek()));
    return next().value;
  }

  // Statements until one of `ends` opens a tag (left unconsumed) or the template ends.
  Body parse_body(const std::set<std::string>& ends) {
    Body body;
    while (peek().type != TokenType::end) {
      const Token& tok = peek();
      if (tok.type == TokenType::text) {
        auto n = node(Node::Kind::text);
        n->text = next().value;
        n->line = tok.line;
        if (!n->text.empty()) body.push_back(std::move(n));
      } else if (tok.type == TokenType::expression_open) {
        next();
        auto n = node(Node::Kind::output);
        n->line = tok.line;
        n->expr = expression();
        expect(TokenType::expression_close, "}}");
        body.push_back(std::move(n));
      } else {
        if (ends.count(peek(1).value)) return body;
        next();
        statement(body);
      }
    }
    for (const auto& end : ends) {
      if (end.rfind("end", 0) == 0) fail(peek(), "the template ends inside a block: expected {% " + end + " %}");
    }
    return body;
  }

  void statement(Body& body) {
    const Token& tag = peek();
    const std::string name = expect_name();
    if (name == "if") {
      body.push_back(if_chain(tag.line));
    } else if (name == "for") {
      body.push_back(for_loop(tag.line));
    } else if (name == "set") {
      body.push_back(set(tag.line));
    } else if (name == "break" || name == "continue") {
      body.push_back(node(name == "break" ? Node::Kind::break_loop : Node::Kind::continue_loop));
      body.back()->line = tag.line;
      expect(TokenType::statement_close, "%}");
    } else if (name == "generation") {
      // transformers' AssistantTracker block: renders its content; it only marks assistant
      // text when return_assistant_tokens_mask is asked for.
      expect(TokenType::statement_close, "%}");
      Body inner = parse_body({"endgeneration"});
      end_tag("endgeneration");
      for (auto& n : inner) body.push_back(std::move(n));
    } else if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
      fail(tag, "{% " + name + " %} does not close the block that is open here");
    } else {
      fail(tag, "the tag {% " + name + " %} is not part of the Jinja subset Loom renders (if, for, set, break, "
                "continue, generation)");
    }
  }

  void end_tag(const char* name) {
    expect(TokenType::statement_open, "{%");
    if (expect_name() != name) fail(peek(), std::string("expected {% ") + name + " %}");
    expect(TokenType::statement_close, "%}");
  }

  NodePtr if_chain(int line) {
    auto n = node(Node::Kind::if_chain);
    n->line = line;
    ExprPtr condition = expression();
    while (true) {
      expect(TokenType::statement_close, "%}");
      Body body = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(condition), std::move(body));
      expect(TokenType::statement_open, "{%");
      const std::string tag = expect_name();
      if (tag == "endif") break;
      if (tag == "elif") {
        condition = expression();
        continue;
      }
      expect(TokenType::statement_close, "%}");  // else
      n->branches.emplace_back(nullptr, parse_body({"endif"}));
      end_tag("endif");
      return n;
    }
    expect(TokenType::statement_close, "%}");
    return n;
  }

  NodePtr for_loop(int line) {
    auto n = node(Node::Kind::for_loop);
    n->line = line;
    n->targets.push_back(expect_name());
    while (at_op(",")) {
      next();
      n->targets.push_back(expect_name());
    }
    if (!at_name("in")) fail(peek(), "expected 'in' in the for loop, found " + describe(peek()));
    next();
    n->expr = or_expression();  // the iterable stops before an inline `if`
    if (at_name("if")) {
      next();
      n->loop_filter = expression();
    }
    if (at_name("recursive")) fail(peek(), "recursive for loops are not part of the Jinja subset Loom renders");
    expect(TokenType::statement_close, "%}");
    n->body = parse_body({"else", "endfor"});
    expect(TokenType::statement_open, "{%");
    if (expect_name() == "else") {
      expect(TokenType::statement_close, "%}");
      n->else_body = parse_body({"endfor"});
      end_tag("endfor");
      return n;
    }
    expect(TokenType::statement_close, "%}");
    return n;
  }

  NodePtr set(int line) {
    auto n = node(Node::Kind::set);
    n->line = line;
    n->targets.push_back(expect_name());
    if (at_op(".")) {
      next();
      n->targets.push_back(expect_name());
      n->attribute_target = true;
    }
    if (at_op(",")) fail(peek(), "unpacking several names in {% set %} is not part of the Jinja subset Loom renders");
    if (peek().type == TokenType::statement_close) {  // {% set x %}...{% endset %}
      next();
      n->kind = Node::Kind::block_set;
      n->body = parse_body({"endset"});
      end_tag("endset");
      return n;
    }
    expect_op("=");
    n->expr = expression();
    expect(TokenType::statement_close, "%}");
    return n;
  }

  static NodePtr node(Node::Kind kind) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    return n;
  }

  ExprPtr make(Expr::Kind kind, int line, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->name = std::move(name);
    return e;
  }

  // jinja2's grammar, loosest first: conditional, or, and, not, comparisons, + -, ~, * / // %,
  // **, unary - +, then primaries with their postfixes, filters and tests.
  ExprPtr expression() {
    ExprPtr e = or_expression();
    while (at_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Kind::conditional, line);
      c->args.push_back(std::move(e));
      c->args.push_back(or_expression());
      if (at_name("else")) {
        next();
        c->args.push_back(expression());
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(ExprPtr left, const std::string& op, ExprPtr right, int line) {
    auto e = make(Expr::Kind::binary, line, op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr or_expression() {
    ExprPtr e = and_expression();
    while (at_name("or")) {
      const int line = next().line;
      e = binary(std::move(e), "or", and_expression(), line);
    }
    return e;
  }

  ExprPtr and_expression() {
    ExprPtr e = not_expression();
    while (at_name("and")) {
      const int line = next().line;
      e = binary(std::move(e), "and", not_expression(), line);
    }
    return e;
  }

  ExprPtr not_expression() {
    if (at_name("not")) {
      auto e = make(Expr::Kind::unary, next().line, "not");
      e->args.push_back(not_expression());
      return e;
    }
    return comparison();
  }

  ExprPtr comparison() {
    ExprPtr e = additive();
    while (true) {
      const int line = peek().line;
      if (peek().type == TokenType::op && (peek().value == "==" || peek().value == "!=" || peek().value == "<" ||
                                           peek().value == ">" || peek().value == "<=" || peek().value == ">=")) {
        const std::string op = next().value;
        e = binary(std::move(e), op, additive(), line);
      } else if (at_name("in")) {
        next();
        e = binary(std::move(e), "in", additive(), line);
      } else if (at_name("not") && peek(1).type == TokenType::name && peek(1).value == "in") {
        next();
        next();
        e = binary(std::move(e), "not in", additive(), line);
      } else {
        return e;
      }
    }
  }

  ExprPtr additive() {
    ExprPtr e = concatenation();
    while (at_op("+") || at_op("-")) {
      const Token& op = next();
      e = binary(std::move(e), op.value, concatenation(), op.line);
    }
    return e;
  }

  ExprPtr concatenation() {
    ExprPtr e = multiplicative();
    while (at_op("~")) {
      const int line = next().line;
      e = binary(std::move(e), "~", multiplicative(), line);
    }
    return e;
  }

  ExprPtr multiplicative() {
    ExprPtr e = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& op = next();
      e = binary(std::move(e), op.value, power(), op.line);
    }
    return e;
  }

  ExprPtr power() {
    ExprPtr e = unary(true);
    while (at_op("**")) {
      const int line = next().line;
      e = binary(std::move(e), "**", unary(true), line);
    }
    return e;
  }

  ExprPtr unary(bool with_filters) {
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& op = next();
      e = make(Expr::Kind::unary, op.line, op.value);
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    return with_filters ? filters(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& tok = next();
    switch (tok.type) {
      case TokenType::string: {
        std::string s = tok.value;
        while (peek().type == TokenType::string) s += next().value;  // "a" "b" is "ab"
        auto e = make(Expr::Kind::literal, tok.line);
        e->value = Value::of(std::move(s));
        return e;
      }
      case TokenType::integer:
      case TokenType::floating: {
        auto e = make(Expr::Kind::literal, tok.line);
        try {
          e->value = tok.type == TokenType::integer ? Value::of(static_cast<int64_t>(std::stoll(tok.value)))
                                                    : Value::of(std::stod(tok.value));
        } catch (const std::exception&) {
          fail(tok, "the number " + tok.value + " is out of range");
        }
        return e;
      }
      case TokenType::name: return name_or_constant(tok);
      case TokenType::op:
        if (tok.value == "(") return parenthesized(tok.line);
        if (tok.value == "[") return sequence(Expr::Kind::list, "]", tok.line);
        if (tok.value == "{") return dict(tok.line);
        [[fallthrough]];
      default: fail(tok, "unexpected " + describe(tok) + " in an expression");
    }
  }

  ExprPtr name_or_constant(const Token& tok) {
    auto e = make(Expr::Kind::literal, tok.line);
    if (tok.value == "true" || tok.value == "True") e->value = Value::of(true);
    else if (tok.value == "false" || tok.value == "False") e->value = Value::of(false);
    else if (tok.value == "none" || tok.value == "None") e->value = Value::none();
    else e = make(Expr::Kind::name, tok.line, tok.value);
    return e;
  }

  ExprPtr parenthesized(int line) {
    if (at_op(")")) {
      next();
      return make(Expr::Kind::tuple, line);
    }
    ExprPtr first = expression();
    if (!at_op(",")) {
      expect_op(")");
      return first;
    }
    auto t = make(Expr::Kind::tuple, line);
    t->args.push_back(std::move(first));
    while (at_op(",")) {
      next();
      if (at_op(")")) break;
      t->args.push_back(expression());
    }
    expect_op(")");
    return t;
  }

  ExprPtr sequence(Expr::Kind kind, const char* close, int line) {
    auto e = make(kind, line);
    while (!at_op(close)) {
      e->args.push_back(expression());
      if (!at_op(",")) break;
      next();
    }
    expect_op(close);
    return e;
  }

  ExprPtr dict(int line) {
    auto e = make(Expr::Kind::dict, line);
    while (!at_op("}")) {
      e->args.push_back(expression());
      expect_op(":");
      e->args.push_back(expression());
      if (!at_op(",")) break;
      next();
    }
    expect_op("}");
    return e;
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (at_op(".")) {
        next();
        const Token& attr = next();
        if (attr.type != TokenType::name && attr.type != TokenType::integer) fail(attr, "expected an attribute name after '.'");
        auto a = make(Expr::Kind::attribute, line, attr.value);
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (at_op("[")) {
        next();
        e = subscript(std::move(e), line);
      } else if (at_op("(")) {
        e = call(std::move(e), Expr::Kind::call, line);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target, int line) {
    std::vector<ExprPtr> parts(1);
    bool slice = false;
    while (!at_op("]")) {
      if (at_op(":")) {
        next();
        slice = true;
        parts.emplace_back();
        continue;
      }
      parts.back() = expression();
    }
    next();
    auto e = make(slice ? Expr::Kind::slice : Expr::Kind::item, line);
    e->args.push_back(std::move(target));
    if (!slice && !parts[0]) fail(peek(), "empty subscript []");
    if (slice && parts.size() > 3) fail(peek(), "a slice has at most start:stop:step");
    parts.resize(slice ? 3 : 1);
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // (args, name=value, ...) after a callee, filter or test.
  ExprPtr call(ExprPtr callee, Expr::Kind kind, int line, std::string name = {}) {
    auto e = make(kind, line, std::move(name));
    e->args.push_back(std::move(callee));
    if (!at_op("(")) return e;
    next();
    while (!at_op(")")) {
      if (peek().type == TokenType::name && peek(1).type == TokenType::op && peek(1).value == "=") {
        const std::string key = next().value;
        next();
        e->keywords.emplace_back(key, expression());
      } else {
        e->args.push_back(expression());
      }
      if (!at_op(",")) break;
      next();
    }
    expect_op(")");
    return e;
  }

  ExprPtr filters(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (at_op("|")) {
        next();
        e = call(std::move(e), Expr::Kind::filter, line, expect_name());
      } else if (at_name("is")) {
        next();
        bool negated = false;
        if (at_name("not")) {
          next();
          negated = true;
        }
        e = call(std::move(e), Expr::Kind::test, line, name_for_test());
        e->negated = negated;
      } else {
        return e;
      }
    }
  }

  // Test names include the constants none/true/false and comparison aliases.
  std::string name_for_test() {
    const Token& tok = next();
    if (tok.type == TokenType::name) return tok.value;
    if (tok.type == TokenType::op && (tok.value == "==" || tok.value == "!=" || tok.value == "<" || tok.value == ">" ||
                                      tok.value == "<=" || tok.value == ">=")) {
      return tok.value;
    }
    fail(tok, "expected a test name after 'is', found " + describe(tok));
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace loom::data::jinja
