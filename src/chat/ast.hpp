#pragma once
// The parsed template: an immutable tree the renderer walks. Nodes carry the
// template line they start on, so runtime errors name the line to fix. A parsed
// tree is shared by every concurrent render and never modified after parsing.
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "chat/value.hpp"

namespace neuron::chat::ast {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Literal {
  Value value;  // str, int, float, bool or None
};
struct Name {
  std::string id;
};
struct ListExpr {
  std::vector<ExprPtr> items;
  bool tuple = false;  // (a, b) or a bare a, b
};
struct DictExpr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;  // key expressions must evaluate to str
};
// `obj.attr`: a dict key, a namespace attribute, or a loop property.
struct Attribute {
  ExprPtr object;
  std::string attribute;
};
// `obj[index]`: list/str position (negative from the end) or dict key.
struct Subscript {
  ExprPtr object;
  ExprPtr index;
};
// `obj[start:stop:step]`; a null bound was omitted.
struct Slice {
  ExprPtr object;
  ExprPtr start, stop, step;
};
struct Call {
  ExprPtr callee;  // an Attribute callee on a str/dict/list is a method call
  Args args;
};
// `operand | name(args)`
struct Filter {
  ExprPtr operand;
  std::string name;
  Args args;
};
// `operand is [not] name(args)`
struct Test {
  ExprPtr operand;
  std::string name;
  Args args;
  bool negated = false;
};
enum class UnaryOp { negate, plus, logical_not };
struct Unary {
  UnaryOp op;
  ExprPtr operand;
};
enum class BinaryOp {
  add, subtract, multiply, divide, floor_divide, modulo, power, concat,  // + - * / // % ** ~
  equal, not_equal, less, less_equal, greater, greater_equal, in, not_in,
  logical_and, logical_or,  // short-circuit, return an operand as Python does
};
struct Binary {
  BinaryOp op;
  ExprPtr lhs, rhs;
};
// `a < b <= c` is Python's chain `a < b and b <= c`, each operand evaluated once.
// ops are comparison BinaryOps (equal .. not_in).
struct Compare {
  ExprPtr first;
  std::vector<std::pair<BinaryOp, ExprPtr>> rest;
};
// `then if condition else otherwise`; without else, a false condition is Undefined.
struct Conditional {
  ExprPtr condition, then, otherwise;
};

struct Expr {
  int line = 1;
  std::variant<Literal, Name, ListExpr, DictExpr, Attribute, Subscript, Slice, Call, Filter, Test, Unary, Binary,
               Compare, Conditional>
      node;
};

struct Stmt;
using Body = std::vector<Stmt>;

struct Text {
  std::string text;
};
// {{ expr }}
struct Output {
  ExprPtr expr;
};
// {% if %}{% elif %}...{% else %}{% endif %}
struct If {
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body otherwise;
};
// {% for a, b in iterable if filter %}body{% else %}otherwise{% endfor %}
struct For {
  std::vector<std::string> targets;  // two or more unpack each item
  ExprPtr iterable;
  ExprPtr filter;  // optional
  Body body;
  Body otherwise;  // runs when no item passed the filter
};
// {% set a = v %}, {% set a, b = v %}, {% set ns.attr = v %}, or the block
// form {% set a %}body{% endset %} (value is the rendered body).
struct Set {
  std::vector<std::string> targets;
  std::string attribute;  // non-empty: targets[0] is a namespace, assign its attribute
  ExprPtr value;          // null for the block form
  Body body;
};
struct MacroParam {
  std::string name;
  ExprPtr default_value;  // optional
};
// {% macro name(params) %}body{% endmacro %}
struct Macro {
  std::string name;
  std::vector<MacroParam> params;
  Body body;
};
// {% filter name(args) %}body{% endfilter %}
struct FilterBlock {
  std::string name;
  Args args;
  Body body;
};
struct Break {};
struct Continue {};
// transformers' {% generation %} marks assistant text for masks; it renders its body.
struct Generation {
  Body body;
};

struct Stmt {
  int line = 1;
  std::variant<Text, Output, If, For, Set, Macro, FilterBlock, Break, Continue, Generation> node;
};

}  // namespace neuron::chat::ast
