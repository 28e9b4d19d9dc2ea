// Template errors: syntax errors and runtime failures must be
// Error{template_error} naming the template line, and hostile templates
// (templates ship inside model files) must hit a limit, not exhaust the process.
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/template.hpp"
#include "util/error.hpp"

namespace neuron::chat {
namespace {

// The Error a parse or render throws, or a failure when none is thrown.
template <class Fn>
Error error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no neuron::Error thrown";
  return Error("none", "");
}

Error parse_error(const std::string& source) {
  return error_of([&] { ChatTemplate::parse(source); });
}

Error render_error(const std::string& source, const nlohmann::json& context = nlohmann::json::object(),
                   const Limits& limits = {}) {
  const ChatTemplate t = ChatTemplate::parse(source);
  return error_of([&] { t.render(context, limits); });
}

void expect_message(const Error& e, const std::string& line, const std::string& detail) {
  EXPECT_EQ(e.kind(), errc::template_error);
  const std::string what = e.what();
  EXPECT_NE(what.find(line), std::string::npos) << what;
  EXPECT_NE(what.find(detail), std::string::npos) << what;
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  expect_message(parse_error("ok\n{% frobnicate %}"), "line 2", "unknown tag 'frobnicate'");
  expect_message(parse_error("a\n\n{% if x %}\nno end"), "line 3", "unclosed block 'if'");
  expect_message(parse_error("{% for m in ms %}\n{% if m %}\n{% endfor %}"), "line 3", "endfor");
  expect_message(parse_error("\n\n{{ 1 + }}"), "line 3", "unexpected");
  expect_message(parse_error("x\n{{ 'open"), "line 2", "unterminated string");
  expect_message(parse_error("x\n{{ name"), "line 2", "unclosed tag '{{'");
  expect_message(parse_error("{# never closed"), "line 1", "unclosed comment");
  expect_message(parse_error("{% endif %}"), "line 1", "without a matching opening tag");
  expect_message(parse_error("\n{% break %}"), "line 2", "outside of a for loop");
  expect_message(parse_error("{{ a ? b }}"), "line 1", "unexpected character '?'");
  expect_message(parse_error("{% set x %}unclosed"), "line 1", "unclosed block 'set'");
  expect_message(parse_error("{% macro m(a b) %}{% endmacro %}"), "line 1", "expected ')'");
  expect_message(parse_error("{% macro m( %}{% endmacro %}"), "line 1", "unclosed tag");
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  expect_message(render_error("a\n{{ not_a_function() }}"), "line 2", "'not_a_function' is undefined");
  expect_message(render_error("\n\n{{ raise_exception('Only user and assistant roles are supported') }}"), "line 3",
                 "Only user and assistant roles are supported");
  expect_message(render_error("{% for x in items %}{% endfor %}", {{"items", nullptr}}), "line 1",
                 "'NoneType' object is not iterable");
  expect_message(render_error("\n{{ 1 + missing }}"), "line 2", "'missing' is undefined");
  expect_message(render_error("{{ 'a' + 1 }}"), "line 1", "unsupported operand type(s) for +: 'str' and 'int'");
  expect_message(render_error("{% set x = 1 %}\n{% set x.attr = 2 %}"), "line 2", "not a namespace");
  expect_message(render_error("{{ 1 // 0 }}"), "line 1", "by zero");
  expect_message(render_error("{{ x | no_such_filter }}"), "line 1", "no filter named 'no_such_filter'");
  expect_message(render_error("{{ x is no_such_test }}"), "line 1", "no test named 'no_such_test'");
  expect_message(render_error("{{ 'abc'.no_such_method() }}"), "line 1", "no method 'no_such_method'");
  expect_message(render_error("{{ [1].append(2) }}"), "line 1", "immutable");
  expect_message(render_error("{{ 'a'.split('') }}"), "line 1", "empty separator");
  expect_message(render_error("\n{{ '%s' % (1, 2) }}"), "line 2", "not all arguments converted");
  expect_message(render_error("{{ '%s %s' % (1,) }}"), "line 1", "not enough arguments");
}

TEST(JinjaErrors, RaiseInsideAMacroReportsTheMacroLine) {
  const std::string source =
      "{% macro check(role) %}\n"
      "{% if role != 'user' %}{{ raise_exception('bad role ' ~ role) }}{% endif %}\n"
      "{% endmacro %}\n"
      "{{ check('user') }}{{ check('robot') }}";
  expect_message(render_error(source), "line 2", "bad role robot");
}

TEST(JinjaErrors, RunawayLoopsHitTheStepLimit) {
  Limits limits;
  limits.max_steps = 10'000;
  expect_message(render_error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", {}, limits),
                 "line 1", "evaluation steps");
}

TEST(JinjaErrors, UnboundedRecursionHitsTheCallDepthLimit) {
  expect_message(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}"), "line 1",
                 "nested deeper than");
}

