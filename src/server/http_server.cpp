#include "server/http_server.hpp"

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <future>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

#include "server/api_error.hpp"
#include "server/http_session.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

using namespace transport;

// Descriptors kept for everything but client connections (log files, model
// files, TP worker pipes, the listening socket).
constexpr std::size_t kReservedFds = 128;
// How long stop() lets exchanges in progress finish before closing them.
constexpr auto kStopGrace = std::chrono::milliseconds(2000);
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

std::size_t fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return static_cast<std::size_t>(rl.rlim_cur);
}

// One log line per second at most for a condition that may repeat for every
// connection attempt (the cap, descriptor exhaustion).
class RateLimitedLog {
 public:
  template <class Fn>
  void note(Fn&& log_line) {
    ++count_;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    log_line(count_);
    count_ = 0;
  }

 private:
  Clock::time_point last_{};
  std::size_t count_ = 0;
};

}  // namespace

struct HttpServer::Impl {
  std::shared_ptr<ServerContext> ctx = std::make_shared<ServerContext>();
  asio::io_context ioc;  // declared after ctx: destroyed first, sessions with it
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  asio::strand<asio::io_context::executor_type> accept_strand = asio::make_strand(ioc);
  tcp::acceptor acceptor{accept_strand};
  asio::steady_timer backoff{accept_strand};
  std::vector<std::thread> io_threads;
  RateLimitedLog refusals, accept_errors;  // touched on the accept strand only
  std::string refusal;                     // the canned 503 for connections past the cap
  bool started = false;
  bool stopped = false;

  void accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  void refuse(tcp::socket& socket);
};

void HttpServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) { on_accept(ec, std::move(socket)); });
}

void HttpServer::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // stopping
  if (ec) {
    // Out of descriptors (EMFILE/ENFILE) or a connection reset before it was
    // accepted: back off a little rather than spin on the same error.
    accept_errors.note([&](std::size_t n) { spdlog::warn("accepting connections failed ({} times): {}", n, ec.message()); });
    backoff.expires_after(kAcceptBackoff);
    backoff.async_wait([this](beast::error_code e) {
      if (!e && acceptor.is_open()) accept();
    });
    return;
  }
  if (ctx->stopping) {
    beast::error_code ignored;
    socket.close(ignored);
  } else if (ctx->open.load() >= ctx->options.max_connections) {
    refuse(socket);
  } else {
    ctx->open.fetch_add(1);
    std::make_shared<Session>(std::move(socket), ctx)->run();
  }
  accept();
}

// Past the cap: a short 503 written without waiting (it fits any send
// buffer), then close. What the client already sent is read first, so that
// closing sends a FIN, not a reset that could destroy the answer.
void HttpServer::Impl::refuse(tcp::socket& socket) {
  beast::error_code ec;
  socket.non_blocking(true, ec);
  char sink[4096];
  for (int i = 0; i < 16 && socket.read_some(asio::buffer(sink), ec) > 0;) ++i;
  socket.write_some(asio::buffer(refusal), ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
  refusals.note([&](std::size_t n) {
    spdlog::warn("refused {} connection(s): {} open, the limit is {} (--max-connections)", n, ctx->open.load(),
                 ctx->options.max_connections);
  });
}

HttpServer::HttpServer(HttpServerOptions options, RequestHandler handler, ExchangeObserver observer)
    : impl_(std::make_unique<Impl>()) {
  auto& ctx = *impl_->ctx;
  ctx.options = std::move(options);
  ctx.handler = std::move(handler);
  ctx.observer = std::move(observer);
  const std::string body = dump(envelope(classify(errc::overloaded, "too many open connections; retry later")));
  impl_->refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
                   "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::start() {
  auto& impl = *impl_;
  auto& opt = impl.ctx->options;
  if (impl.started) fail(errc::invalid_argument, "HTTP server already started");

  const std::size_t fds = fd_limit();
  if (fds != SIZE_MAX && opt.max_connections + kReservedFds > fds) {
    const std::size_t cap = fds > 2 * kReservedFds ? fds - kReservedFds : fds / 2;
    spdlog::warn("the descriptor limit (ulimit -n) is {}: serving at most {} connections instead of {} (--max-connections)", fds, cap,
                 opt.max_connections);
    opt.max_connections = cap;
  }
  if (opt.io_threads <= 0) opt.io_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));

  const std::string where = opt.host + ":" + std::to_string(opt.port);
  beast::error_code ec;
  tcp::resolver resolver(impl.ioc);
  auto endpoints = resolver.resolve(opt.host, std::to_string(opt.port), tcp::resolver::numeric_service | tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) fail(errc::io, "cannot resolve the listen address " + where + ": " + ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  auto& acceptor = impl.acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);  // TIME_WAIT only; never a second listener (no SO_REUSEPORT)
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);  // SOMAXCONN
  if (ec) {
    beast::error_code ignored;
    acceptor.close(ignored);
    const std::string why = ec == asio::error::address_in_use ? "the port is already in use (is another neuron running?)" : ec.message();
    fail(errc::io, "cannot listen on " + where + ": " + why);
  }
  port_ = acceptor.local_endpoint().port();

  impl.ctx->handlers = std::make_unique<asio::thread_pool>(static_cast<std::size_t>(std::max(1, opt.handler_threads)));
  impl.work.emplace(asio::make_work_guard(impl.ioc));
  asio::post(impl.accept_strand, [&impl] { impl.accept(); });
  for (int i = 0; i < opt.io_threads; ++i) {
    impl.io_threads.emplace_back([&impl] {
      // A handler that throws must not take the IO thread (and every
      // connection on it) down: log and carry on.
      for (;;) {
        try {
          impl.ioc.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("HTTP IO thread: unexpected exception: {}", e.what());
        }
      }
    });
  }
  impl.started = true;
  spdlog::info("HTTP: {} IO threads, {} handler threads, at most {} connections, body limit {} bytes", opt.io_threads,
               opt.handler_threads, opt.max_connections, opt.max_body_bytes);
  return port_;
}

void HttpServer::stop() {
  if (!impl_ || !impl_->started || impl_->stopped) return;
  auto& impl = *impl_;
  impl.stopped = true;
  impl.ctx->stopping = true;
  std::promise<void> closed;
  asio::post(impl.accept_strand, [&impl, &closed] {
    beast::error_code ec;
    impl.acceptor.close(ec);
    impl.backoff.cancel();
    closed.set_value();
  });
  closed.get_future().wait();

  auto each_session = [&](bool graceful) {
    std::vector<std::shared_ptr<Session>> sessions;
    {
      std::lock_guard lock(impl.ctx->mu);
      for (auto& [id, weak] : impl.ctx->live)
        if (auto s = weak.lock()) sessions.push_back(std::move(s));
    }
    for (auto& s : sessions) s->stop(graceful);
  };
  // Exchanges in progress may finish their answer; idle connections close now.
  each_session(true);
  const auto deadline = Clock::now() + kStopGrace;
  while (impl.ctx->open.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  each_session(false);
  // Handlers still running finish (the caller cancelled generations first);
  // their answers go to closed sessions.
  impl.ctx->handlers->join();
  // Closed sessions go once their last operation returns; a stream's wake
  // may still come from an engine thread until then.
  const auto gone = Clock::now() + kStopGrace;
  while (impl.ctx->open.load() > 0 && Clock::now() < gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  {
    std::lock_guard gate(impl.ctx->post_mu);
    impl.ctx->posts_open = false;
  }
  impl.work.reset();
  impl.ioc.stop();
  for (auto& t : impl.io_threads) t.join();
  impl.io_threads.clear();
}

}  // namespace neuron::server
