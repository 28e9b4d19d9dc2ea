// Built-in filters, tests, str/dict/list methods and globals. Expected strings
// come from jinja2 3.1 configured as transformers configures it (including
// its json.dumps-based tojson).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/template.hpp"
#include "support/jinja_render.hpp"

namespace neuron::chat {
namespace {

using test_support::render;

TEST(JinjaBuiltins, StringFilters) {
  EXPECT_EQ(render(R"J({{ 'ab' | upper }} {{ 'AB' | lower }} {{ 'hello world' | capitalize }} {{ 'hello-world foo(bar' | title }} [{{ '  x ' | trim }}] {{ 'xxhixx' | trim('x') }} {{ 'a b a' | replace('a', 'c') }} {{ 'aaa' | replace('a', 'b', 2) }})J"), R"X(AB ab Hello world Hello-World Foo(Bar [x] hi c b c bba)X");
  EXPECT_EQ(render(R"J({{ 3 | string }} {{ none | string }} {{ 2.0 | string }} {{ '<a&b>' | e }} {{ '<a>' | safe }} {{ 'one two  three' | wordcount }} {{ 'a\nb' | indent(2) }} {{ 'a\nb' | indent(2, true) }})J"), R"X(3 None 2.0 &lt;a&amp;b&gt; <a> 3 a
  b   a
  b)X");
}

TEST(JinjaBuiltins, SequenceFilters) {
  EXPECT_EQ(render(R"J({{ [1, 2, 3] | join('-') }} {{ [1, 2, 3] | join }} {{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} [{{ [] | first }}] {{ 'abc' | list }} {{ 'héllo' | length }} {{ {'a': 1} | count }} {{ [] | length }})J"), R"X(1-2-3 123 1 3 a [] ['a', 'b', 'c'] 5 1 0)X");
  EXPECT_EQ(render(R"J({{ {'b': 1, 'a': 2} | items | list }} {{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ [1, 1, 2] | unique | list }} {{ {'b': 1, 'a': 2} | dictsort }})J"), R"X([('b', 1), ('a', 2)] [1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] [3, 2, 1] cba [1, 2] [('a', 2), ('b', 1)])X");
  EXPECT_EQ(render(R"J({{ [1, -2.5] | sum }} {{ [3, 1] | max }} {{ [3, 1] | min }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 5 | round }} {{ true | round }})J"), R"X(-1.5 3 1 3 2.57 2.0 4.0 5 1)X");
}

TEST(JinjaBuiltins, ConversionFilters) {
  EXPECT_EQ(render(R"J({{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 'x' | float }} {{ 1 | float }})J"), R"X(42 4 0 7 3 2.5 0.0 1.0)X");
}

TEST(JinjaBuiltins, DefaultFilter) {
  EXPECT_EQ(render(R"J({{ missing | default('dflt') }}|{{ '' | default('d2') }}|{{ '' | default('d3', true) }}|{{ none | default('n') }}|{{ missing | d('short') }}|{{ 0 | default(5, boolean=true) }})J"), R"X(dflt||d3|None|short|5)X");
}

TEST(JinjaBuiltins, SelectRejectMap) {
  EXPECT_EQ(render(R"J({{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }} {{ ms | rejectattr('role', 'eq', 'user') | map(attribute='c') | list }} {{ ms | map(attribute='role') | join(',') }} {{ ms | selectattr('flag') | map(attribute='c') | list }} {{ ms | selectattr('flag', 'defined') | list | length }})J", R"C({"ms": [{"role": "user", "c": 1, "flag": true}, {"role": "system", "c": 2}, {"role": "user", "c": 3, "flag": false}]})C"),
            R"X([1, 3] [2] user,system,user [1] 2)X");
  EXPECT_EQ(render(R"J({{ [0, 1, 2, none] | select | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }} {{ ['a', 'b'] | map('upper') | list }} {{ [{'a': {'b': 1}}, {'a': {'b': 0}}] | selectattr('a.b') | list }})J"), R"X([1, 2] [1, 3] [1, 3] ['A', 'B'] [{'a': {'b': 1}}])X");
  EXPECT_EQ(render(R"J({{ tools | map(attribute='function') | map(attribute='name') | join(', ') }})J", R"C({"tools": [{"function": {"name": "f"}}, {"function": {"name": "g"}}]})C"),
            R"X(f, g)X");
}

// transformers' tojson is json.dumps(ensure_ascii=False): ', ' and ': ' separators, insertion order kept.
TEST(JinjaBuiltins, Tojson) {
  EXPECT_EQ(render(R"J({{ x | tojson }})J", R"C({"x": {"b": [1, 2.5, "\u00e9\"\n\u0001", null, true], "a": {}, "c": []}})C"),
            R"X({"b": [1, 2.5, "é\"\n\u0001", null, true], "a": {}, "c": []})X");
  EXPECT_EQ(render(R"J({{ x | tojson(indent=2) }})J", R"C({"x": {"b": [1, {"z": 1}], "a": {}, "c": []}})C"),
            R"X({
  "b": [
    1,
    {
      "z": 1
    }
  ],
  "a": {},
  "c": []
})X");
  EXPECT_EQ(render(R"J({{ x | tojson(sort_keys=true) }} {{ 'é😀' | tojson(ensure_ascii=true) }} {{ x | tojson(separators=(',', ':')) }} {{ 'x' | tojson }} {{ 1.0 | tojson }})J", R"C({"x": {"b": 1, "a": 2}})C"),
            R"X({"a": 2, "b": 1} "\u00e9\ud83d\ude00" {"b":1,"a":2} "x" 1.0)X");
}

