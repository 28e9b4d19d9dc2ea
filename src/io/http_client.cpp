#include "io/http_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

#include "util/error.hpp"

namespace neuron::io {
namespace {

// curl_global_init is not thread-safe; every session goes through here first.
void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail(errc::internal, "libcurl failed to initialise");
  });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return std::string(s);
}

struct Transfer {
  CURL* curl;
  const HttpRequest* request;
  const BodySink* sink;
  HttpResponse* response;
  bool too_large = false;
  bool sink_refused = false;
};

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {
    t->response->headers.clear();  // a new answer (after a 100 Continue)
  } else if (const auto colon = line.find(':'); colon != std::string_view::npos) {
    t->response->headers[lower(std::string(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  }
  return size * count;
}

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (status >= 200 && status < 300 && *t->sink) {
    if (!(*t->sink)(status, std::span<const char>(data, n))) {
      t->sink_refused = true;
      return 0;  // aborts with CURLE_WRITE_ERROR
    }
    return n;
  }
  if (t->response->body.size() + n > t->request->max_body_bytes) {
    t->too_large = true;
    return 0;
  }
  t->response->body.append(data, n);
  return n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* t = static_cast<Transfer*>(user);
  return t->request->cancelled && t->request->cancelled() ? 1 : 0;
}

struct UrlHandle {
  CURLU* h = curl_url();
  ~UrlHandle() { curl_url_cleanup(h); }
  std::string get(CURLUPart part, unsigned flags = 0) const {
    char* out = nullptr;
    if (curl_url_get(h, part, &out, flags) != CURLUE_OK || out == nullptr) return {};
    std::string s(out);
    curl_free(out);
    return s;
  }
};

void require_http(const UrlHandle& u, const std::string& url) {
  const std::string scheme = lower(u.get(CURLUPART_SCHEME));
  if (scheme != "http" && scheme != "https") fail(errc::unavailable, "'" + url + "' is not an http(s) URL");
}

}  // namespace

HttpSession::HttpSession() {
  global_init();
  curl_ = curl_easy_init();
  if (curl_ == nullptr) fail(errc::internal, "curl_easy_init failed");
}

HttpSession::~HttpSession() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResponse HttpSession::perform(const HttpRequest& request, const BodySink& sink) {
  CURL* curl = static_cast<CURL*>(curl_);
  curl_easy_reset(curl);  // keeps the connection cache
  HttpResponse response;
  Transfer t{curl, &request, &sink, &response};
  curl_slist* headers = nullptr;
  for (const auto& h : request.headers) headers = curl_slist_append(headers, h.c_str());
  const std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers, &curl_slist_free_all);
  std::string range;
  if (request.range_from) range = std::to_string(*request.range_from) + "-";

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_NOBODY, request.head ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, header_list.get());
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "neuron/" NEURON_VERSION);
  if (!range.empty()) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request.connect_timeout.count() * 1000));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, static_cast<long>(request.stall_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
  char error_buffer[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);

  const CURLcode rc = curl_easy_perform(curl);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  const std::string what = (request.head ? "HEAD " : "GET ") + request.url;
  if (rc == CURLE_ABORTED_BY_CALLBACK) fail(errc::cancelled, what + ": cancelled");
  if (t.too_large) fail(errc::unavailable, what + ": answer larger than " + std::to_string(request.max_body_bytes) + " bytes");
  if (t.sink_refused) fail(errc::io, what + ": the download was refused by its destination");
  if (rc != CURLE_OK) {
    const std::string reason = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(rc);
    fail(errc::unavailable, what + ": " + reason);
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

std::string resolve_url(const std::string& base, const std::string& location) {
  UrlHandle u;
  if (curl_url_set(u.h, CURLUPART_URL, base.c_str(), 0) != CURLUE_OK) fail(errc::unavailable, "bad URL '" + base + "'");
  if (curl_url_set(u.h, CURLUPART_URL, location.c_str(), 0) != CURLUE_OK)
    fail(errc::unavailable, "bad redirect '" + location + "' from " + base);
  require_http(u, location);
  return u.get(CURLUPART_URL);
}

std::string url_origin(const std::string& url) {
  UrlHandle u;
  if (curl_url_set(u.h, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) fail(errc::unavailable, "bad URL '" + url + "'");
  require_http(u, url);
  return lower(u.get(CURLUPART_SCHEME)) + "://" + lower(u.get(CURLUPART_HOST)) + ":" + u.get(CURLUPART_PORT, CURLU_DEFAULT_PORT);
}

std::string url_encode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    const bool unreserved = std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

}  // namespace neuron::io
