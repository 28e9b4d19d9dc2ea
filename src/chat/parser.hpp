#pragma once
// Recursive-descent parser from lexer tokens to the template tree, following
// jinja2's grammar and operator precedence (filters bind tighter than
// arithmetic: `messages|length - 1` is `(messages|length) - 1`).
#include <string_view>

#include "chat/ast.hpp"

namespace neuron::chat {

// Throws Error{template_error} "line N: ..." for unknown tags, unclosed blocks,
// malformed expressions, break/continue outside a loop, or nesting deeper
// than the parser's limit.
ast::Body parse_template(std::string_view source);

}  // namespace neuron::chat
