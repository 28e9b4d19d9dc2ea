#pragma once
// The daemon's own view of an HTTP exchange. Routes take an HttpRequest and
// return an HttpResponse, so every handler is testable without a socket; only
// http_server.cpp knows about cpp-httplib.
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace neuron::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
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

// Where a streaming body goes. write() returns false once the client is gone;
// the producer must then stop (and cancel whatever feeds it).
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual bool write(std::string_view data) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Retry-After, Allow, ...)
  std::string body;
  // Set for server-sent events: runs once on the connection's thread and
  // writes the whole body through the sink (the status and headers above are
  // already sent by then, so errors must be reported inside the stream).
  std::function<void(ChunkSink&)> stream;

  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
  std::string header(std::string_view name) const;
};

}  // namespace neuron::server
