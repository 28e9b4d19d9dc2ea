#include "server/web_ui.hpp"

#include <algorithm>
#include <string>

#include "server/api_error.hpp"

namespace neuron::server {
namespace {

constexpr std::string_view kUiPrefix = "/ui/";

std::string content_type(std::string_view path) {
  auto ends = [&](std::string_view ext) { return path.size() >= ext.size() && path.substr(path.size() - ext.size()) == ext; };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

const WebAsset* find_asset(std::string_view path) {
  const auto assets = web_assets();
  const auto it = std::find_if(assets.begin(), assets.end(), [&](const WebAsset& a) { return a.path == path; });
  return it == assets.end() ? nullptr : &*it;
}

HttpResponse serve(std::string_view path) {
  const WebAsset* asset = find_asset(path);
  if (asset == nullptr) return error_response(classify(http_errc::route_not_found, "no such file: /ui/" + std::string(path)));
  HttpResponse r;
  r.content_type = content_type(asset->path);
  r.body = std::string(asset->bytes);
  r.set_header("Content-Security-Policy", std::string(kWebUiCsp));
  r.set_header("X-Content-Type-Options", "nosniff");
  r.set_header("Referrer-Policy", "no-referrer");
  r.set_header("X-Frame-Options", "DENY");
  r.set_header("Cache-Control", "no-cache");
  return r;
}

}  // namespace

void add_web_ui_routes(Router& router) {
  router.add("GET", "/", [](const HttpRequest&) { return serve("index.html"); });
  router.add_prefix("GET", std::string(kUiPrefix), "/ui/{file}",
                    [](const HttpRequest& r) { return serve(std::string_view(r.path).substr(kUiPrefix.size())); });
}

bool is_web_ui_path(std::string_view path) { return path == "/" || path.starts_with(kUiPrefix); }

}  // namespace neuron::server