TEST(JinjaBuiltins, Tests) {
  EXPECT_EQ(render(R"J({{ 'a' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ missing is iterable }} {{ [] is sequence }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 'x' is number }})J"), R"X(True False True False True True False True True True True True False)X");
  EXPECT_EQ(render(R"J({{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ true is boolean }} {{ 1 is boolean }} {{ 1 is integer }} {{ 1.0 is float }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 2.5 is odd }} {{ 3.0 is odd }} {{ 4.0 is even }} {{ -3 is odd }} {{ 7.5 is divisibleby 2.5|int }})J"), R"X(True False True False True False True True True True True False False True True True 1)X");
  EXPECT_EQ(render(R"J({{ 'a' is equalto 'a' }} {{ 'a' is eq('b') }} {{ missing is not defined }} {{ 1 is in [1, 2] }} {{ 'A' is upper }} {{ 'a' is lower }} {{ none is not none }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ none is none }} {{ missing is none }})J"), R"X(True False True True True True False True False True False)X");
}

// Python str methods that chat templates call.
TEST(JinjaBuiltins, StringMethods) {
  EXPECT_EQ(render(R"J([{{ '  x y  '.strip() }}] {{ 'xxhixx'.strip('x') }} [{{ '\n\na\n'.lstrip('\n') }}] [{{ 'a\n\n'.rstrip() }}] {{ '\u3000wide\u3000'.strip() }})J"), R"X([x y] hi [a
] [a] wide)X");
  EXPECT_EQ(render(R"J({{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a</think>b</think>c'.split('</think>')[-1] }} {{ 'x\ny'.splitlines() }})J"), R"X(['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c'] c ['x', 'y'])X");
  EXPECT_EQ(render(R"J({{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith('lo') }} {{ 'Hello'.startswith(('x', 'H')) }} {{ 'hello world'.title() }} {{ 'they\'re'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aXbé'.upper() }} {{ 'AxBÉ'.lower() }})J"), R"X(True True True Hello World They'Re Hello AXBÉ axbé)X");
  EXPECT_EQ(render(R"J({{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ ', '.join(['a', 'b']) }} {{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }})J"), R"X(bbb bba -a-b- a, b 2 -1 2 True True)X");
  EXPECT_EQ(render(R"J({{ '{} and {}'.format('a', 1) }} {{ '{0}{0}'.format('x') }} {{ '{name}!'.format(name='n') }} {{ '{{literal}}'.format() }})J"), R"X(a and 1 xx n! {literal})X");
}

TEST(JinjaBuiltins, DictAndListMethods) {
  EXPECT_EQ(render(R"J({{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ l.index(2) }} {{ l.count(1) }})J", R"C({"d": {"a": 1, "b": 2}, "l": [1, 2, 1]})C"),
            R"X(1 None 5 ['a', 'b'] [1, 2] [('a', 1), ('b', 2)] 1 2)X");
}

// Python's printf-style `str % args`.
TEST(JinjaBuiltins, PercentFormatting) {
  EXPECT_EQ(render(R"J({{ '%s|%5s|%-5s|' % ('a', 'b', 'c') }} {{ '%d %i %05d %+d %x %X %o' % (42, -3, 7, 5, 255, 255, 8) }} {{ '%.2f %f %e %g %10.3f' % (3.14159, 1, 12345.678, 0.0001, 2.5) }})J"), R"X(a|    b|c    | 42 -3 00007 +5 ff FF 10 3.14 1.000000 1.234568e+04 0.0001      2.500)X");
  EXPECT_EQ(render(R"J({{ '%(a)s-%(b)d' % {'a': 'x', 'b': 3} }} {{ '%r %s' % ('q', none) }} {{ '%c%c' % (65, 'b') }} {{ '100%%' % () }} {{ '%s' % [1, 2] }} {{ 'Hello %s' % name }} {{ '%*d|' % (5, 3) }} {{ 'no conversions' % [1] }})J", R"C({"name": "you"})C"),
            R"X(x-3 'q' None Ab 100% [1, 2] Hello you     3| no conversions)X");
}

TEST(JinjaBuiltins, GlobalFunctions) {
  EXPECT_EQ(render(R"J({{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }})J"), R"X([0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1, 'b': 'x'} 1)X");
}

}  // namespace
}  // namespace neuron::chat
