// Jinja syntax: whitespace control, literals, operators, subscripts. Every
// expected string below was produced by jinja2 3.1 configured as transformers
// configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/template.hpp"
#include "support/jinja_render.hpp"

namespace neuron::chat {
namespace {

using test_support::render;

// transformers renders with trim_blocks=True: a block tag eats the newline after it.
TEST(JinjaSyntax, TrimBlocksDropsTheNewlineAfterABlockTag) {
  EXPECT_EQ(render(R"J({% if true %}
yes
{% endif %}
after)J"), R"X(yes
after)X");
  EXPECT_EQ(render(R"J({% set x = 1 %}
{{ x }}
{{ x }}
)J"), R"X(1
1)X");
}

// lstrip_blocks=True: spaces and tabs between a line start and a block tag go; not before {{ }}.
TEST(JinjaSyntax, LstripBlocksDropsIndentBeforeABlockTag) {
  EXPECT_EQ(render(R"J(a
    {% if true %}
    b
    {% endif %}
    c)J"), R"X(a
    b
    c)X");
  EXPECT_EQ(render(R"J(  	{% if true %}x{% endif %}
  {{ 'y' }})J"), R"X(x  y)X");
  EXPECT_EQ(render(R"J(text  {% if true %}kept{% endif %})J"), R"X(text  kept)X");
}

TEST(JinjaSyntax, MinusStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(render(R"J(a  

  {%- if true -%}  

  b  
  {%- endif %}
  c)J"), R"X(ab  c)X");
  EXPECT_EQ(render(R"J(x
  {{- 'y' -}}  
 z)J"), R"X(xyz)X");
  EXPECT_EQ(render(R"J({% for i in [1, 2] -%}
  {{ i }}
{%- endfor %})J"), R"X(12)X");
}

TEST(JinjaSyntax, PlusOptsOutOfLstripAndTrim) {
  EXPECT_EQ(render(R"J(line
    {%+ if true %}kept{% endif +%}
next)J"), R"X(line
    kept
next)X");
}

TEST(JinjaSyntax, CommentsVanishAndFollowBlockWhitespaceRules) {
  EXPECT_EQ(render(R"J({# a comment #}
  {# indented #}
A
{#- stripped -#}
 B)J"), R"X(AB)X");
  EXPECT_EQ(render(R"J(a{# multi
line {{ not parsed }} #}b)J"), R"X(ab)X");
}

TEST(JinjaSyntax, RawBlockIsLiteralText) {
  EXPECT_EQ(render(R"J({% raw %}{{ not parsed }} {% if %}{% endraw %}
{{ 'after' }})J"), R"X({{ not parsed }} {% if %}after)X");
}

TEST(JinjaSyntax, NewlinesNormalizedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(render(R"J(x
y
{% if true %}
z{% endif %}
)J"), R"X(x
y
z)X");
  EXPECT_EQ(render(R"J(end

)J"), R"X(end
)X");
}

// {{ }} prints Python's str(): None, True, 1.0, repr inside containers.
TEST(JinjaSyntax, LiteralsPrintAsPython) {
  EXPECT_EQ(render(R"J({{ 1 }} {{ -3 }} {{ 1.0 }} {{ 1.5e3 }} {{ 0.1 }} {{ 1e-5 }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 123456789012345678 }} {{ 1_000 }})J"), R"X(1 -3 1.0 1500.0 0.1 1e-05 1e+16 0.30000000000000004 123456789012345678 1000)X");
  EXPECT_EQ(render(R"J({{ true }} {{ False }} {{ none }} {{ None }} {{ 'a' 'b' }} {{ "d\"q" }} {{ 'tab\tnl\nuni\u00e9' }})J"), R"X(True False None None ab d"q tab	nl
unié)X");
  EXPECT_EQ(render(R"J({{ [1, 'a', none, true, 2.5] }} {{ {'a': 1, 'b': [1, 2]} }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ ["it's"] }} {{ ['a\nb'] }})J"), R"X([1, 'a', None, True, 2.5] {'a': 1, 'b': [1, 2]} (1, 2) (1,) () ["it's"] ['a\nb'])X");
}

TEST(JinjaSyntax, UndefinedPrintsEmptyAndIsFalse) {
  EXPECT_EQ(render(R"J([{{ missing }}]{% if missing %}T{% else %}F{% endif %}{% for x in missing %}X{% endfor %}{{ missing is defined }}{{ missing | length }})J"), R"X([]FFalse0)X");
  EXPECT_EQ(render(R"J({{ d.missing is defined }} {{ d['missing'] is undefined }} {{ l[5] is defined }})J", R"C({"d": {"a": 1}, "l": [1]})C"),
            R"X(False True False)X");
}

TEST(JinjaSyntax, ArithmeticFollowsPython) {
  EXPECT_EQ(render(R"J({{ 1 + 2 }} {{ 7 - 10 }} {{ 2 * 3 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + true }})J"), R"X(3 -3 6 3.5 3.0 3 -4 1 2 1024 0.5 3.0 0.5 2)X");
  EXPECT_EQ(render(R"J({{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 3 }} {{ [0] * 3 }} {{ 'a' ~ 1 ~ none ~ missing ~ 2.0 }})J"), R"X(ab [1, 2] ababab [0, 0, 0] a1None2.0)X");
}

// and/or return an operand, as in Python.
TEST(JinjaSyntax, ComparisonAndLogic) {
  EXPECT_EQ(render(R"J({{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }} {{ 1 < 2 }} {{ 'a' < 'b' }} {{ 2 >= 2 }} {{ [1, 2] < [1, 3] }} {{ missing == missing }})J"), R"X(True True True True True True True True True)X");
  EXPECT_EQ(render(R"J({{ not true }} {{ true and 'x' }} {{ 0 or 'y' }} {{ none or false }} {{ '' and 1 }} {{ not missing }})J"), R"X(False x y False  True)X");
  EXPECT_EQ(render(R"J({{ 1 == 1 == 1 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 1 }} {{ 1 < 3 < 2 }} {{ 0 < 1 in [1] }})J"), R"X(True True True False True)X");
  EXPECT_EQ(render(R"J({{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'v' in {'k': 'v'} }} {{ 1 in missing }})J"), R"X(True True True True False False)X");
}

// Filters bind tighter than arithmetic; ~ binds looser than * but tighter than +.
TEST(JinjaSyntax, PrecedenceMatchesJinja) {
  EXPECT_EQ(render(R"J({{ (1 + 2) * 3 }} {{ 1 + 2 * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ [1, 2, 3]|length - 1 }} {{ 10 - 2 - 3 }} {{ 'a' ~ 2 * 3 }})J"), R"X(9 7 64 4 True 2 5 a6)X");
}

TEST(JinjaSyntax, InlineIf) {
  EXPECT_EQ(render(R"J({{ 1 if true else 2 }} {{ 1 if false else 2 }} [{{ 1 if false }}] {{ 'a' if 0 else 'b' if 1 else 'c' }})J"), R"X(1 2 [] b)X");
}

TEST(JinjaSyntax, SubscriptsAndAttributes) {
  EXPECT_EQ(render(R"J({{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} [{{ l[9] }}] {{ s[1] }} {{ s[-1] }})J", R"C({"d": {"a": 1, "b": {"c": "deep"}}, "l": [1, 2], "s": "h\u00e9llo"})C"),
            R"X(1 1 deep deep 1 2 2 [] é o)X");
}

// Python slice rules, including negative steps, on lists and (by code point) strings.
TEST(JinjaSyntax, Slicing) {
  EXPECT_EQ(render(R"J({{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'héllo'[::-1] }} {{ [1, 2, 3, 4, 5][::2] }} {{ [1, 2, 3][-2:] }} {{ [1, 2, 3][5:] }} {{ [1, 2, 3][::-1] }} {{ [1, 2, 3, 4][3:0:-1] }} {{ [1, 2, 3][:-1] }} {{ 'abc'[-10:10] }} {{ (1, 2, 3)[:2] }} {{ (1,) * 2 }} [{{ 5[1:] }}] [{{ none[0] }}])J"), R"X(el olleh olléh [1, 3, 5] [2, 3] [] [3, 2, 1] [4, 3, 2] [1, 2] abc (1, 2) (1, 1) [] [])X");
  EXPECT_EQ(render(R"J({% for m in messages[::-1] %}{{ m }}{% endfor %}|{{ messages[1:] }})J", R"C({"messages": ["a", "b", "c"]})C"),
            R"X(cba|['b', 'c'])X");
}

}  // namespace
}  // namespace neuron::chat
