#pragma once
// The socket side: an event-driven HTTP/1.1 server (Boost.Beast on Asio)
// behind neuron's own request/response types (http_types.hpp).
//
// Threads: a few IO threads run every connection's state machine (accept,
// parse, timers, writes) and never block; `Api::handle` runs on a bounded
// pool of handler threads, since handlers may block (model load, tokenize,
// a non-streaming generation). A streaming response holds no thread: its
// BodyStream wakes the connection when it has bytes.
//
// Limits, all enforced here: open connections (past the cap a connection
// gets 503 `overloaded` and is closed), a deadline for a request's head
// (slowloris), for an idle keep-alive connection, for a body that stops
// arriving and for a write the client does not read (then the exchange is
// cancelled); the body size counted on bytes received whatever the transfer
// encoding (413), `Content-Encoding` other than identity (415, bodies are
// never decompressed). Every method and path reaches the one handler (the
// Router decides 404/405); HEAD gets GET's headers without the body. CORS
// (server/cors.hpp) lives here too: a preflight never reaches the handler
// (so it needs no API key), and every response, the transport's own refusals
// included, carries Access-Control-Allow-Origin for an allowed Origin.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/cors.hpp"
#include "server/http_types.hpp"

namespace neuron::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 13131;  // 0: any free port
  std::size_t max_body_bytes = 8u << 20;
  int handler_threads = 64;  // Api::handle runs here; a streaming response holds none
  int io_threads = 0;        // 0: min(4, hardware threads)
  std::size_t max_connections = 4096;
  std::chrono::milliseconds header_timeout{10000};  // from a request's first byte to the end of its head
  std::chrono::milliseconds idle_timeout{60000};    // keep-alive wait for the next request; longest pause in a body
  std::chrono::milliseconds write_timeout{30000};   // longest a write may wait for the client to read
  std::chrono::milliseconds heartbeat_interval{1000};  // silence before a stream's heartbeat bytes (a comment; 1 s, as helexa's node, so a long prefill never looks dead)
  CorsPolicy cors;  // cross-origin access (server/cors.hpp); preflights are answered here, before the handler
};

// Called once per finished exchange (after a streamed body is complete), for
// the access log and the request metrics. Runs on an IO thread: keep it quick.
using ExchangeObserver = std::function<void(const std::string& method, const std::string& path, int status, double ms)>;
using RequestHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, RequestHandler handler, ExchangeObserver observer);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (no SO_REUSEPORT: a port in use is an error), listens with the
  // system's largest backlog and starts the IO and handler threads; returns
  // the bound port. Throws Error{io} when the address cannot be bound.
  int start();
  // Stops accepting, lets exchanges in progress finish their response for a
  // short while (callers cancel long streams first), then closes every
  // connection and joins every thread. Idempotent.
  void stop();
  int port() const noexcept { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace neuron::server
