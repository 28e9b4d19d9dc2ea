#pragma once
// jinja2's built-in filters, tests and globals, and the Python methods of str,
// dict and list that chat templates call (`content.strip()`, `d.items()`),
// with transformers' additions (`raise_exception`, `strftime_now`, its
// `tojson`). Each raises Fault with a Python-like message on bad arguments;
// the renderer adds the template line.
#include <optional>
#include <string>

#include "chat/limits.hpp"
#include "chat/value.hpp"

namespace neuron::chat::builtins {

// `subject | name(args)`. Throws Fault for an unknown filter.
Value filter(const std::string& name, const Value& subject, CallArgs& args, const Limits& limits);

// `subject is name(args)`. Throws Fault for an unknown test.
bool test(const std::string& name, const Value& subject, CallArgs& args);

// `object.name(args)` for str, dict and list objects; nullopt when `name`
// is not a method of the object's type.
std::optional<Value> method(const Value& object, const std::string& name, CallArgs& args, const Limits& limits);

// Global functions: range, namespace, dict, raise_exception, strftime_now.
// nullptr when `name` is not one of them.
const Value* global(const std::string& name);

// Attribute lookup as jinja2's getattr does it for data: dict key, namespace
// attribute; Undefined otherwise. `path` may be dotted ("function.name") and
// numeric parts index lists, as in selectattr/map(attribute=...).
Value get_attribute(const Value& object, const std::string& path);

// obj[index] for dict keys and list/str positions (negative from the end);
// Undefined when absent, as jinja2 does.
Value get_item(const Value& object, const Value& index);

// obj[start:stop:step] with Python's slice rules; absent bounds are Undefined/None.
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// Python's `format % args` (printf-style): %s %r %d %i %f %e %g %x %o %c %%,
// with flags, width, precision and %(key)s for a dict argument.
Value percent_format(const std::string& format, const Value& args, const Limits& limits);

// Python's `needle in haystack` for str, list, dict (and Undefined: empty).
bool contains(const Value& haystack, const Value& needle);

}  // namespace neuron::chat::builtins
