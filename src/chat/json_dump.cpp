#include "chat/json_dump.hpp"

#include <algorithm>
#include <cmath>

#include "chat/fault.hpp"
#include "chat/py_string.hpp"

namespace neuron::chat {

namespace {

constexpr int max_depth = 512;  // deeper values come only from runaway templates

void append_hex4(std::string& out, unsigned v) {
  static constexpr char hex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += hex[(v >> shift) & 0xF];
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : py::decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            const unsigned v = static_cast<unsigned>(cp) - 0x10000;
            append_hex4(out, 0xD800 + (v >> 10));
            append_hex4(out, 0xDC00 + (v & 0x3FF));
          } else {
            append_hex4(out, static_cast<unsigned>(cp));
          }
        } else {
          py::append_utf8(out, cp);
        }
    }
  }
  out += '"';
}

struct Dumper {
  const JsonStyle& style;
  std::string item_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *style.indent;
  }

  void dump(const Value& v, int level) {
    if (level > max_depth) fault("tojson: value nested deeper than " + std::to_string(max_depth) + " levels");
    if (v.is_none()) {
      out += "null";
    } else if (v.is_bool()) {
      out += v.as_bool() ? "true" : "false";
    } else if (v.is_int()) {
      out += std::to_string(v.as_int());
    } else if (v.is_float()) {
      const double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += format_float(d);
    } else if (v.is_string()) {
      dump_string(out, v.as_string(), style.ensure_ascii);
    } else if (v.is_list()) {
      const auto& list = v.as_list();
      if (list.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (i) out += item_sep;
        if (style.indent) newline(level + 1);
        dump(list[i], level + 1);
      }
      if (style.indent) newline(level);
      out += ']';
    } else if (v.is_dict() || v.is_namespace()) {
      if (v.is_namespace()) fault("tojson: Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.as_dict().items()) items.push_back(&item);
      if (style.sort_keys) {
        std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (style.indent) newline(level + 1);
        dump_string(out, items[i]->first, style.ensure_ascii);
        out += style.key_separator;
        dump(items[i]->second, level + 1);
      }
      if (style.indent) newline(level);
      out += '}';
    } else {
      fault("tojson: Object of type " + v.type_name() + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_json(const Value& value, const JsonStyle& style) {
  Dumper d{style, style.item_separator.value_or(style.indent ? "," : ", "), {}};
  d.dump(value, 0);
  return std::move(d.out);
}

}  // namespace neuron::chat
