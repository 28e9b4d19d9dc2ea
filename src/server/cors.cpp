#include "server/cors.hpp"

#include <algorithm>
#include <cctype>

#include "server/api_error.hpp"

namespace neuron::server {
namespace {

std::string_view trim_origin(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// scheme "://" host [":" port], nothing else.
bool is_origin(std::string_view o) {
  const auto sep = o.find("://");
  if (sep == std::string_view::npos || sep == 0) return false;
  for (char c : o.substr(0, sep))
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return false;
  const std::string_view rest = o.substr(sep + 3);
  if (rest.empty()) return false;
  for (char c : rest)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '[' && c != ']' && c != '_')
      return false;
  return true;
}

// Request headers a preflight may ask for: the ones the OpenAI and Anthropic
// clients send, and the OpenAI SDKs' x-stainless-* telemetry.
constexpr std::string_view kAllowedHeaders[] = {"authorization", "content-type", "x-api-key", "openai-beta",
                                                "anthropic-version", "openai-organization", "openai-project",
                                                "accept"};

}  // namespace

CorsPolicy CorsPolicy::parse(std::string_view list, const std::string& source) {
  CorsPolicy p;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view entry = trim_origin(list.substr(start, comma - start));
    start = comma + 1;
    if (entry.empty()) continue;
    if (entry == "*") {
      p.any_ = true;
      continue;
    }
    if (!is_origin(entry))
      fail(errc::invalid_argument, source + ": '" + std::string(entry) +
                                       "' is not an origin (scheme://host[:port], no path) or '*'");
    p.origins_.push_back(lower(entry));
  }
  return p;
}

std::optional<std::string> CorsPolicy::allow_origin(std::string_view origin) const {
  if (origin.empty()) return std::nullopt;
  if (any_) return std::string("*");
  if (std::find(origins_.begin(), origins_.end(), lower(origin)) != origins_.end()) return std::string(origin);
  return std::nullopt;
}

bool CorsPolicy::is_preflight(std::string_view method, std::string_view origin, std::string_view request_method) {
  return method == "OPTIONS" && !origin.empty() && !request_method.empty();
}

HttpResponse CorsPolicy::preflight(std::string_view origin, std::string_view request_headers) const {
  const auto allowed = allow_origin(origin);
  if (!allowed) {
    HttpResponse r = error_response(classify(errc::invalid_argument, "origin '" + std::string(origin) + "' is not allowed (--allowed-origins)"));
    r.status = 403;
    return r;
  }
  // Named one by one: a "*" in Allow-Headers does not cover Authorization.
  std::string headers;
  for (std::string_view h : kAllowedHeaders) headers += (headers.empty() ? "" : ", ") + std::string(h);
  std::size_t start = 0;
  while (start < request_headers.size()) {
    const std::size_t comma = std::min(request_headers.find(',', start), request_headers.size());
    const std::string name = lower(trim_origin(request_headers.substr(start, comma - start)));
    start = comma + 1;
    if (name.starts_with("x-stainless-") && name.size() < 64 &&
        std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c) || c == '-'; }))
      headers += ", " + name;
  }
  HttpResponse r;
  r.status = 204;
  r.content_type.clear();
  r.set_header("Access-Control-Allow-Origin", *allowed);
  if (*allowed != "*") r.set_header("Vary", "Origin");
  r.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  r.set_header("Access-Control-Allow-Headers", headers);
  r.set_header("Access-Control-Max-Age", std::to_string(kMaxAgeSeconds));
  return r;
}

void CorsPolicy::decorate(std::string_view origin, std::vector<std::pair<std::string, std::string>>& headers) const {
  const auto allowed = allow_origin(origin);
  if (!allowed) return;
  headers.emplace_back("Access-Control-Allow-Origin", *allowed);
  if (*allowed != "*") headers.emplace_back("Vary", "Origin");
}

}  // namespace neuron::server
