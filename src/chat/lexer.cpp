#include "chat/lexer.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>

#include "chat/py_string.hpp"
#include "util/error.hpp"

namespace neuron::chat {

namespace {

[[noreturn]] void lex_error(int line, const std::string& message) {
  throw Error(errc::template_error, "line " + std::to_string(line) + ": " + message);
}

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  // jinja2's keep_trailing_newline=False.
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

enum class Trim { none, newline, all };

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const std::size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      apply_trailing_trim(text);
      if (tag == src_.size()) {
        emit_text(std::move(text), line_);
        pos_ = tag;
        break;
      }
      const char kind = src_[tag + 1];
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      const int text_line = line_;
      advance_to(tag);
      if (modifier == '-') {
        text = py::strip(text, std::nullopt, false, true);
      } else if (kind != '{' && modifier != '+') {
        lstrip_block(text);
      }
      emit_text(std::move(text), text_line);
      pos_ = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        lex_comment(tag);
      } else {
        lex_tag(kind == '{');
      }
    }
    tokens_.push_back(Token{TokenKind::eof, "", line_});
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void advance_to(std::size_t to) {
    for (; pos_ < to; ++pos_) {
      if (src_[pos_] == '\n') ++line_;
    }
  }

  void apply_trailing_trim(std::string& text) {
    if (trim_next_ == Trim::all) {
      text = py::strip(text, std::nullopt, true, false);
    } else if (trim_next_ == Trim::newline && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    }
    trim_next_ = Trim::none;
  }

  // lstrip_blocks: spaces between the start of the line and a block tag go.
  void lstrip_block(std::string& text) const {
    const std::size_t nl = text.rfind('\n');
    const std::size_t from = nl == std::string::npos ? 0 : nl + 1;
    if (from == 0 && !line_starting_) return;
    if (from == text.size()) return;
    for (char32_t cp : py::decode(std::string_view(text).substr(from))) {
      if (!py::is_space(cp)) return;
    }
    text.erase(from);
  }

  void emit_text(std::string text, int line) {
    if (!text.empty()) tokens_.push_back(Token{TokenKind::text, std::move(text), line});
  }

  // Records how the text after a tag is trimmed and whether that text starts
  // a line, from the tag's closing modifier ('-', '+' or none).
  void close_tag(char modifier, bool block) {
    if (modifier == '-') {
      trim_next_ = Trim::all;
      // jinja2 consumes the whitespace with the tag: the next text starts a
      // line when the last whitespace consumed is a newline.
      std::size_t end = pos_;
      while (end < src_.size() && is_ascii_space(src_[end])) ++end;
      line_starting_ = end > pos_ && src_[end - 1] == '\n';
    } else if (block && modifier != '+') {
      trim_next_ = Trim::newline;
      line_starting_ = pos_ < src_.size() && src_[pos_] == '\n';
    } else {
      trim_next_ = Trim::none;
      line_starting_ = false;
    }
  }

  void lex_comment(std::size_t tag) {
    const int start_line = line_;
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) lex_error(start_line, "unclosed comment '{#'");
    const char modifier = end > tag + 2 && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    advance_to(end + 2);
    close_tag(modifier, true);
  }

  void lex_tag(bool expression) {
    const int start_line = line_;
    const char closer = expression ? '}' : '%';
    const std::size_t first = tokens_.size();
    tokens_.push_back(Token{expression ? TokenKind::expr_begin : TokenKind::stmt_begin, "", line_});
    int depth = 0;  // open brackets: '}}' inside a dict literal does not close the tag
    while (true) {
      while (pos_ < src_.size() && is_ascii_space(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) {
        lex_error(start_line, std::string("unclosed tag '") + (expression ? "{{" : "{%") + "'");
      }
      const char c = src_[pos_];
      if (depth == 0) {
        const bool modified = (c == '-' || c == '+') && pos_ + 2 < src_.size() && src_[pos_ + 1] == closer &&
                              src_[pos_ + 2] == '}';
        if (modified || (c == closer && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}')) {
          tokens_.push_back(Token{expression ? TokenKind::expr_end : TokenKind::stmt_end, "", line_});
          pos_ += modified ? 3 : 2;
          close_tag(modified ? c : '\0', !expression);
          if (!expression) maybe_raw(first);
          return;
        }
      }
      if (is_ident_start(c)) {
        const std::size_t start = pos_;
        while (pos_ < src_.size() && is_ident_char(src_[pos_])) ++pos_;
        tokens_.push_back(Token{TokenKind::name, src_.substr(start, pos_ - start), line_});
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(depth);
      }
    }
  }

  // {% raw %} ... {% endraw %}: the body is text, tags in it are not parsed.
  void maybe_raw(std::size_t first) {
    if (tokens_.size() != first + 3 || tokens_[first + 1].kind != TokenKind::name || tokens_[first + 1].text != "raw") {
      return;
    }
    const int raw_line = tokens_[first].line;
    tokens_.resize(first);
    std::size_t search = pos_;
    while (true) {
      const std::size_t open = src_.find("{%", search);
      if (open == std::string::npos) lex_error(raw_line, "unclosed block 'raw' (missing {% endraw %})");
      std::size_t i = open + 2;
      const char left = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i] : '\0';
      if (left) ++i;
      while (i < src_.size() && is_ascii_space(src_[i])) ++i;
      if (src_.compare(i, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      i += 6;
      while (i < src_.size() && is_ascii_space(src_[i])) ++i;
      const char right = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i] : '\0';
      if (right) ++i;
      if (src_.compare(i, 2, "%}") != 0) {
        search = open + 2;
        continue;
      }
      std::string body = src_.substr(pos_, open - pos_);
      apply_trailing_trim(body);
      if (left == '-') body = py::strip(body, std::nullopt, false, true);
      emit_text(std::move(body), line_);
      advance_to(i + 2);
      close_tag(right, true);
      return;
    }
  }

  void lex_number() {
    const std::size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (is_digit(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                                              is_digit(src_[pos_ + 1])))) {
        ++pos_;
      }
    };
    digits();
    bool is_float = false;
    // After '.', "x.0.1" is two integer subscripts, not a float.
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::op && tokens_.back().text == ".";
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      std::size_t e = pos_ + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        is_float = true;
        pos_ = e;
        digits();
      }
    }
    std::string spelling;
    for (std::size_t i = start; i < pos_; ++i) {
      if (src_[i] != '_') spelling += src_[i];
    }
    Token t{is_float ? TokenKind::floating : TokenKind::integer, spelling, line_};
    if (is_float) {
      t.float_value = std::strtod(spelling.c_str(), nullptr);
    } else {
      const auto res = std::from_chars(spelling.data(), spelling.data() + spelling.size(), t.int_value);
      if (res.ec != std::errc{}) lex_error(line_, "integer literal " + spelling + " is too large");
    }
    tokens_.push_back(std::move(t));
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Decodes \xhh, \uhhhh, \Uhhhhhhhh at src_[pos_] (just after the letter).
  bool hex_escape(std::size_t digits, std::string& out) {
    if (pos_ + digits > src_.size()) return false;
    std::uint32_t cp = 0;
    for (std::size_t k = 0; k < digits; ++k) {
      const int h = hex_value(src_[pos_ + k]);
      if (h < 0) return false;
      cp = cp * 16 + static_cast<std::uint32_t>(h);
    }
    if (cp > 0x10FFFF) return false;
    py::append_utf8(out, cp);
    pos_ += digits;
    return true;
  }

  void lex_string() {
    const char quote = src_[pos_];
    const int start_line = line_;
    ++pos_;
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) lex_error(start_line, "unterminated string literal");
      const char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ + 1 >= src_.size()) {
        value += c;
        ++pos_;
        continue;
      }
      const char e = src_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '0': value += '\0'; break;
        case '\n': ++line_; break;  // line continuation
        case 'x':
          if (!hex_escape(2, value)) lex_error(line_, "bad \\x escape in string literal");
          break;
        case 'u':
          if (!hex_escape(4, value)) lex_error(line_, "bad \\u escape in string literal");
          break;
        case 'U':
          if (!hex_escape(8, value)) lex_error(line_, "bad \\U escape in string literal");
          break;
        default:  // Python keeps unknown escapes verbatim
          value += '\\';
          value += e;
      }
    }
    tokens_.push_back(Token{TokenKind::string, std::move(value), start_line});
  }

  void lex_operator(int& depth) {
    static constexpr std::string_view two_char[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : two_char) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back(Token{TokenKind::op, std::string(op), line_});
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    static constexpr std::string_view one_char = "+-*/%~<>=()[]{},.:|";
    if (one_char.find(c) == std::string_view::npos) {
      lex_error(line_, std::string("unexpected character '") + c + "' in tag");
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    tokens_.push_back(Token{TokenKind::op, std::string(1, c), line_});
    ++pos_;
  }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  Trim trim_next_ = Trim::none;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace neuron::chat
