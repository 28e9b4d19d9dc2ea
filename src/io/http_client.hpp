#pragma once
// One HTTP exchange over libcurl, for the Hugging Face hub client. Redirects
// are never followed here: the caller sees each 3xx (the hub's metadata rides
// on its 302s) and decides where credentials may go. A body goes either to a
// sink (2xx answers: the file being downloaded) or, bounded, into the
// response (everything else: JSON answers and error pages).
//
// Errors: Error{unavailable} naming the URL and libcurl's reason for anything
// below HTTP (DNS, connect, TLS, a connection closed early, a stall),
// Error{cancelled} when the cancel flag was raised. HTTP statuses are the
// caller's to judge.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace neuron::io {

struct HttpRequest {
  std::string url;
  bool head = false;
  std::vector<std::string> headers;     // "Name: value"
  std::optional<std::int64_t> range_from;  // sends "Range: bytes=N-"
  std::size_t max_body_bytes = 1 << 20;  // for bodies kept in the response
  std::chrono::seconds connect_timeout{10};
  // Aborted when fewer than one byte per second arrive for this long.
  std::chrono::seconds stall_timeout{60};
  std::function<bool()> cancelled;  // polled while transferring; true aborts
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lowercased; of the final answer
  std::string body;                            // unless a sink took it
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// Receives a 2xx body chunk by chunk with the answer's status (206 for a
// honoured range); returning false aborts the transfer with Error{io}.
using BodySink = std::function<bool(long status, std::span<const char> chunk)>;

// A libcurl handle: connections are reused across calls. Not thread-safe: one
// per thread.
class HttpSession {
 public:
  HttpSession();
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // `sink` null: the body is kept in the response (beyond max_body_bytes:
  // Error{unavailable}, "answer too large").
  HttpResponse perform(const HttpRequest& request, const BodySink& sink = {});

 private:
  void* curl_;  // CURL*
};

// `location` (absolute or relative) resolved against `base`; Error{unavailable}
// when it is no http(s) URL.
std::string resolve_url(const std::string& base, const std::string& location);
// "scheme://host:port" of an http(s) URL (the port made explicit), lowercased.
std::string url_origin(const std::string& url);
// Percent-encodes everything but unreserved characters (and '/' when keep_slash).
std::string url_encode(std::string_view text, bool keep_slash);

}  // namespace neuron::io
