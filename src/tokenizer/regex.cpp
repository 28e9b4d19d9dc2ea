#include "tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <new>

#include "tokenizer/utf8.hpp"
#include "util/error.hpp"

namespace neuron::tokenizer {

namespace {

struct CodeDeleter {
  void operator()(pcre2_code* c) const noexcept { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const noexcept { pcre2_match_data_free(m); }
};

}  // namespace

struct Regex::Code {
  std::unique_ptr<pcre2_code, CodeDeleter> code;
  bool jit = false;  // JIT-compiled: match with pcre2_jit_match
};

Regex::Regex(std::string_view pattern, const std::string& what) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                 &err, &offset, nullptr));
  if (code->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(errc::bad_model, what + ": invalid regex at offset " + std::to_string(offset) + ": " +
                              reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation only: when it is unavailable the interpreter gives the same matches.
  code->jit = pcre2_jit_compile(code->code.get(), PCRE2_JIT_COMPLETE) == 0;
  code_ = std::move(code);
}

Regex Regex::literal(std::string_view literal, const std::string& what) {
  std::string escaped;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    // Escaping every ASCII non-alphanumeric is always legal in PCRE2 and makes it literal.
    if (u < 0x80 && !std::isalnum(u)) escaped.push_back('\\');
    escaped.push_back(c);
  }
  return Regex(escaped, what);
}

bool Regex::for_each_match(std::string_view text, const std::function<void(Span)>& on_match) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create_from_pattern(code_->code.get(), nullptr));
  if (!md) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = code_->jit ? pcre2_jit_match(code_->code.get(), subject, text.size(), pos, 0, md.get(), nullptr)
                              : pcre2_match(code_->code.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return true;
    if (rc < 0) return false;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t b = ov[0], e = ov[1];
    if (e > b) {
      on_match({b, e});
      pos = e;
    } else {
      // An empty match: step over one character, as Oniguruma's iterator does.
      if (b >= text.size()) return true;
      pos = b + next_utf8(text, b).length;
    }
  }
  return true;
}

}  // namespace neuron::tokenizer
