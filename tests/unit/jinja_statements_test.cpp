// Jinja statements: if, for (loop variables, else, filters, break/continue),
// set and its scoping, namespace(), macros. Expected strings come from jinja2
// 3.1 configured as transformers configures it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/template.hpp"
#include "support/jinja_render.hpp"

namespace neuron::chat {
namespace {

using test_support::render;

TEST(JinjaStatements, IfElifElse) {
  EXPECT_EQ(render(R"J({% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %})J"), R"X(one,two,many,)X");
}

TEST(JinjaStatements, LoopVariables) {
  EXPECT_EQ(render(R"J({% for x in ['a', 'b', 'c'] %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %})J"), R"X(0132TrueFalse3;1221FalseFalse3;2310FalseTrue3;)X");
  EXPECT_EQ(render(R"J({% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('odd', 'even') }} {% endfor %})J"), R"X(-2-odd 1-3-even 2--odd )X");
  EXPECT_EQ(render(R"J({% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }}|{% endfor %})J"), R"X(11a 21b 1|12a 22b 2|)X");
}

TEST(JinjaStatements, LoopOverDictsStringsAndPairs) {
  EXPECT_EQ(render(R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'hé' %}{{ c }}.{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %})J", R"C({"d": {"b": 1, "a": 2}})C"),
            R"X(b=1;a=2;|ba|h.é.|37)X");
}

// {% else %} runs when nothing was iterated; break/continue come from jinja2.ext.loopcontrols.
TEST(JinjaStatements, LoopElseFilterBreakContinue) {
  EXPECT_EQ(render(R"J({% for x in [] %}x{% else %}empty{% endfor %}|{% for x in range(10) if x is odd %}{{ x }}{{ loop.last }},{% endfor %}|{% for x in [0] if x %}x{% else %}filtered{% endfor %})J"), R"X(empty|1False,3False,5False,7False,9True,|filtered)X");
  EXPECT_EQ(render(R"J({% for x in range(10) %}{% if x == 3 %}{% continue %}{% endif %}{% if x == 6 %}{% break %}{% endif %}{{ x }}{% endfor %})J"), R"X(01245)X");
}

// Assignments inside a loop body do not leak out, nor into the next iteration.
TEST(JinjaStatements, SetIsScopedToTheLoopIteration) {
  EXPECT_EQ(render(R"J({% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }},{% endfor %}{{ x }})J"), R"X(110,120,1)X");
  EXPECT_EQ(render(R"J({% if true %}{% set y = 5 %}{% endif %}{{ y }})J"), R"X(5)X");
}

TEST(JinjaStatements, NamespaceCarriesStateOutOfLoops) {
  EXPECT_EQ(render(R"J({% set ns = namespace(found=false, n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }} {{ ns.missing is defined }})J"), R"X(True 6 False)X");
}

TEST(JinjaStatements, SetForms) {
  EXPECT_EQ(render(R"J({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}{% set d = [5, 6] %}{{ d }})J"), R"X(12(3, 4)[5, 6])X");
  EXPECT_EQ(render(R"J({% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}])J"), R"X([inner 2])X");
}

TEST(JinjaStatements, Macros) {
  EXPECT_EQ(render(R"J({% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }} {{ greet('Al', greeting='Hi') }} {{ greet(greeting='Yo', name='Z') }} [{{ greet() }}])J"), R"X(Hello, Bob! Hi, Al! Yo, Z! [Hello, !])X");
  EXPECT_EQ(render(R"J({% set g = 'global' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }})J"), R"X(global)X");
  EXPECT_EQ(render(R"J({% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }})J"), R"X(321)X");
  EXPECT_EQ(render(R"J({% macro render_part(p) %}{% if p.type == 'text' %}{{ p.text }}{% else %}<{{ p.type }}>{% endif %}{% endmacro %}{% for p in parts %}{{ render_part(p) }}{% endfor %})J", R"C({"parts": [{"type": "text", "text": "hi "}, {"type": "image"}]})C"),
            R"X(hi <image>)X");
}

TEST(JinjaStatements, FilterBlockAndGeneration) {
  EXPECT_EQ(render(R"J({% filter upper %}abc {{ 'd' }}{% endfilter %})J"), R"X(ABC D)X");
}

// transformers' AssistantTracker adds {% generation %}; it renders its body.
TEST(JinjaStatements, GenerationBlockRendersItsBody) {
  EXPECT_EQ(render("{% generation %}answer {{ 1 }}{% endgeneration %}"), "answer 1");
}

}  // namespace
}  // namespace neuron::chat
