#pragma once
// A parsed Jinja chat template, rendered the way transformers'
// apply_chat_template renders it (jinja2 with trim_blocks and lstrip_blocks,
// the loopcontrols extension, raise_exception, strftime_now and a json.dumps
// tojson). Covers the subset of Jinja real chat templates use; see
// src/chat/builtins.hpp for the filters, tests and methods.
//
// Parse once, render many times: render() is const and thread-safe.
// Undefined variables behave as jinja2's Undefined: they print as "", are
// false, iterate as empty, and `is defined` is false; attribute or item access
// on them yields Undefined again (jinja2 would raise); calling one, or
// arithmetic on one, is an error.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/limits.hpp"

namespace neuron::chat {

namespace ast {
struct Stmt;
}

class ChatTemplate {
 public:
  // Throws Error{template_error} "line N: ..." for syntax errors.
  static ChatTemplate parse(std::string source);

  // `context` (a JSON object) supplies the template's variables. Throws
  // Error{template_error} "line N: ..." naming the template line on runtime
  // failures, including raise_exception("msg") (the message carries msg) and
  // exceeding `limits`.
  std::string render(const nlohmann::json& context, const Limits& limits = {}) const;
  // Same, keeping the caller's key order for tojson.
  std::string render(const nlohmann::ordered_json& context, const Limits& limits = {}) const;

  const std::string& source() const { return source_; }

 private:
  struct Program;
  ChatTemplate(std::string source, std::shared_ptr<const Program> program);

  std::string source_;
  std::shared_ptr<const Program> program_;  // immutable; shared by copies and concurrent renders
};

}  // namespace neuron::chat
