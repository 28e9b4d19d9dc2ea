#include "server/router.hpp"

#include <algorithm>
#include <exception>

#include <spdlog/spdlog.h>

#include "server/api_error.hpp"

namespace neuron::server {

void Router::add(std::string method, std::string path, Handler handler) {
  std::string label = path;
  routes_.push_back(Route{std::move(method), std::move(path), std::move(handler), false, std::move(label)});
}

void Router::add_prefix(std::string method, std::string prefix, std::string label, Handler handler) {
  routes_.push_back(Route{std::move(method), std::move(prefix), std::move(handler), true, std::move(label)});
}

HttpResponse Router::dispatch(const HttpRequest& request) const {
  // HEAD is GET without the body (the transport drops it), e.g. load-balancer health probes.
  const std::string& method = request.method == "HEAD" ? std::string("GET") : request.method;
  std::string allow;
  // Exact routes first, so a prefix route never shadows one.
  const bool exact_exists = std::any_of(routes_.begin(), routes_.end(), [&](const Route& r) { return !r.prefix && r.path == request.path; });
  for (const auto& route : routes_) {
    if (!route.matches(request.path) || (route.prefix && exact_exists)) continue;
    if (route.method == method) {
      try {
        return route.handler(request);
      } catch (const std::exception& e) {
        ApiError err = from_exception(e);
        if (err.status >= 500) spdlog::error("{} {}: {}", request.method, request.path, e.what());
        return error_response(err);
      } catch (...) {
        spdlog::error("{} {}: unknown exception", request.method, request.path);
        return error_response(classify(errc::internal, {}));
      }
    }
    if (!allow.empty()) allow += ", ";
    allow += route.method;
  }
  if (allow.empty())
    return error_response(classify(http_errc::route_not_found, "no route for " + request.method + " " + request.path));
  HttpResponse r = error_response(
      classify(http_errc::method_not_allowed, request.method + " is not allowed on " + request.path + " (allowed: " + allow + ")"));
  r.set_header("Allow", allow);
  return r;
}

std::string Router::route_label(const std::string& path) const {
  for (const auto& route : routes_)
    if (!route.prefix && route.path == path) return path;
  for (const auto& route : routes_)
    if (route.matches(path)) return route.label;
  return "unmatched";
}

}  // namespace neuron::server
