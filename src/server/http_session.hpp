#pragma once
// Private to the transport: included only by http_server.cpp and
// http_session.cpp (it pulls in Boost.Beast, which is heavy to compile).
// One Session is one accepted TCP connection: an HTTP/1.1 state machine that
// runs on its own strand, always has one async_read_some in flight (so a
// client's close is seen in every phase, a pipelined request kept), parses with Beast's
// request parser, hands complete requests to the handler pool and writes
// responses, streamed or not, under deadlines.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http_server.hpp"

namespace neuron::server::transport {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

class Session;

// What every connection of one server shares.
struct ServerContext {
  HttpServerOptions options;  // effective values (io threads and the connection cap resolved)
  RequestHandler handler;
  ExchangeObserver observer;
  std::unique_ptr<asio::thread_pool> handlers;  // Api::handle runs here
  std::atomic<bool> stopping{false};            // finish the exchange in progress, then close
  std::atomic<std::size_t> open{0};             // sessions alive

  // Posts from threads the server does not own (a stream's wake, on the
  // engine's thread) go through this gate: stop() closes it before the
  // io_context goes away.
  std::mutex post_mu;
  bool posts_open = true;

  // Sessions alive, so that stop() can reach them.
  std::mutex mu;
  std::map<std::uint64_t, std::weak_ptr<Session>> live;
  std::uint64_t next_id = 0;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // The socket's executor must be a strand; `open` was already counted.
  Session(tcp::socket socket, std::shared_ptr<ServerContext> ctx);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void run();  // starts reading (posts to the strand)
  // From any thread: server stopping. `graceful`: close once the exchange in
  // progress has been answered (at once when there is none); else close now.
  void stop(bool graceful);

 private:
  enum class Phase {
    idle,        // keep-alive: waiting for a request's first byte (idle deadline)
    head,        // reading a request head (header deadline)
    body,        // reading its body (idle deadline per pause)
    handling,    // the handler pool has it; reading on only to notice a close
    responding,  // writing a whole response
    streaming,   // writing a BodyStream's bytes as they come
    closing,     // answered and shut down for sending: discard input until EOF or a short linger
  };
  enum class After { none, pump, finish };

  void start_read();
  void on_read(beast::error_code ec, std::size_t n);
  void on_peer_closed();
  void parse();
  bool on_head();
  void dispatch();
  void on_response(HttpResponse response);
  void respond(HttpResponse response);
  void start_stream(std::shared_ptr<BodyStream> stream, std::string head);
  void wake();
  void pump();
  void on_heartbeat(beast::error_code ec);
  void send(std::string bytes, After next);
  void on_written(beast::error_code ec, After next);
  void finish_exchange();
  void reject(int status, const char* kind, const std::string& message);
  void linger();
  void log_exchange();
  void arm(std::chrono::milliseconds d);
  void disarm();
  void wait_deadline();
  void on_deadline();
  void close();
  void new_parser();

  std::shared_ptr<ServerContext> ctx_;
  const HttpServerOptions& opt_;
  tcp::socket socket_;  // executor: this session's strand
  asio::steady_timer deadline_;
  asio::steady_timer heartbeat_;
  std::uint64_t id_ = 0;
  std::string remote_;

  // Reads land in rx_ and are appended to buffer_: the parser consumes
  // buffer_ while the next read is in flight, which must not move under it.
  std::array<char, 8192> rx_;
  beast::flat_buffer buffer_;  // received, not yet parsed
  std::optional<http::request_parser<http::string_body>> parser_;
  Phase phase_ = Phase::head;
  bool reading_ = false;      // an async_read_some is in flight
  bool writing_ = false;      // an async_write is in flight
  bool waiting_deadline_ = false;
  bool peer_closed_ = false;  // the read side saw EOF or an error
  bool closed_ = false;
  std::string out_;           // what the write in flight sends
  // A write asked for while one is in flight: only a response that follows
  // a "100 Continue" can meet one.
  std::optional<std::pair<std::string, After>> queued_;
  Clock::time_point last_write_{};
  bool waiting_heartbeat_ = false;

  // The exchange in progress.
  std::string method_, path_;
  std::string origin_;        // its Origin header (CORS), empty when none
  Clock::time_point started_{};
  int status_ = 0;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_only_ = false;    // a HEAD request: headers without the body
  bool logged_ = true;        // the observer has seen this exchange (true: none in progress)
  std::shared_ptr<std::atomic<bool>> client_gone_;
  std::shared_ptr<BodyStream> stream_;
  bool stream_done_ = false;
  bool chunked_ = false;
  std::atomic<bool> wake_posted_{false};
};

}  // namespace neuron::server::transport
