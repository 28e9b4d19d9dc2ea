#include "chat/renderer.hpp"

#include <cmath>
#include <limits>

#include "chat/builtins.hpp"
#include "chat/fault.hpp"
#include "util/error.hpp"

namespace neuron::chat {

namespace {

using namespace ast;

[[noreturn]] void runtime_error(int line, const std::string& message) {
  throw Error(errc::template_error, "line " + std::to_string(line) + ": " + message);
}

[[noreturn]] void undefined_operand(const Value& v) {
  fault("'" + (v.undefined_name().empty() ? std::string("value") : v.undefined_name()) + "' is undefined");
}

[[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_operand(a);
  if (b.is_undefined()) undefined_operand(b);
  fault(std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

std::int64_t add_checked(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fault("integer overflow");
  return r;
}

std::int64_t sub_checked(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) fault("integer overflow");
  return r;
}

std::int64_t mul_checked(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fault("integer overflow");
  return r;
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  if (a == std::numeric_limits<std::int64_t>::min() && b == -1) fault("integer overflow");
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::int64_t py_mod(std::int64_t a, std::int64_t b) {
  if (b == -1) return 0;
  std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace

Renderer::Renderer(const ast::Body& program, const Limits& limits) : program_(program), limits_(limits) {}

std::string Renderer::render(const Dict& globals) {
  frames_.clear();
  frames_.emplace_back();
  for (const auto& [key, value] : globals.items()) frames_[0].vars[key] = value;
  std::string out;
  out_ = &out;
  exec(program_);
  out_ = nullptr;
  return out;
}

void Renderer::step() {
  if (++steps_ > limits_.max_steps) {
    fault("template exceeded " + std::to_string(limits_.max_steps) + " evaluation steps (runaway loop?)");
  }
}

Renderer::DepthGuard::DepthGuard(Renderer& r) : r_(r) {
  if (++r_.eval_depth_ > r_.limits_.max_eval_depth) {
    --r_.eval_depth_;
    fault("template evaluation nested deeper than " + std::to_string(r_.limits_.max_eval_depth) + " levels");
  }
}

void Renderer::emit(const std::string& text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    fault("template output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out_->append(text);
}

Value Renderer::lookup(const std::string& name) const {
  for (std::size_t i = frames_.size(); i-- > 0;) {
    const auto it = frames_[i].vars.find(name);
    if (it != frames_[i].vars.end()) return it->second;
    if (frames_[i].macro_boundary) {
      const auto g = frames_[0].vars.find(name);
      if (g != frames_[0].vars.end()) return g->second;
      break;
    }
  }
  if (const Value* builtin = builtins::global(name)) return *builtin;
  return Undefined{name};
}

void Renderer::assign(const std::string& name, Value value) { frames_.back().vars[name] = std::move(value); }

Renderer::Flow Renderer::exec(const ast::Body& body) {
  for (const Stmt& stmt : body) {
    const Flow flow = exec(stmt);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

Renderer::Flow Renderer::exec(const ast::Stmt& stmt) {
  try {
    DepthGuard guard(*this);
    step();
    if (const auto* text = std::get_if<Text>(&stmt.node)) {
      emit(text->text);
    } else if (const auto* output = std::get_if<Output>(&stmt.node)) {
      emit(eval(*output->expr).str());
    } else if (const auto* node = std::get_if<If>(&stmt.node)) {
      for (const auto& [condition, body] : node->branches) {
        if (eval(*condition).truthy()) return exec(body);
      }
      return exec(node->otherwise);
    } else if (const auto* node = std::get_if<For>(&stmt.node)) {
      return exec_for(*node, stmt.line);
    } else if (const auto* node = std::get_if<Set>(&stmt.node)) {
      exec_set(*node, stmt.line);
    } else if (const auto* node = std::get_if<Macro>(&stmt.node)) {
      auto callable = std::make_shared<Callable>();
      callable->name = node->name;
      callable->call = [node](Renderer& r, CallArgs& args, int line) { return r.call_macro(*node, args, line); };
      assign(node->name, Value(Value::CallablePtr(std::move(callable))));
    } else if (const auto* node = std::get_if<FilterBlock>(&stmt.node)) {
      Value body = capture(node->body);
      CallArgs args = eval_args(node->args);
      emit(builtins::filter(node->name, body, args, limits_).str());
    } else if (std::holds_alternative<Break>(stmt.node)) {
      return Flow::break_loop;
    } else if (std::holds_alternative<Continue>(stmt.node)) {
      return Flow::continue_loop;
    } else if (const auto* node = std::get_if<Generation>(&stmt.node)) {
      return exec(node->body);
    }
  } catch (const Fault& f) {
    runtime_error(stmt.line, f.what());
  }
  return Flow::normal;
}

Renderer::Flow Renderer::exec_for(const ast::For& node, int line) {
  const Value iterable = eval(*node.iterable);
  Value::List items;
  if (iterable.is_list()) {
    items = iterable.as_list();
  } else if (iterable.is_dict()) {
    for (const auto& [key, value] : iterable.as_dict().items()) items.emplace_back(key);
  } else if (iterable.is_string()) {
    CallArgs none;
    items = builtins::filter("list", iterable, none, limits_).as_list();
  } else if (iterable.is_namespace() || iterable.is_callable() || iterable.is_none() || iterable.is_number()) {
    runtime_error(line, "'" + iterable.type_name() + "' object is not iterable");
  }
  // Undefined iterates as nothing, as in jinja2.

  auto bind = [&](const Value& item) {
    if (node.targets.size() == 1) {
      assign(node.targets[0], item);
      return;
    }
    if (!item.is_list() || item.as_list().size() != node.targets.size()) {
      runtime_error(line, "cannot unpack " + item.type_name() + " into " + std::to_string(node.targets.size()) +
                              " loop variables");
    }
    for (std::size_t k = 0; k < node.targets.size(); ++k) assign(node.targets[k], item.as_list()[k]);
  };

  if (node.filter) {
    Value::List kept;
    for (const Value& item : items) {
      step();
      frames_.emplace_back();
      bind(item);
      const bool keep = eval(*node.filter).truthy();
      frames_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }

  if (items.empty()) return exec(node.otherwise);

  const auto length = static_cast<std::int64_t>(items.size());
  for (std::int64_t i = 0; i < length; ++i) {
    step();
    Dict loop;
    loop.set("index0", i);
    loop.set("index", i + 1);
    loop.set("revindex", length - i);
    loop.set("revindex0", length - i - 1);
    loop.set("first", i == 0);
    loop.set("last", i == length - 1);
    loop.set("length", length);
    loop.set("depth", 1);
    loop.set("depth0", 0);
    loop.set("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value(Undefined{"previtem"}));
    loop.set("nextitem", i + 1 < length ? items[static_cast<std::size_t>(i + 1)] : Value(Undefined{"nextitem"}));
    auto cycle = std::make_shared<Callable>();
    cycle->name = "loop.cycle";
    cycle->call = [i](Renderer&, CallArgs& args, int) -> Value {
      if (args.positional.empty()) fault("loop.cycle() needs at least one value");
      return args.positional[static_cast<std::size_t>(i) % args.positional.size()];
    };
    loop.set("cycle", Value(Value::CallablePtr(std::move(cycle))));

    frames_.emplace_back();
    assign("loop", Value(std::move(loop)));
    bind(items[static_cast<std::size_t>(i)]);
    const Flow flow = exec(node.body);
    frames_.pop_back();
    if (flow == Flow::break_loop) break;
  }
  return Flow::normal;
}

void Renderer::exec_set(const ast::Set& node, int line) {
  Value value = node.value ? eval(*node.value) : Value(capture(node.body));
  if (!node.attribute.empty()) {
    const Value target = lookup(node.targets[0]);
    if (!target.is_namespace()) {
      runtime_error(line, "cannot assign attribute '" + node.attribute + "' on '" + node.targets[0] +
                              "': it is a " + target.type_name() + ", not a namespace()");
    }
    if (value.holds_namespace()) {
      runtime_error(line, "cannot store a namespace inside namespace '" + node.targets[0] + "'");
    }
    target.as_namespace().attributes.set(node.attribute, std::move(value));
    return;
  }
  if (node.targets.size() == 1) {
    assign(node.targets[0], std::move(value));
    return;
  }
  if (!value.is_list() || value.as_list().size() != node.targets.size()) {
    runtime_error(line, "cannot unpack " + value.type_name() + " into " + std::to_string(node.targets.size()) + " names");
  }
  for (std::size_t k = 0; k < node.targets.size(); ++k) assign(node.targets[k], value.as_list()[k]);
}

std::string Renderer::capture(const ast::Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Value Renderer::call_macro(const ast::Macro& macro, CallArgs& args, int line) {
  if (call_depth_ >= limits_.max_call_depth) {
    runtime_error(line, "macro calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                            " (recursive macro '" + macro.name + "'?)");
  }
  if (args.positional.size() > macro.params.size()) {
    runtime_error(line, "macro '" + macro.name + "' takes " + std::to_string(macro.params.size()) + " argument(s), got " +
                            std::to_string(args.positional.size()));
  }
  Frame frame;
  frame.macro_boundary = true;
  frames_.push_back(std::move(frame));
  ++call_depth_;
  struct Unwind {
    Renderer& r;
    ~Unwind() {
      r.frames_.pop_back();
      --r.call_depth_;
    }
  } unwind{*this};

  std::vector<bool> bound(macro.params.size(), false);
  for (std::size_t i = 0; i < args.positional.size(); ++i) {
    assign(macro.params[i].name, args.positional[i]);
    bound[i] = true;
  }
  for (auto& [key, value] : args.keyword) {
    std::size_t k = 0;
    while (k < macro.params.size() && macro.params[k].name != key) ++k;
    if (k == macro.params.size()) runtime_error(line, "macro '" + macro.name + "' has no parameter '" + key + "'");
    if (bound[k]) runtime_error(line, "macro '" + macro.name + "' got parameter '" + key + "' twice");
    assign(key, value);
    bound[k] = true;
  }
  for (std::size_t k = 0; k < macro.params.size(); ++k) {
    if (bound[k]) continue;
    const auto& param = macro.params[k];
    assign(param.name, param.default_value ? eval(*param.default_value) : Value(Undefined{param.name}));
  }
  return capture(macro.body);
}

CallArgs Renderer::eval_args(const ast::Args& args) {
  CallArgs out;
  out.positional.reserve(args.positional.size());
  for (const auto& e : args.positional) out.positional.push_back(eval(*e));
  for (const auto& [key, e] : args.keyword) out.keyword.emplace_back(key, eval(*e));
  return out;
}

Value Renderer::eval(const ast::Expr& expr) {
  try {
    DepthGuard guard(*this);
    Value v = eval_node(expr);
    if (v.is_string() && v.as_string().size() > limits_.max_output_bytes) {
      fault("string of " + std::to_string(v.as_string().size()) + " bytes exceeds the template output limit");
    }
    return v;
  } catch (const Fault& f) {
    runtime_error(expr.line, f.what());
  }
}

Value Renderer::eval_node(const ast::Expr& expr) {
  return std::visit(
      [&](const auto& node) -> Value {
        using T = std::decay_t<decltype(node)>;
        if constexpr (std::is_same_v<T, Literal>) {
          return node.value;
        } else if constexpr (std::is_same_v<T, Name>) {
          return lookup(node.id);
        } else if constexpr (std::is_same_v<T, ListExpr>) {
          Value::List items;
          items.reserve(node.items.size());
          for (const auto& e : node.items) items.push_back(eval(*e));
          return node.tuple ? Value::tuple(std::move(items)) : Value(std::move(items));
        } else if constexpr (std::is_same_v<T, DictExpr>) {
          Dict dict;
          for (const auto& [k, v] : node.items) {
            Value key = eval(*k);
            if (!key.is_string()) fault("dict keys in templates must be strings, got " + key.type_name());
            dict.set(key.as_string(), eval(*v));
          }
          return dict;
        } else if constexpr (std::is_same_v<T, Attribute>) {
          return builtins::get_attribute(eval(*node.object), node.attribute);
        } else if constexpr (std::is_same_v<T, Subscript>) {
          const Value object = eval(*node.object);
          return builtins::get_item(object, eval(*node.index));
        } else if constexpr (std::is_same_v<T, Slice>) {
          const Value object = eval(*node.object);
          const Value start = node.start ? eval(*node.start) : Value(None{});
          const Value stop = node.stop ? eval(*node.stop) : Value(None{});
          const Value step = node.step ? eval(*node.step) : Value(None{});
          return builtins::slice(object, start, stop, step);
        } else if constexpr (std::is_same_v<T, Call>) {
          return eval_call(node, expr.line);
        } else if constexpr (std::is_same_v<T, Filter>) {
          const Value subject = eval(*node.operand);
          CallArgs args = eval_args(node.args);
          return builtins::filter(node.name, subject, args, limits_);
        } else if constexpr (std::is_same_v<T, Test>) {
          const Value subject = eval(*node.operand);
          CallArgs args = eval_args(node.args);
          return builtins::test(node.name, subject, args) != node.negated;
        } else if constexpr (std::is_same_v<T, Unary>) {
          const Value v = eval(*node.operand);
          if (node.op == UnaryOp::logical_not) return !v.truthy();
          if (v.is_undefined()) undefined_operand(v);
          if (!v.is_number()) fault("bad operand type for unary " + std::string(node.op == UnaryOp::negate ? "-" : "+") + ": '" + v.type_name() + "'");
          if (node.op == UnaryOp::plus) return v.is_bool() ? Value(v.as_integer()) : v;
          if (v.is_float()) return -v.as_float();
          return sub_checked(0, v.as_integer());
        } else if constexpr (std::is_same_v<T, Binary>) {
          return eval_binary(node);
        } else if constexpr (std::is_same_v<T, Compare>) {
          Value left = eval(*node.first);
          for (const auto& [op, e] : node.rest) {
            Value right = eval(*e);
            if (!apply_operator(op, left, right).truthy()) return false;
            left = std::move(right);
          }
          return true;
        } else if constexpr (std::is_same_v<T, Conditional>) {
          if (eval(*node.condition).truthy()) return eval(*node.then);
          return node.otherwise ? eval(*node.otherwise) : Value(Undefined{});
        }
      },
      expr.node);
}

Value Renderer::eval_call(const ast::Call& node, int line) {
  if (const auto* attr = std::get_if<Attribute>(&node.callee->node)) {
    const Value object = eval(*attr->object);
    if (object.is_string() || object.is_dict() || object.is_list()) {
      CallArgs args = eval_args(node.args);
      if (auto result = builtins::method(object, attr->attribute, args, limits_)) return *result;
      // A dict may hold a callable under that key (loop.cycle).
      Value member = builtins::get_attribute(object, attr->attribute);
      if (member.is_callable()) return member.as_callable().call(*this, args, line);
      fault("'" + object.type_name() + "' object has no method '" + attr->attribute + "'");
    }
    if (object.is_undefined()) {
      fault("cannot call '" + attr->attribute + "' on undefined value '" + object.undefined_name() + "'");
    }
  }
  const Value callee = eval(*node.callee);
  if (callee.is_undefined()) fault("'" + callee.undefined_name() + "' is undefined (called as a function)");
  if (!callee.is_callable()) fault("'" + callee.type_name() + "' object is not callable");
  CallArgs args = eval_args(node.args);
  return callee.as_callable().call(*this, args, line);
}

Value Renderer::eval_binary(const ast::Binary& node) {
  if (node.op == BinaryOp::logical_and) {
    Value lhs = eval(*node.lhs);
    return lhs.truthy() ? eval(*node.rhs) : lhs;
  }
  if (node.op == BinaryOp::logical_or) {
    Value lhs = eval(*node.lhs);
    return lhs.truthy() ? lhs : eval(*node.rhs);
  }
  const Value a = eval(*node.lhs);
  const Value b = eval(*node.rhs);
  return apply_operator(node.op, a, b);
}

// The comparison and arithmetic operators on evaluated operands.
Value Renderer::apply_operator(ast::BinaryOp op, const Value& a, const Value& b) {
  switch (op) {
    case BinaryOp::equal: return a == b;
    case BinaryOp::not_equal: return !(a == b);
    case BinaryOp::in: return builtins::contains(b, a);
    case BinaryOp::not_in: return !builtins::contains(b, a);
    case BinaryOp::less:
    case BinaryOp::less_equal:
    case BinaryOp::greater:
    case BinaryOp::greater_equal: {
      static constexpr const char* names[] = {"<", "<=", ">", ">="};
      const auto idx = static_cast<int>(op) - static_cast<int>(BinaryOp::less);
      bool comparable = true;
      bool result = false;
      switch (op) {
        case BinaryOp::less: result = Value::less(a, b, comparable); break;
        case BinaryOp::greater: result = Value::less(b, a, comparable); break;
        case BinaryOp::less_equal: result = !Value::less(b, a, comparable); break;
        default: result = !Value::less(a, b, comparable); break;
      }
      if (!comparable) bad_operands(names[idx], a, b);
      return result;
    }
    case BinaryOp::concat: {
      std::string s = a.str();
      s += b.str();
      return s;
    }
    case BinaryOp::add:
      if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() + b.as_double();
        return add_checked(a.as_integer(), b.as_integer());
      }
      if (a.is_string() && b.is_string()) {
        if (a.as_string().size() + b.as_string().size() > limits_.max_output_bytes) {
          fault("string concatenation exceeds the template output limit");
        }
        return a.as_string() + b.as_string();
      }
      if (a.is_list() && b.is_list()) {
        if (a.as_list().size() + b.as_list().size() > limits_.max_list_items) fault("list exceeds the template limit");
        Value::List out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return out;
      }
      bad_operands("+", a, b);
    case BinaryOp::subtract:
      if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() - b.as_double();
        return sub_checked(a.as_integer(), b.as_integer());
      }
      bad_operands("-", a, b);
    case BinaryOp::multiply: {
      if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() * b.as_double();
        return mul_checked(a.as_integer(), b.as_integer());
      }
      const bool a_seq = a.is_string() || a.is_list();
      const bool b_seq = b.is_string() || b.is_list();
      if ((a_seq && (b.is_int() || b.is_bool())) || (b_seq && (a.is_int() || a.is_bool()))) {
        const Value& seq = a_seq ? a : b;
        const std::int64_t n = std::max<std::int64_t>(0, (a_seq ? b : a).as_integer());
        if (seq.is_string()) {
          const std::size_t unit = seq.as_string().size();
          if (unit != 0 && static_cast<std::uint64_t>(n) > limits_.max_output_bytes / unit) {
            fault("string repetition exceeds the template output limit");
          }
          std::string out;
          out.reserve(unit * static_cast<std::size_t>(n));
          for (std::int64_t i = 0; i < n; ++i) out += seq.as_string();
          return out;
        }
        const std::size_t unit = seq.as_list().size();
        if (unit != 0 && static_cast<std::uint64_t>(n) > limits_.max_list_items / unit) {
          fault("list repetition exceeds the template limit");
        }
        Value::List out;
        for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
        return seq.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
      }
      bad_operands("*", a, b);
    }
    case BinaryOp::divide:
      if (a.is_number() && b.is_number()) {
        if (b.as_double() == 0) fault("division by zero");
        return a.as_double() / b.as_double();
      }
      bad_operands("/", a, b);
    case BinaryOp::floor_divide:
      if (a.is_number() && b.is_number()) {
        if (b.as_double() == 0) fault("integer division or modulo by zero");
        if (a.is_float() || b.is_float()) return std::floor(a.as_double() / b.as_double());
        return floor_div(a.as_integer(), b.as_integer());
      }
      bad_operands("//", a, b);
    case BinaryOp::modulo:
      if (a.is_number() && b.is_number()) {
        if (b.as_double() == 0) fault("integer division or modulo by zero");
        if (a.is_float() || b.is_float()) {
          const double x = a.as_double(), y = b.as_double();
          double r = std::fmod(x, y);
          if (r != 0 && ((r < 0) != (y < 0))) r += y;
          return r;
        }
        return py_mod(a.as_integer(), b.as_integer());
      }
      if (a.is_string()) return builtins::percent_format(a.as_string(), b, limits_);
      bad_operands("%", a, b);
    case BinaryOp::power:
      if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float() || b.as_integer() < 0) return std::pow(a.as_double(), b.as_double());
        std::int64_t result = 1, base = a.as_integer(), e = b.as_integer();
        while (e > 0) {
          if (e & 1) result = mul_checked(result, base);
          e >>= 1;
          if (e > 0) base = mul_checked(base, base);
        }
        return result;
      }
      bad_operands("**", a, b);
    default:
      break;
  }
  NEURON_ASSERT(false && "unhandled binary operator");
  return {};
}

}  // namespace neuron::chat
