#pragma once
// The daemon's own view of an HTTP exchange. Routes take an HttpRequest and
// return an HttpResponse, so every handler is testable without a socket; only
// the transport (http_server.cpp, http_session.cpp) knows about sockets.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace neuron::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string, percent-decoded
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  std::string body;
  std::string remote;  // peer address, for the log
  // True once the client has disconnected; unset where there is no
  // connection (handlers called directly). Polled by long non-streaming
  // requests so that an abandoned generation stops at its next step.
  std::function<bool()> client_gone = nullptr;

  // Case-insensitive header lookup; empty when absent.
  std::string header(std::string_view name) const;
};

// A response body produced over time (server-sent events) without holding a
// thread: the producer signals, the transport pulls.
//
// Protocol, as the transport drives it (every call but wake() on one
// connection's serialised executor, never two at once):
//   start(wake)  once, before anything else. wake() may then be called from
//                any thread, any number of times (it only schedules a pull),
//                whenever pull() may have something new; it must stay cheap.
//   pull(out)    appends the bytes ready now (possibly none) to `out`; never
//                blocks. Returns false once the body is complete: `out` then
//                holds its last bytes and pull() is not called again.
//   cancel()     the client is gone or stopped reading (write deadline):
//                stop the producer. At most once; no pull() after it.
// A stream dropped before its end without cancel() must stop its producer too.
class BodyStream {
 public:
  virtual ~BodyStream() = default;
  virtual void start(std::function<void()> wake) = 0;
  virtual bool pull(std::string& out) = 0;
  virtual void cancel() = 0;
  // Bytes the transport sends after a stretch with nothing to send (an SSE
  // comment, so proxies keep the connection); empty: never.
  virtual std::string heartbeat() const { return {}; }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Retry-After, Allow, ...)
  std::string body;
  // Set for server-sent events: the body comes from here instead of `body`.
  // The status and headers above go out first, so errors met later must be
  // reported inside the stream.
  std::shared_ptr<BodyStream> stream;

  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
  std::string header(std::string_view name) const;
};

}  // namespace neuron::server
