#pragma once
// The OpenAI error envelope and the one place that maps neuron's error kinds
// (util/error.hpp) to HTTP: status, OpenAI `type`, `code` (the kind itself,
// so clients can switch on it) and `param` (the offending request field).
#include <string>

#include <nlohmann/json.hpp>

#include "server/http_types.hpp"
#include "util/error.hpp"

namespace neuron::server {

// Kinds that only exist at the HTTP boundary (the library never throws them).
namespace http_errc {
inline constexpr const char* unauthorized = "invalid_api_key";
inline constexpr const char* route_not_found = "route_not_found";
inline constexpr const char* method_not_allowed = "method_not_allowed";
inline constexpr const char* payload_too_large = "payload_too_large";
inline constexpr const char* model_not_found = "model_not_found";
inline constexpr const char* invalid_json = "invalid_json";
inline constexpr const char* unsupported = "unsupported_parameter";
inline constexpr const char* unsupported_media_type = "unsupported_media_type";  // a Content-Encoding the server does not decode
inline constexpr const char* header_too_large = "header_too_large";
inline constexpr const char* rate_limit_exceeded = "rate_limit_exceeded";  // one principal over its share (server/admission.hpp)
}  // namespace http_errc

// A request field failed validation: the kind is invalid_argument unless
// given, and `param` names the field as the client spelled it ("messages[2].role").
class FieldError : public Error {
 public:
  FieldError(std::string param, const std::string& message, std::string kind = errc::invalid_argument)
      : Error(std::move(kind), message), param_(std::move(param)) {}
  const std::string& param() const noexcept { return param_; }

 private:
  std::string param_;
};

struct ApiError {
  int status = 500;
  std::string type;     // "invalid_request_error", "authentication_error", "server_error", ...
  std::string code;     // the error kind
  std::string message;
  std::string param;    // empty -> null
  int retry_after_s = 0;  // > 0 adds Retry-After (503s the client should retry)
};

// Status and type for a kind; unknown kinds are internal errors (500).
ApiError classify(const std::string& kind, std::string message, std::string param = {});
// From a caught exception: neuron::Error (and FieldError) keep their kind and
// message; anything else becomes a 500 whose message reveals nothing internal.
ApiError from_exception(const std::exception& e);

nlohmann::json envelope(const ApiError& e);  // {"error": {"message", "type", "code", "param"}}
HttpResponse error_response(const ApiError& e);

// Serialises for the wire. Never throws on invalid UTF-8 (model output may
// split a character): bad bytes become U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace neuron::server
