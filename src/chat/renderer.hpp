#pragma once
// Tree-walking evaluator for one render of a parsed template. A Renderer lives
// for a single render call and owns all mutable state (variable scopes, the
// output buffer, counters), so one parsed template renders on many threads at
// once, each with its own Renderer.
//
// Scoping follows jinja2: `set` in a for-loop body is local to that iteration,
// `if` opens no scope, a macro sees the template's globals and its arguments,
// and namespace() attributes are the way to carry state out of a loop.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/ast.hpp"
#include "chat/limits.hpp"
#include "chat/value.hpp"

namespace neuron::chat {

class Renderer {
 public:
  Renderer(const ast::Body& program, const Limits& limits);

  // Renders with `globals` as the template's top-level variables. Throws
  // Error{template_error} "line N: ..." on any runtime failure.
  std::string render(const Dict& globals);

  // Called through a macro's Callable value.
  Value call_macro(const ast::Macro& macro, CallArgs& args, int line);

  const Limits& limits() const { return limits_; }

 private:
  enum class Flow { normal, break_loop, continue_loop };

  struct Frame {
    std::unordered_map<std::string, Value> vars;
    bool macro_boundary = false;  // lookups skip from here to the globals frame
  };

  Flow exec(const ast::Body& body);
  Flow exec(const ast::Stmt& stmt);
  Flow exec_for(const ast::For& node, int line);
  void exec_set(const ast::Set& node, int line);
  std::string capture(const ast::Body& body);

  Value eval(const ast::Expr& expr);
  Value eval_node(const ast::Expr& expr);
  Value eval_binary(const ast::Binary& node);
  Value apply_operator(ast::BinaryOp op, const Value& a, const Value& b);
  Value eval_call(const ast::Call& node, int line);
  CallArgs eval_args(const ast::Args& args);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void emit(const std::string& text);
  void step();

  // Counts one level of renderer recursion for as long as it lives.
  class DepthGuard {
   public:
    explicit DepthGuard(Renderer& r);
    ~DepthGuard() { --r_.eval_depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Renderer& r_;
  };

  const ast::Body& program_;
  const Limits& limits_;
  std::vector<Frame> frames_;  // [0] = globals; back() = innermost scope
  std::string* out_ = nullptr;  // the buffer being written (macro calls and set blocks swap it)
  int call_depth_ = 0;
  int eval_depth_ = 0;  // exec/eval frames currently active
  std::uint64_t steps_ = 0;
};

}  // namespace neuron::chat
