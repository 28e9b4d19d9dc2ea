#include "io/hub_client.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace neuron::io {
namespace {

constexpr int kMaxRedirects = 10;
constexpr std::size_t kMaxApiAnswer = 32u << 20;      // a repository with very many files
constexpr std::size_t kMaxFileName = 1024;
constexpr std::size_t kMaxEtag = 128;
constexpr std::int64_t kMaxFileSize = std::int64_t{1} << 44;  // 16 TiB: anything larger is garbage

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool is_redirect(long status) { return status == 301 || status == 302 || status == 303 || status == 307 || status == 308; }

// A file name from the hub that may become a path under a snapshot directory.
bool safe_file_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxFileName || name.front() == '/') return false;
  std::size_t start = 0;
  for (;;) {
    const std::size_t slash = name.find('/', start);
    const std::string_view comp = name.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (comp.empty() || comp == "." || comp == ".." || comp.size() > 255) return false;
    for (char c : comp)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

// An etag becomes a blob's file name: a short word of safe characters only.
std::string clean_etag(std::string etag, const std::string& what) {
  if (etag.starts_with("W/")) etag.erase(0, 2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  const bool ok = !etag.empty() && etag.size() <= kMaxEtag && std::all_of(etag.begin(), etag.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
  if (!ok) fail(errc::unavailable, what + ": the hub sent an unusable ETag");
  return etag;
}

std::int64_t parse_size(const std::string& text, const std::string& what) {
  if (text.empty() || text.size() > 18 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    fail(errc::unavailable, what + ": the hub sent no usable size ('" + text.substr(0, 40) + "')");
  const std::int64_t size = std::stoll(text);
  if (size > kMaxFileSize) fail(errc::unavailable, what + ": the hub announced an implausible size " + text);
  return size;
}

// The typed error for a hub answer that is not a success.
[[noreturn]] void fail_status(const HttpResponse& r, const std::string& what, const std::string& repo, bool has_token) {
  const std::string code = r.header("x-error-code");
  std::string detail = r.header("x-error-message");
  if (detail.empty() && !r.body.empty() && r.body.size() < 2000 && r.body.find('\n') == std::string::npos) detail = r.body;
  if (detail.size() > 300) detail.resize(300);
  const std::string suffix = detail.empty() ? "" : " (" + detail + ")";
  if (code == "GatedRepo")
    fail(errc::gated, "'" + repo + "' is a gated repository: accept its terms on the hub and set HF_TOKEN" + suffix);
  if (code == "RepoNotFound" || (r.status == 404 && code.empty()))
    fail(errc::not_found, "'" + repo + "' was not found on the hub" + (has_token ? "" : " (if it is private, set HF_TOKEN)") + suffix);
  if (code == "RevisionNotFound" || code == "EntryNotFound" || r.status == 404)
    fail(errc::not_found, what + ": not found on the hub" + suffix);
  if (r.status == 401 || r.status == 403)
    fail(errc::unauthorized, what + ": the hub answered " + std::to_string(r.status) +
                                 (has_token ? " (HF_TOKEN does not grant access)" : " (set HF_TOKEN)") + suffix);
  fail(errc::unavailable, what + ": the hub answered HTTP " + std::to_string(r.status) + suffix);
}

// "'org/name' file config.json", for messages (appended: GCC 12 warns falsely on a chain of +).
std::string file_label(const RepoRevision& rev, const std::string& file) {
  std::string out = "'";
  out += rev.id.repo();
  out += "' file ";
  out += file;
  return out;
}

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  const std::string s = lowercase(v);
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

}  // namespace

HubOptions HubOptions::from_env() {
  HubOptions o;
  if (const char* e = std::getenv("HF_ENDPOINT"); e != nullptr && *e != '\0') o.endpoint = e;
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  try {
    url_origin(o.endpoint);
  } catch (const Error&) {
    fail(errc::invalid_argument, "HF_ENDPOINT '" + o.endpoint + "' is not an http(s) URL");
  }
  if (const char* t = std::getenv("HF_TOKEN"); t != nullptr) o.token = t;
  o.offline = env_true("HF_HUB_OFFLINE");
  return o;
}

HubClient::HubClient(HubOptions options) : options_(std::move(options)) {
  while (!options_.endpoint.empty() && options_.endpoint.back() == '/') options_.endpoint.pop_back();
  try {
    url_origin(options_.endpoint);
  } catch (const Error&) {
    fail(errc::invalid_argument, "hub endpoint '" + options_.endpoint + "' is not an http(s) URL");
  }
  for (char c : options_.token)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) fail(errc::invalid_argument, "HF_TOKEN contains a control character");
  options_.parallel_downloads = std::clamp(options_.parallel_downloads, 1, 16);
  options_.attempts = std::max(1, options_.attempts);
}

HttpRequest HubClient::request(const std::string& url, const std::function<bool()>& cancelled) const {
  HttpRequest req;
  req.url = url;
  req.connect_timeout = options_.connect_timeout;
  req.stall_timeout = options_.stall_timeout;
  req.cancelled = cancelled;
  // The token is for the hub itself: never for a CDN or another host a redirect names.
  if (!options_.token.empty() && url_origin(url) == url_origin(options_.endpoint))
    req.headers.push_back("Authorization: Bearer " + options_.token);
  return req;
}

std::string HubClient::file_url(const RepoRevision& rev, const std::string& file) const {
  return options_.endpoint + "/" + rev.id.repo() + "/resolve/" + rev.commit + "/" + url_encode(file, /*keep_slash=*/true);
}

RepoRevision HubClient::revision(const HfModelId& id, const std::function<bool()>& cancelled) const {
  if (options_.offline) fail(errc::not_found, "'" + id.repo() + "' is not in the cache and HF_HUB_OFFLINE is set");
  const std::string url = options_.endpoint + "/api/models/" + id.repo() + "/revision/" + url_encode(id.revision, false);
  HttpRequest req = request(url, cancelled);
  req.max_body_bytes = kMaxApiAnswer;
  HttpSession session;
  const HttpResponse r = session.perform(req);
  const std::string what = "revision '" + id.revision + "' of '" + id.repo() + "'";
  if (r.status != 200) fail_status(r, what, id.repo(), !options_.token.empty());
  const nlohmann::json j = parse_json(r.body, "the hub's answer for " + what, errc::unavailable);
  RepoRevision out;
  out.id = id;
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string())
    fail(errc::unavailable, "the hub's answer for " + what + " has no commit (\"sha\")");
  out.commit = j["sha"].get<std::string>();
  if (out.commit.size() != 40 || !is_hex(out.commit))
    fail(errc::unavailable, "the hub's answer for " + what + " has a malformed commit");
  if (j.contains("siblings") && j["siblings"].is_array()) {
    for (const auto& s : j["siblings"]) {
      if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
      std::string name = s["rfilename"].get<std::string>();
      if (safe_file_name(name)) out.files.push_back(std::move(name));  // others can never be selected
    }
  }
  return out;
}

FileMeta HubClient::file_meta(HttpSession& session, const RepoRevision& rev, const std::string& file,
                              const std::function<bool()>& cancelled) const {
  if (!safe_file_name(file)) fail(errc::invalid_argument, "unsafe file name '" + file + "'");
  const std::string what = file_label(rev, file);
  std::string url = file_url(rev, file);
  for (int hop = 0;; ++hop) {
    HttpRequest req = request(url, cancelled);
    req.head = true;
    req.headers.push_back("Accept-Encoding: identity");
    const HttpResponse r = session.perform(req);
    const std::string linked_etag = r.header("x-linked-etag");
    const std::string etag = r.header("etag");
    const bool has_meta = !linked_etag.empty() || !etag.empty();
    if (is_redirect(r.status) && !has_meta) {
      // A renamed repository redirects within the hub; a CDN without metadata is useless here.
      const std::string next = resolve_url(url, r.header("location"));
      if (url_origin(next) != url_origin(options_.endpoint) || hop >= kMaxRedirects)
        fail(errc::unavailable, what + ": the hub redirected to " + next + " without the file's metadata");
      url = next;
      continue;
    }
    if (!(r.status >= 200 && r.status < 300) && !is_redirect(r.status)) fail_status(r, what, rev.id.repo(), !options_.token.empty());
    if (const std::string commit = r.header("x-repo-commit"); !commit.empty() && commit != rev.commit)
      fail(errc::unavailable, what + ": the hub answered for commit " + commit.substr(0, 40) + ", not " + rev.commit);
    FileMeta meta;
    meta.name = file;
    meta.etag = clean_etag(linked_etag.empty() ? etag : linked_etag, what);
    const std::string size = r.header("x-linked-size");
    if (size.empty() && is_redirect(r.status)) fail(errc::unavailable, what + ": the hub's redirect carries no X-Linked-Size");
    meta.size = parse_size(size.empty() ? r.header("content-length") : size, what);
    meta.sha256 = !linked_etag.empty() && meta.etag.size() == 64 && is_hex(meta.etag);
    return meta;
  }
}

long HubClient::fetch(HttpSession& session, const RepoRevision& rev, const std::string& file, std::int64_t offset,
                      const BodySink& sink, const std::function<bool()>& cancelled) const {
  const std::string what = file_label(rev, file);
  std::string url = file_url(rev, file);
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    HttpRequest req = request(url, cancelled);
    req.headers.push_back("Accept-Encoding: identity");
    if (offset > 0) req.range_from = offset;
    const HttpResponse r = session.perform(req, sink);
    if (r.status >= 200 && r.status < 300) return r.status;
    if (is_redirect(r.status)) {
      url = resolve_url(url, r.header("location"));
      continue;
    }
    fail_status(r, what, rev.id.repo(), !options_.token.empty());
  }
  fail(errc::unavailable, what + ": more than " + std::to_string(kMaxRedirects) + " redirects");
}

