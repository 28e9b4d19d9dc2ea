#include "server/api_error.hpp"

#include <algorithm>
#include <string_view>

#include "util/retry_later.hpp"

namespace neuron::server {
namespace {

struct KindRow {
  std::string_view kind;
  int status;
  std::string_view type;
  int retry_after_s;
};

// Load errors (bad_model, unsupported_arch, bad_tensor_parallel, load_failed)
// are the client's spec being unusable here, so 400 rather than 500.
constexpr KindRow kRows[] = {
    {errc::invalid_argument, 400, "invalid_request_error", 0},
    {errc::bad_request, 400, "invalid_request_error", 0},
    {errc::template_error, 400, "invalid_request_error", 0},
    {errc::context_length_exceeded, 400, "invalid_request_error", 0},
    {errc::bad_model, 400, "invalid_request_error", 0},
    {errc::unsupported_arch, 400, "invalid_request_error", 0},
    {errc::bad_tensor_parallel, 400, "invalid_request_error", 0},
    {errc::load_failed, 400, "invalid_request_error", 0},
    {http_errc::invalid_json, 400, "invalid_request_error", 0},
    {http_errc::unsupported, 400, "invalid_request_error", 0},
    {http_errc::unauthorized, 401, "authentication_error", 0},
    {errc::unauthorized, 403, "permission_error", 0},  // the hub refused the daemon's HF_TOKEN
    {errc::gated, 403, "permission_error", 0},
    {errc::not_found, 404, "not_found_error", 0},
    {http_errc::model_not_found, 404, "invalid_request_error", 0},
    {http_errc::route_not_found, 404, "not_found_error", 0},
    {http_errc::method_not_allowed, 405, "invalid_request_error", 0},
    {errc::conflict, 409, "conflict_error", 0},
    {errc::busy, 409, "conflict_error", 0},
    {http_errc::payload_too_large, 413, "invalid_request_error", 0},
    {http_errc::unsupported_media_type, 415, "invalid_request_error", 0},
    {http_errc::header_too_large, 431, "invalid_request_error", 0},
    {http_errc::rate_limit_exceeded, 429, "rate_limit_error", 1},
    {errc::overloaded, 503, "overloaded_error", 1},
    {errc::loading, 503, "overloaded_error", 2},
    {errc::shutting_down, 503, "server_error", 0},
    {errc::model_failed, 503, "server_error", 0},
    {errc::out_of_memory, 507, "server_error", 0},
    {errc::timeout, 504, "server_error", 0},
    {errc::unavailable, 502, "server_error", 0},  // the hub could not be reached
    {errc::checksum_mismatch, 502, "server_error", 0},
    {errc::worker_failed, 500, "server_error", 0},
    {errc::comm, 500, "server_error", 0},
    {errc::cuda, 500, "server_error", 0},
    {errc::io, 500, "server_error", 0},
    {errc::cancelled, 500, "server_error", 0},
};

}  // namespace

ApiError classify(const std::string& kind, std::string message, std::string param) {
  for (const auto& row : kRows) {
    if (row.kind == kind)
      return ApiError{row.status, std::string(row.type), kind, std::move(message), std::move(param), row.retry_after_s};
  }
  return ApiError{500, "server_error", errc::internal, "internal server error", {}, 0};
}

ApiError from_exception(const std::exception& e) {
  if (const auto* fe = dynamic_cast<const FieldError*>(&e)) return classify(fe->kind(), fe->what(), fe->param());
  if (const auto* re = dynamic_cast<const RetryLaterError*>(&e)) {
    ApiError out = classify(re->kind(), re->what());
    out.retry_after_s = std::max<int>(1, static_cast<int>(re->retry_after().count()));
    return out;
  }
  if (const auto* ne = dynamic_cast<const Error*>(&e)) return classify(ne->kind(), ne->what());
  return classify(errc::internal, {});
}

nlohmann::json envelope(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"code", e.code}};
  err["param"] = e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param);
  return {{"error", std::move(err)}};
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = dump(envelope(e));
  if (e.retry_after_s > 0) r.set_header("Retry-After", std::to_string(e.retry_after_s));
  return r;
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace neuron::server
