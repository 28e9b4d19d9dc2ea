#pragma once
// The built-in web UI: the files of web/ (plain ES modules, no build step),
// embedded into the binary at build time (cmake/embed_web.cmake generates
// web_assets()), served at GET / (index.html) and GET /ui/{file}.
// They carry no secret, so they are served without the API key (the page asks
// for it and sends it on its API calls). Every answer carries a
// Content-Security-Policy allowing only the daemon's own origin (no inline
// script or style, no other host), nosniff, no referrer and no framing.
#include <span>
#include <string_view>

#include "server/router.hpp"

namespace neuron::server {

struct WebAsset {
  std::string_view path;   // relative to web/, e.g. "main.js"
  std::string_view bytes;  // the file's contents
};

// Generated at build time (build/generated/web_assets.cpp), sorted by path.
std::span<const WebAsset> web_assets();

// GET / and GET /ui/{file}.
void add_web_ui_routes(Router& router);

// True for the UI's paths, which need no API key.
bool is_web_ui_path(std::string_view path);

// The policy on every UI answer.
inline constexpr std::string_view kWebUiCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

}  // namespace neuron::server