std::vector<std::string> select_model_files(const RepoRevision& rev, const std::optional<std::string>& quant) {
  const auto has = [&](const std::string& name) { return std::find(rev.files.begin(), rev.files.end(), name) != rev.files.end(); };
  std::vector<std::string> out;
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                           "special_tokens_map.json", "chat_template.jinja"})
    if (has(name)) out.emplace_back(name);
  const std::string repo = rev.id.repo() + "@" + rev.id.revision;
  if (quant) {
    const std::string q = lowercase(*quant);
    std::vector<std::string> ggufs, matches;
    for (const auto& f : rev.files) {
      const std::string l = lowercase(f);
      if (!l.ends_with(".gguf")) continue;
      ggufs.push_back(f);
      if (l.find(q) != std::string::npos) matches.push_back(f);
    }
    if (matches.empty()) {
      std::string listed;
      for (const auto& g : ggufs) listed += (listed.empty() ? "" : ", ") + g;
      fail(errc::not_found, "'" + repo + "' has no GGUF file for quant '" + *quant + "'" +
                                (ggufs.empty() ? " (it has no GGUF files)" : "; its GGUF files: " + listed));
    }
    if (matches.size() > 1) {
      std::string listed;
      for (const auto& g : matches) listed += (listed.empty() ? "" : ", ") + g;
      fail(errc::invalid_argument, "quant '" + *quant + "' matches several files of '" + repo + "': " + listed);
    }
    out.push_back(matches.front());
    return out;
  }
  if (!has("config.json")) fail(errc::not_found, "'" + repo + "' has no config.json: it is not a transformers model repository");
  bool weights = false;
  for (const auto& f : rev.files) {
    if (f.find('/') == std::string::npos && f.ends_with(".safetensors")) {
      out.push_back(f);
      weights = true;
    }
  }
  if (!weights) fail(errc::not_found, "'" + repo + "' has no .safetensors weights (a GGUF repository needs a quant)");
  if (has("model.safetensors.index.json")) out.emplace_back("model.safetensors.index.json");
  return out;
}

}  // namespace neuron::io
