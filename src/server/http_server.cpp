#include "server/http_server.hpp"

#include <cerrno>
#include <cstring>

#include <httplib.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include "server/api_error.hpp"
#include "server/peer_probe.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

// httplib runs routing, the handler, the body and the logger for one
// request on one connection thread, so the start time can live there.
thread_local std::chrono::steady_clock::time_point t_request_start;

class DataSinkAdapter final : public ChunkSink {
 public:
  explicit DataSinkAdapter(httplib::DataSink& sink) : sink_(sink) {}
  bool write(std::string_view data) override {
    if (failed_) return false;
    if (!sink_.is_writable() || !sink_.write(data.data(), data.size())) failed_ = true;
    return !failed_;
  }

 private:
  httplib::DataSink& sink_;
  bool failed_ = false;
};

HttpRequest to_request(const httplib::Request& req) {
  HttpRequest r;
  r.method = req.method;
  r.path = req.path;
  r.body = req.body;
  r.remote = req.remote_addr;
  auto probe = std::make_shared<PeerProbe>(ConnectionAddress{req.local_addr, req.local_port, req.remote_addr, req.remote_port});
  r.client_gone = [probe] { return probe->gone(); };
  for (const auto& [k, v] : req.headers) r.headers.emplace_back(k, v);
  return r;
}

void write_response(HttpResponse&& in, httplib::Response& out) {
  out.status = in.status;
  for (auto& [k, v] : in.headers) out.set_header(k, v);
  if (in.stream) {
    out.set_header("Cache-Control", "no-cache");
    out.set_header("X-Accel-Buffering", "no");
    auto stream = std::make_shared<std::function<void(ChunkSink&)>>(std::move(in.stream));
    out.set_chunked_content_provider(in.content_type, [stream](std::size_t, httplib::DataSink& sink) {
      DataSinkAdapter adapter(sink);
      (*stream)(adapter);
      sink.done();
      return true;
    });
    return;
  }
  out.set_content(in.body, in.content_type);
}

// Errors httplib produces itself (before any handler): give them the envelope too.
ApiError transport_error(int status) {
  switch (status) {
    case 413: return classify(http_errc::payload_too_large, "request body exceeds the server's limit (--max-body-bytes)");
    case 414: return classify(errc::invalid_argument, "request URI too long");
    case 404: return classify(http_errc::route_not_found, "no such route");
    default: {
      ApiError e = classify(errc::bad_request, "malformed HTTP request");
      e.status = status;
      return e;
    }
  }
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  httplib::Server server;
  std::thread listener;
  int listen_fd = -1;
};

// httplib (Debian's compiled libcpp-httplib) listens with a backlog of 5, so
// 100+ clients connecting at once overflow the accept queue and the kernel
// drops connections: bench-serve at 512 clients saw 65 requests fail while
// TcpExtListenOverflows rose. start() raises it after the bind (a repeated
// listen() on a listening socket sets its backlog).
constexpr int kListenBacklog = 1024;

HttpServer::HttpServer(HttpServerOptions options, std::function<HttpResponse(const HttpRequest&)> handler,
                       ExchangeObserver observer)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  auto& svr = impl_->server;
  const int threads = impl_->options.threads;
  // httplib owns and deletes the queue it gets from this factory.
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  svr.set_payload_max_length(impl_->options.max_body_bytes);
  // Headers and body (and each SSE event) go out as separate writes; with
  // Nagle on, each response waits ~40 ms for the peer's delayed ACK.
  svr.set_tcp_nodelay(true);
  svr.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    t_request_start = std::chrono::steady_clock::now();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  auto route = [handler](const httplib::Request& req, httplib::Response& res) {
    HttpResponse r;
    try {
      r = handler(to_request(req));
    } catch (const std::exception& e) {
      ApiError err = from_exception(e);
      // A client's mistake or a busy model is routine; only the daemon's own failures are errors.
      const auto level = err.status >= 500 && err.status != 503 ? spdlog::level::err : spdlog::level::info;
      spdlog::log(level, "{} {}: {} ({})", req.method, req.path, e.what(), err.code);
      r = error_response(std::move(err));
    }
    write_response(std::move(r), res);
  };
  const std::string any = ".*";
  svr.Get(any, route).Post(any, route).Put(any, route).Patch(any, route).Delete(any, route).Options(any, route);
  // The error handler also runs for handler responses >= 400; those already carry a body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    res.set_content(dump(envelope(transport_error(res.status))), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(dump(envelope(classify(errc::internal, {}))), "application/json");
  });
  svr.set_logger([observer](const httplib::Request& req, const httplib::Response& res) {
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_request_start).count();
    if (observer) observer(req.method, req.path, res.status, ms);
  });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::start() {
  auto& svr = impl_->server;
  svr.set_socket_options([impl = impl_.get()](socket_t sock) {
    httplib::default_socket_options(sock);
    impl->listen_fd = sock;
  });
  if (impl_->options.port == 0) {
    port_ = svr.bind_to_any_port(impl_->options.host);
    if (port_ < 0) fail(errc::io, "cannot bind " + impl_->options.host + " on any port");
  } else {
    if (!svr.bind_to_port(impl_->options.host, impl_->options.port))
      fail(errc::io, "cannot bind " + impl_->options.host + ":" + std::to_string(impl_->options.port) +
                         " (address in use or not available)");
    port_ = impl_->options.port;
  }
  if (impl_->listen_fd >= 0 && ::listen(impl_->listen_fd, kListenBacklog) != 0)
    spdlog::warn("cannot raise the listen backlog to {}: {}", kListenBacklog, std::strerror(errno));
  impl_->listener = std::thread([&svr] { svr.listen_after_bind(); });
  return port_;
}

void HttpServer::stop() {
  if (!impl_) return;
  impl_->server.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

}  // namespace neuron::server
