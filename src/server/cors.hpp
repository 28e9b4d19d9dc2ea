#pragma once
// Cross-origin requests from browsers (CORS), as `--allowed-origins` permits
// them. By default none is allowed beyond the same origin: responses carry no
// Access-Control-* headers and a browser page on another origin cannot read
// them.
//
// With origins allowed (exact "scheme://host[:port]" values, or "*" for any):
//  - a preflight (OPTIONS with Origin and Access-Control-Request-Method) is
//    answered by the transport itself, before authentication (a preflight
//    never carries the API key): 204 with Allow-Origin, Allow-Methods,
//    Allow-Headers (authorization, content-type, x-api-key, openai-beta,
//    anthropic-version, and the x-stainless-* headers the OpenAI SDKs send)
//    and Max-Age; an origin not allowed gets 403 with the error envelope;
//  - every other response to a request with an allowed Origin (errors and
//    event streams included) carries Access-Control-Allow-Origin: the origin
//    itself with Vary: Origin, or "*" when any origin is allowed.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_types.hpp"

namespace neuron::server {

class CorsPolicy {
 public:
  CorsPolicy() = default;  // nothing allowed
  // A comma-separated list ("https://a.example, http://localhost:5173", "*").
  // Throws Error{invalid_argument} naming `source` for an entry that is not
  // "*" or a scheme://host[:port] origin (no path, no trailing slash).
  static CorsPolicy parse(std::string_view list, const std::string& source);

  bool enabled() const noexcept { return any_ || !origins_.empty(); }
  // The Access-Control-Allow-Origin value for a request's Origin header; nullopt: not allowed.
  std::optional<std::string> allow_origin(std::string_view origin) const;
  static bool is_preflight(std::string_view method, std::string_view origin, std::string_view request_method);
  // The answer to a preflight from `origin` asking for `request_headers`
  // (Access-Control-Request-Headers).
  HttpResponse preflight(std::string_view origin, std::string_view request_headers) const;
  // Adds Access-Control-Allow-Origin (and Vary) for a request's Origin, when allowed.
  void decorate(std::string_view origin, std::vector<std::pair<std::string, std::string>>& headers) const;

  static constexpr int kMaxAgeSeconds = 600;

 private:
  bool any_ = false;
  std::vector<std::string> origins_;  // lower-cased
};

}  // namespace neuron::server
