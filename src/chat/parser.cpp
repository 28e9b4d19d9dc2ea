#include "chat/parser.hpp"

#include <algorithm>
#include <initializer_list>

#include "chat/lexer.hpp"
#include "util/error.hpp"

namespace neuron::chat {

namespace {

using namespace ast;

// Deep enough for any real template; shallow enough that the recursive
// parser and renderer stay far from the stack limit on hostile input.
constexpr int max_nesting = 128;

[[noreturn]] void syntax_error(int line, const std::string& message) {
  throw Error(errc::template_error, "line " + std::to_string(line) + ": " + message);
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::text: return "template text";
    case TokenKind::expr_begin: return "'{{'";
    case TokenKind::expr_end: return "'}}'";
    case TokenKind::stmt_begin: return "'{%'";
    case TokenKind::stmt_end: return "'%}'";
    case TokenKind::name: return "'" + t.text + "'";
    case TokenKind::string: return "string literal";
    case TokenKind::integer:
    case TokenKind::floating: return "number " + t.text;
    case TokenKind::op: return "'" + t.text + "'";
    case TokenKind::eof: return "end of template";
  }
  return "token";
}

template <class Node>
ExprPtr make(int line, Node node) {
  auto e = std::make_unique<Expr>();
  e->line = line;
  e->node = std::move(node);
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse() {
    Body body = parse_body({}, "", 0);
    return body;
  }

 private:
  struct Nest {
    Parser& p;
    Nest(Parser& parser, int line) : p(parser) {
      if (++p.depth_ > max_nesting) syntax_error(line, "template nested deeper than " + std::to_string(max_nesting) + " levels");
    }
    ~Nest() { --p.depth_; }
  };

  const Token& peek(std::size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at_op(std::string_view op, std::size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::op && peek(ahead).text == op;
  }
  bool at_name(std::string_view name, std::size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::name && peek(ahead).text == name;
  }
  bool accept_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) syntax_error(peek().line, "expected '" + std::string(op) + "', got " + describe(peek()));
  }
  void expect_name_kw(std::string_view name) {
    if (!accept_name(name)) syntax_error(peek().line, "expected '" + std::string(name) + "', got " + describe(peek()));
  }
  std::string expect_identifier(const char* what) {
    if (peek().kind != TokenKind::name) syntax_error(peek().line, std::string("expected ") + what + ", got " + describe(peek()));
    return next().text;
  }
  void expect_stmt_end(std::string_view tag) {
    if (peek().kind != TokenKind::stmt_end) {
      syntax_error(peek().line, "unexpected " + describe(peek()) + " in '" + std::string(tag) + "' tag (expected '%}')");
    }
    next();
  }

  // ---- statements -------------------------------------------------------

