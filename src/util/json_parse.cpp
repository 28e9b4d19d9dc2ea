#include "util/json_parse.hpp"

#include <cstddef>

namespace neuron {
namespace {

// nlohmann's own DOM builder behind a SAX interface that refuses to open a
// container past the depth limit, before the container exists.
template <class Json>
class BoundedDomBuilder {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedDomBuilder(Json& root, std::string_view what, const std::string& kind, int max_depth)
      : dom_(root, /*allow_exceptions=*/true), what_(what), kind_(kind), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool key(string_t& v) { return dom_.key(v); }
  bool start_object(std::size_t n) {
    enter();
    return dom_.start_object(n);
  }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    enter();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& last_token, const Exception& e) {
    (void)position;
    (void)last_token;
    fail(kind_, std::string(what_) + " is not valid JSON: " + e.what());
  }

 private:
  void enter() {
    if (++depth_ > max_depth_)
      fail(kind_, std::string(what_) + " nests deeper than " + std::to_string(max_depth_) + " levels, the limit for JSON input");
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::string_view what_;
  const std::string& kind_;
  int max_depth_;
  int depth_ = 0;
};

}  // namespace

template <class Json>
Json parse_json(std::string_view text, std::string_view what, const std::string& kind, int max_depth) {
  Json root;
  BoundedDomBuilder<Json> builder(root, what, kind, max_depth);
  try {
    // strict: the whole text is one document. Errors arrive through parse_error.
    if (!Json::sax_parse(text.begin(), text.end(), &builder, Json::input_format_t::json, /*strict=*/true))
      fail(kind, std::string(what) + " is not valid JSON");
  } catch (const nlohmann::json::exception& e) {
    // out_of_range from the DOM builder (an object or array claiming an impossible size).
    fail(kind, std::string(what) + " is not valid JSON: " + e.what());
  }
  return root;
}

template nlohmann::json parse_json<nlohmann::json>(std::string_view, std::string_view, const std::string&, int);
template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::string_view, std::string_view, const std::string&, int);

}  // namespace neuron