TEST(JinjaErrors, DeepEvaluationHitsTheEvalDepthLimit) {
  // Recursion through deeply nested macro bodies is bounded in total, not only per macro call.
  std::string body;
  for (int i = 0; i < 40; ++i) body += "{% if true %}";
  body += "{{ f(n + 1) }}";
  for (int i = 0; i < 40; ++i) body += "{% endif %}";
  Limits limits;
  limits.max_call_depth = 10'000;
  limits.max_eval_depth = 500;
  expect_message(render_error("{% macro f(n) %}" + body + "{% endmacro %}{{ f(0) }}", {}, limits), "line 1",
                 "evaluation nested deeper than 500");
}

TEST(JinjaErrors, HugeOutputHitsTheOutputLimit) {
  Limits limits;
  limits.max_output_bytes = 1 << 20;
  expect_message(render_error("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", {}, limits), "line 1",
                 "output");
  expect_message(render_error("{{ 'x' * 100000000000 }}", {}, limits), "line 1", "limit");
  expect_message(render_error("{{ range(100000000000) | length }}"), "line 1", "exceeds the template limit");
}

TEST(JinjaErrors, DeepNestingIsASyntaxErrorNotACrash) {
  const std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  expect_message(parse_error(deep_expr), "line 1", "nested deeper");
  std::string deep_blocks;
  for (int i = 0; i < 5000; ++i) deep_blocks += "{% if true %}";
  expect_message(parse_error(deep_blocks), "line 1", "nested deeper");
  const std::string deep_not = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "not ";
    return s;
  }() + "1 }}";
  expect_message(parse_error(deep_not), "line 1", "nested deeper");
}

TEST(JinjaErrors, ValuesBuiltInLoopsCannotNestWithoutBound) {
  // Printing or freeing a value recurses; a loop must not be able to nest one a million deep.
  expect_message(render_error("{% set ns = namespace(x=[]) %}\n{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
                              "{% endfor %}{{ ns.x }}"),
                 "line 2", "nested deeper than");
  // A namespace stored in a namespace could hold itself: a cycle.
  expect_message(render_error("{% set ns = namespace() %}\n{% set ns.self = [ns] %}"), "line 2",
                 "cannot store a namespace");
}

TEST(JinjaErrors, DeeplyNestedInputIsRejected) {
  nlohmann::json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = nlohmann::json::array({deep});
  const ChatTemplate t = ChatTemplate::parse("{{ x }}");
  const Error e = error_of([&] { t.render(nlohmann::json{{"x", deep}}); });
  EXPECT_EQ(e.kind(), errc::invalid_argument);
}

TEST(JinjaTemplate, IsMovableAndCopyable) {
  static_assert(std::is_nothrow_move_constructible_v<ChatTemplate>);
  ChatTemplate a = ChatTemplate::parse("{{ greeting }}, {{ name }}");
  ChatTemplate b = std::move(a);
  const ChatTemplate c = b;
  EXPECT_EQ(c.render(nlohmann::json{{"greeting", "hi"}, {"name", "x"}}), "hi, x");
}

TEST(JinjaTemplate, RendersConcurrentlyFromOneParsedTemplate) {
  // The daemon renders every request's prompt from the one parsed template.
  const ChatTemplate t = ChatTemplate::parse(
      "{% set ns = namespace(total=0) %}{% for m in messages %}{% set ns.total = ns.total + m|length %}"
      "<{{ m }}>{% endfor %}={{ ns.total }}");
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      std::string last;
      for (int iter = 0; iter < 300; ++iter) {
        nlohmann::json messages = nlohmann::json::array();
        for (int i = 0; i <= k; ++i) messages.push_back(std::string(static_cast<std::size_t>(i + 1), 'a'));
        last = t.render(nlohmann::json{{"messages", messages}});
      }
      results[static_cast<std::size_t>(k)] = last;
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) {
    std::string expected;
    int total = 0;
    for (int i = 0; i <= k; ++i) {
      expected += '<';
      expected.append(static_cast<std::size_t>(i + 1), 'a');
      expected += '>';
      total += i + 1;
    }
    EXPECT_EQ(results[static_cast<std::size_t>(k)], expected + "=" + std::to_string(total));
  }
}

TEST(JinjaTemplate, StrftimeNowFormatsTheCurrentLocalTime) {
  // transformers exposes strftime_now for templates that print today's date (Llama 3.1).
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const std::string year = std::to_string(local.tm_year + 1900);
  const std::string out = ChatTemplate::parse("{{ strftime_now('%Y') }}|{{ strftime_now('%d %b %Y') }}").render(nlohmann::json::object());
  EXPECT_EQ(out.substr(0, 5), year + "|");
  EXPECT_EQ(out.size(), 5u + 11u) << out;
}

TEST(JinjaTemplate, OrderedContextKeepsKeyOrderForTojson) {
  const ChatTemplate t = ChatTemplate::parse("{{ tool | tojson }}");
  const auto tool = nlohmann::ordered_json::parse(R"({"name": "f", "description": "d", "arguments": {"z": 1, "a": 2}})");
  EXPECT_EQ(t.render(nlohmann::ordered_json{{"tool", tool}}),
            R"({"name": "f", "description": "d", "arguments": {"z": 1, "a": 2}})");
}

}  // namespace
}  // namespace neuron::chat
