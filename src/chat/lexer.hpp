#pragma once
// Splits template source into text and the tokens inside {{ }} and {% %},
// applying jinja2's whitespace rules as transformers configures them:
// trim_blocks (drop the first newline after a block or comment tag),
// lstrip_blocks (drop spaces and tabs before a block or comment tag that
// starts its line), "-" on a tag side strips all whitespace on that side and
// "+" opts out, \r\n and \r become \n, and one trailing newline is dropped.
// Comments vanish here; {% raw %} bodies come out as text.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::chat {

enum class TokenKind {
  text,        // template text, already whitespace-trimmed
  expr_begin,  // {{
  expr_end,    // }}
  stmt_begin,  // {%
  stmt_end,    // %}
  name,        // identifier or keyword (if, in, not, true, none...)
  string,      // literal, escapes decoded
  integer,
  floating,
  op,          // operator or punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  eof,
};

struct Token {
  TokenKind kind;
  std::string text;  // text, name, decoded string, or operator spelling
  int line = 1;      // 1-based line where the token starts
  std::int64_t int_value = 0;
  double float_value = 0;
};

// Throws Error{template_error} "line N: ..." for an unclosed tag or string,
// or a character that starts no token.
std::vector<Token> lex(std::string_view source);

}  // namespace neuron::chat