  // Parses until EOF (top level) or a {% tag %} whose keyword is in `ends`,
  // which is left for the caller to consume.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string_view opener, int opener_line) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::eof) {
        if (ends.size() != 0) {
          syntax_error(opener_line, "unclosed block '" + std::string(opener) + "' (missing {% " +
                                        std::string(*std::prev(ends.end())) + " %})");
        }
        return body;
      }
      if (t.kind == TokenKind::text) {
        body.push_back(Stmt{t.line, Text{t.text}});
        next();
      } else if (t.kind == TokenKind::expr_begin) {
        next();
        ExprPtr e = parse_tuple_expression();
        if (peek().kind != TokenKind::expr_end) {
          syntax_error(peek().line, "unexpected " + describe(peek()) + " in '{{ }}' (expected '}}')");
        }
        next();
        body.push_back(Stmt{t.line, Output{std::move(e)}});
      } else if (t.kind == TokenKind::stmt_begin) {
        const Token& keyword = peek(1);
        if (keyword.kind == TokenKind::name &&
            std::find(ends.begin(), ends.end(), std::string_view(keyword.text)) != ends.end()) {
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        syntax_error(t.line, "unexpected " + describe(t));
      }
    }
  }

  // Consumes "{% keyword" (the caller checked it is there).
  std::string open_tag() {
    next();
    return next().text;
  }

  Stmt parse_statement() {
    const Token& kw = peek();
    const int line = kw.line;
    if (kw.kind != TokenKind::name) syntax_error(line, "expected a tag name after '{%', got " + describe(kw));
    const std::string name = next().text;
    Nest nest(*this, line);
    if (name == "if") return Stmt{line, parse_if(line)};
    if (name == "for") return Stmt{line, parse_for(line)};
    if (name == "set") return Stmt{line, parse_set(line)};
    if (name == "macro") return Stmt{line, parse_macro(line)};
    if (name == "filter") return Stmt{line, parse_filter_block(line)};
    if (name == "generation") {
      expect_stmt_end(name);
      Generation g{parse_body({"endgeneration"}, "generation", line)};
      open_tag();
      expect_stmt_end("endgeneration");
      return Stmt{line, std::move(g)};
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) syntax_error(line, "'" + name + "' outside of a for loop");
      expect_stmt_end(name);
      if (name == "break") return Stmt{line, Break{}};
      return Stmt{line, Continue{}};
    }
    static constexpr std::string_view closers[] = {"elif", "else", "endif", "endfor", "endset", "endmacro",
                                                   "endfilter", "endgeneration", "endraw"};
    if (std::find(std::begin(closers), std::end(closers), name) != std::end(closers)) {
      syntax_error(line, "unexpected '{% " + name + " %}' without a matching opening tag");
    }
    syntax_error(line, "unknown tag '" + name + "'");
  }

  If parse_if(int line) {
    If node;
    ExprPtr cond = parse_expression();
    expect_stmt_end("if");
    while (true) {
      Body body = parse_body({"elif", "else", "endif"}, "if", line);
      node.branches.emplace_back(std::move(cond), std::move(body));
      const std::string kw = open_tag();
      if (kw == "elif") {
        cond = parse_expression();
        expect_stmt_end("elif");
        continue;
      }
      if (kw == "else") {
        expect_stmt_end("else");
        node.otherwise = parse_body({"endif"}, "if", line);
        open_tag();
      }
      expect_stmt_end("endif");
      return node;
    }
  }

  For parse_for(int line) {
    For node;
    const bool paren = accept_op("(");
    do {
      node.targets.push_back(expect_identifier("a loop variable name"));
    } while (accept_op(","));
    if (paren) expect_op(")");
    expect_name_kw("in");
    node.iterable = parse_or();
    if (at_op(",")) {
      // `for x in a, b`: a tuple of items.
      ListExpr tuple;
      tuple.tuple = true;
      const int tuple_line = node.iterable->line;
      tuple.items.push_back(std::move(node.iterable));
      while (accept_op(",")) tuple.items.push_back(parse_or());
      node.iterable = make(tuple_line, std::move(tuple));
    }
    if (accept_name("if")) node.filter = parse_expression();
    if (at_name("recursive")) syntax_error(peek().line, "recursive for loops are not supported");
    expect_stmt_end("for");
    ++loop_depth_;
    node.body = parse_body({"else", "endfor"}, "for", line);
    --loop_depth_;
    if (open_tag() == "else") {
      expect_stmt_end("else");
      node.otherwise = parse_body({"endfor"}, "for", line);
      open_tag();
    }
    expect_stmt_end("endfor");
    return node;
  }

  Set parse_set(int line) {
    Set node;
    node.targets.push_back(expect_identifier("a variable name"));
    if (accept_op(".")) {
      node.attribute = expect_identifier("an attribute name");
    } else {
      while (accept_op(",")) node.targets.push_back(expect_identifier("a variable name"));
    }
    if (accept_op("=")) {
      node.value = parse_tuple_expression();
      expect_stmt_end("set");
      return node;
    }
    if (node.targets.size() != 1 || !node.attribute.empty()) {
      syntax_error(peek().line, "expected '=' in 'set' tag");
    }
    expect_stmt_end("set");
    node.body = parse_body({"endset"}, "set", line);
    open_tag();
    expect_stmt_end("endset");
    return node;
  }

  Macro parse_macro(int line) {
    Macro node;
    node.name = expect_identifier("a macro name");
    expect_op("(");
    if (!at_op(")")) {
      do {
        if (at_op(")")) break;
        MacroParam param;
        param.name = expect_identifier("a parameter name");
        if (accept_op("=")) param.default_value = parse_expression();
        node.params.push_back(std::move(param));
      } while (accept_op(","));
    }
    expect_op(")");
    expect_stmt_end("macro");
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    node.body = parse_body({"endmacro"}, "macro", line);
    loop_depth_ = saved_loops;
    open_tag();
    if (peek().kind == TokenKind::name) next();  // {% endmacro name %}
    expect_stmt_end("endmacro");
    return node;
  }

  FilterBlock parse_filter_block(int line) {
    FilterBlock node;
    node.name = expect_identifier("a filter name");
    if (at_op("(")) node.args = parse_call_args();
    expect_stmt_end("filter");
    node.body = parse_body({"endfilter"}, "filter", line);
    open_tag();
    expect_stmt_end("endfilter");
    return node;
  }

  // ---- expressions ------------------------------------------------------

  // An expression, or a bare tuple `a, b` (Jinja allows it in {{ }} and set).
  ExprPtr parse_tuple_expression() {
    ExprPtr first = parse_expression();
    if (!at_op(",")) return first;
    ListExpr tuple;
    tuple.tuple = true;
    const int line = first->line;
    tuple.items.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().kind == TokenKind::expr_end || peek().kind == TokenKind::stmt_end) break;
      tuple.items.push_back(parse_expression());
    }
    return make(line, std::move(tuple));
  }

  ExprPtr parse_expression() {
    Nest nest(*this, peek().line);
    ExprPtr expr = parse_or();
    while (at_name("if")) {
      const int line = next().line;
      Conditional c;
      c.condition = parse_or();
      if (accept_name("else")) c.otherwise = parse_expression();
      c.then = std::move(expr);
      expr = make(line, std::move(c));
    }
    return expr;
  }

  ExprPtr binary(int line, BinaryOp op, ExprPtr lhs, ExprPtr rhs) {
    return make(line, Binary{op, std::move(lhs), std::move(rhs)});
  }

  ExprPtr parse_or() {
    ExprPtr lhs = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      lhs = binary(line, BinaryOp::logical_or, std::move(lhs), parse_and());
    }
    return lhs;
  }

  ExprPtr parse_and() {
    ExprPtr lhs = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      lhs = binary(line, BinaryOp::logical_and, std::move(lhs), parse_not());
    }
    return lhs;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const int line = next().line;
      Nest nest(*this, line);
      return make(line, Unary{UnaryOp::logical_not, parse_not()});
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    Compare chain;
    int line = first->line;
    while (true) {
      const Token& t = peek();
      BinaryOp op;
      if (t.kind == TokenKind::op && t.text == "==") op = BinaryOp::equal;
      else if (t.kind == TokenKind::op && t.text == "!=") op = BinaryOp::not_equal;
      else if (t.kind == TokenKind::op && t.text == "<") op = BinaryOp::less;
      else if (t.kind == TokenKind::op && t.text == "<=") op = BinaryOp::less_equal;
      else if (t.kind == TokenKind::op && t.text == ">") op = BinaryOp::greater;
      else if (t.kind == TokenKind::op && t.text == ">=") op = BinaryOp::greater_equal;
      else if (at_name("in")) op = BinaryOp::in;
      else if (at_name("not") && at_name("in", 1)) op = BinaryOp::not_in;
      else break;
      if (chain.rest.empty()) line = t.line;
      next();
      if (op == BinaryOp::not_in) next();
      chain.rest.emplace_back(op, parse_math1());
    }
    if (chain.rest.empty()) return first;
    if (chain.rest.size() == 1) {
      auto [op, rhs] = std::move(chain.rest.front());
      return binary(line, op, std::move(first), std::move(rhs));
    }
    chain.first = std::move(first);
    return make(line, std::move(chain));
  }

  ExprPtr parse_math1() {
    ExprPtr lhs = parse_concat();
    while (at_op("+") || at_op("-")) {
      const BinaryOp op = peek().text == "+" ? BinaryOp::add : BinaryOp::subtract;
      const int line = next().line;
      lhs = binary(line, op, std::move(lhs), parse_concat());
    }
    return lhs;
  }

  ExprPtr parse_concat() {
    ExprPtr lhs = parse_math2();
    while (at_op("~")) {
      const int line = next().line;
      lhs = binary(line, BinaryOp::concat, std::move(lhs), parse_math2());
    }
    return lhs;
  }

  ExprPtr parse_math2() {
    ExprPtr lhs = parse_pow();
    while (true) {
      BinaryOp op;
      if (at_op("*")) op = BinaryOp::multiply;
      else if (at_op("/")) op = BinaryOp::divide;
      else if (at_op("//")) op = BinaryOp::floor_divide;
      else if (at_op("%")) op = BinaryOp::modulo;
      else return lhs;
      const int line = next().line;
      lhs = binary(line, op, std::move(lhs), parse_pow());
    }
  }

  ExprPtr parse_pow() {
    ExprPtr lhs = parse_unary(true);
    while (at_op("**")) {
      const int line = next().line;
      lhs = binary(line, BinaryOp::power, std::move(lhs), parse_unary(true));
    }
    return lhs;
  }

  ExprPtr parse_unary(bool with_filter) {
    const int line = peek().line;
    Nest nest(*this, line);
    ExprPtr node;
    if (accept_op("-")) {
      node = make(line, Unary{UnaryOp::negate, parse_unary(false)});
    } else if (accept_op("+")) {
      node = make(line, Unary{UnaryOp::plus, parse_unary(false)});
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    const int line = t.line;
    switch (t.kind) {
      case TokenKind::name: {
        const std::string id = next().text;
        if (id == "true" || id == "True") return make(line, Literal{Value(true)});
        if (id == "false" || id == "False") return make(line, Literal{Value(false)});
        if (id == "none" || id == "None") return make(line, Literal{Value(None{})});
        return make(line, Name{id});
      }
      case TokenKind::string: {
        std::string s = next().text;
        while (peek().kind == TokenKind::string) s += next().text;  // 'a' 'b' == 'ab'
        return make(line, Literal{Value(std::move(s))});
      }
      case TokenKind::integer:
        return make(line, Literal{Value(next().int_value)});
      case TokenKind::floating:
        return make(line, Literal{Value(next().float_value)});
      case TokenKind::op:
        if (t.text == "(") return parse_paren();
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    syntax_error(line, "unexpected " + describe(t) + " in expression");
  }

  ExprPtr parse_paren() {
    const int line = next().line;
    if (accept_op(")")) return make(line, ListExpr{{}, true});
    ExprPtr first = parse_expression();
    if (accept_op(")")) return first;
    ListExpr tuple;
    tuple.tuple = true;
    tuple.items.push_back(std::move(first));
    while (accept_op(",")) {
      if (at_op(")")) break;
      tuple.items.push_back(parse_expression());
    }
    expect_op(")");
    return make(line, std::move(tuple));
  }

  ExprPtr parse_list() {
    const int line = next().line;
    ListExpr list;
    while (!at_op("]")) {
      list.items.push_back(parse_expression());
      if (!accept_op(",")) break;
    }
    expect_op("]");
    return make(line, std::move(list));
  }

  ExprPtr parse_dict() {
    const int line = next().line;
    DictExpr dict;
    while (!at_op("}")) {
      ExprPtr key = parse_expression();
      expect_op(":");
      dict.items.emplace_back(std::move(key), parse_expression());
      if (!accept_op(",")) break;
    }
    expect_op("}");
    return make(line, std::move(dict));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const int line = peek().line;
      if (accept_op(".")) {
        if (peek().kind == TokenKind::integer) {
          node = make(line, Subscript{std::move(node), make(line, Literal{Value(next().int_value)})});
        } else {
          node = make(line, Attribute{std::move(node), expect_identifier("an attribute name after '.'")});
        }
      } else if (at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = make(line, Call{std::move(node), parse_call_args()});
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const int line = next().line;
    ExprPtr start, stop, step;
    if (!at_op(":")) {
      start = parse_expression();
      if (accept_op("]")) return make(line, Subscript{std::move(object), std::move(start)});
    }
    expect_op(":");
    if (!at_op(":") && !at_op("]")) stop = parse_expression();
    if (accept_op(":")) {
      if (!at_op("]")) step = parse_expression();
    }
    expect_op("]");
    return make(line, Slice{std::move(object), std::move(start), std::move(stop), std::move(step)});
  }

  Args parse_call_args() {
    expect_op("(");
    Args args;
    while (!at_op(")")) {
      if (peek().kind == TokenKind::name && at_op("=", 1)) {
        std::string key = next().text;
        next();
        args.keyword.emplace_back(std::move(key), parse_expression());
      } else {
        if (!args.keyword.empty()) syntax_error(peek().line, "positional argument after keyword argument");
        args.positional.push_back(parse_expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
    return args;
  }

  std::string parse_dotted_name(const char* what) {
    std::string name = expect_identifier(what);
    while (at_op(".") && peek(1).kind == TokenKind::name) {
      next();
      name += "." + next().text;
    }
    return name;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      const int line = peek().line;
      if (accept_op("|")) {
        Filter f;
        f.name = parse_dotted_name("a filter name after '|'");
        if (at_op("(")) f.args = parse_call_args();
        f.operand = std::move(node);
        node = make(line, std::move(f));
      } else if (accept_name("is")) {
        Test t;
        t.negated = accept_name("not");
        t.name = parse_dotted_name("a test name after 'is'");
        if (at_op("(")) {
          t.args = parse_call_args();
        } else if (takes_bare_test_argument()) {
          ExprPtr arg = parse_primary();
          t.args.positional.push_back(parse_postfix(std::move(arg)));
        }
        t.operand = std::move(node);
        node = make(line, std::move(t));
      } else if (at_op("(")) {
        node = make(line, Call{std::move(node), parse_call_args()});
      } else {
        return node;
      }
    }
  }

  // `x is divisibleby 3`: jinja2 takes one argument without parentheses.
  bool takes_bare_test_argument() const {
    const Token& t = peek();
    if (t.kind == TokenKind::name) return t.text != "else" && t.text != "or" && t.text != "and";
    if (t.kind == TokenKind::string || t.kind == TokenKind::integer || t.kind == TokenKind::floating) return true;
    return at_op("[") || at_op("{");
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

ast::Body parse_template(std::string_view source) { return Parser(lex(source)).parse(); }

}  // namespace neuron::chat
