#include "server/http_session.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string_view>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/write.hpp>
#include <spdlog/spdlog.h>

#include "server/api_error.hpp"

namespace neuron::server::transport {
namespace {

constexpr std::uint32_t kHeaderLimit = 64 << 10;
constexpr std::size_t kReadChunk = 8192;  // Session::rx_
// Input kept while a request is being handled or answered (a pipelined next
// request); past it reading pauses until the exchange is over.
constexpr std::size_t kMaxBuffered = kHeaderLimit + kReadChunk;
// After the last response on a connection: how long to read and discard
// what the client still sends, so that closing does not reset the connection
// before it has read the response (e.g. a 413 while it is still uploading).
constexpr auto kLinger = std::chrono::milliseconds(3000);
constexpr std::string_view kLastChunk = "0\r\n\r\n";
// The kernel's send buffer per connection (it doubles the value), instead of
// autotuning up to tcp_wmem's 4 MiB: a client that stops reading then blocks
// our writes after ~128 KiB, i.e. a few hundred SSE events, so the write
// deadline finds it, and thousands of stalled clients cannot pin GiBs of
// kernel memory. Ample for token streams and JSON answers.
constexpr int kSendBuffer = 64 << 10;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes of a path; anything else (a stray '%' included) stays as sent.
std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// One chunk of a chunked body (RFC 9112 7.1); never empty (that is the last chunk).
std::string chunk(std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out;
  out.reserve(static_cast<std::size_t>(n) + data.size() + 2);
  out.append(size, static_cast<std::size_t>(n)).append(data).append("\r\n");
  return out;
}

// The handler's exceptions become the error envelope here, so none reaches a thread of the pool.
HttpResponse safe_handle(const RequestHandler& handler, const HttpRequest& request) {
  try {
    return handler(request);
  } catch (const std::exception& e) {
    ApiError err = from_exception(e);
    // A client's mistake or a busy model is routine; only the daemon's own failures are errors.
    const auto level = err.status >= 500 && err.status != 503 ? spdlog::level::err : spdlog::level::info;
    spdlog::log(level, "{} {}: {} ({})", request.method, request.path, e.what(), err.code);
    return error_response(err);
  } catch (...) {
    spdlog::error("{} {}: unknown exception", request.method, request.path);
    return error_response(classify(errc::internal, {}));
  }
}

}  // namespace

Session::Session(tcp::socket socket, std::shared_ptr<ServerContext> ctx)
    : ctx_(std::move(ctx)),
      opt_(ctx_->options),
      socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      heartbeat_(socket_.get_executor()) {
  buffer_.max_size(kMaxBuffered + kReadChunk);
  beast::error_code ec;
  const auto peer = socket_.remote_endpoint(ec);
  remote_ = ec ? std::string("?") : peer.address().to_string();
  // Headers, body and each SSE event go out as separate writes; with Nagle
  // on, each waits ~40 ms for the peer's delayed ACK.
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.set_option(asio::socket_base::send_buffer_size(kSendBuffer), ec);
  static_assert(std::tuple_size_v<decltype(rx_)> == kReadChunk);
}

Session::~Session() {
  if (stream_ && !stream_done_) stream_->cancel();
  {
    std::lock_guard lock(ctx_->mu);
    ctx_->live.erase(id_);
  }
  ctx_->open.fetch_sub(1);
}

void Session::run() {
  {
    std::lock_guard lock(ctx_->mu);
    id_ = ctx_->next_id++;
    ctx_->live.emplace(id_, weak_from_this());
  }
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->new_parser();
    // A new connection owes its first request head within the header deadline.
    self->phase_ = Phase::head;
    self->arm(self->opt_.header_timeout);
    self->start_read();
  });
}

void Session::stop(bool graceful) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), graceful] {
    if (self->closed_) return;
    const bool between_requests =
        self->phase_ == Phase::idle || (self->phase_ == Phase::head && self->buffer_.size() == 0 && !self->parser_->got_some());
    if (!graceful || between_requests) self->close();
    // else: finish_exchange() sees ctx_->stopping and closes after this answer.
  });
}

void Session::new_parser() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  // Counted on the body's bytes as they arrive, chunked or not: never more
  // than this is buffered, whatever the client claims or sends.
  parser_->body_limit(static_cast<std::uint64_t>(opt_.max_body_bytes));
  parser_->eager(true);
}

// ---- reading ----

void Session::start_read() {
  if (reading_ || closed_ || peer_closed_) return;
  if (phase_ != Phase::closing && buffer_.size() >= kMaxBuffered) return;  // resumes after this exchange
  reading_ = true;
  socket_.async_read_some(asio::buffer(rx_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t n) { self->on_read(ec, n); });
}

void Session::on_read(beast::error_code ec, std::size_t n) {
  reading_ = false;
  if (closed_) return;
  if (ec) {
    peer_closed_ = true;
    on_peer_closed();
    return;
  }
  if (phase_ != Phase::closing) {
    const auto room = buffer_.prepare(n);
    std::memcpy(room.data(), rx_.data(), n);
    buffer_.commit(n);
  }
  switch (phase_) {
    case Phase::closing:
      break;  // discarded
    case Phase::idle:
      phase_ = Phase::head;
      arm(opt_.header_timeout);  // from the request's first byte
      parse();
      break;
    case Phase::head:
      parse();
      break;
    case Phase::body:
      arm(opt_.idle_timeout);  // a body must keep arriving
      parse();
      break;
    case Phase::handling:
    case Phase::responding:
    case Phase::streaming:
      break;  // a pipelined next request: parsed once this exchange is over
  }
  start_read();
}

void Session::on_peer_closed() {
  switch (phase_) {
    case Phase::handling:
      // The handler sees it (HttpRequest::client_gone) and stops a generation;
      // its answer is then dropped.
      if (client_gone_) client_gone_->store(true);
      break;
    case Phase::responding:
      break;  // the write completes or fails; then the connection closes
    default:
      close();  // nothing to answer, or a stream nobody reads: close() cancels it
  }
}

void Session::parse() {
  while (!closed_ && (phase_ == Phase::head || phase_ == Phase::body) && buffer_.size() > 0) {
    beast::error_code ec;
    const std::size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == http::error::need_more) break;
    if (ec == http::error::body_limit) {
      reject(413, http_errc::payload_too_large,
             "request body exceeds the server's limit of " + std::to_string(opt_.max_body_bytes) + " bytes (--max-body-bytes)");
      return;
    }
    if (ec == http::error::header_limit) {
      reject(431, http_errc::header_too_large, "request head exceeds " + std::to_string(kHeaderLimit) + " bytes");
      return;
    }
    if (ec) {
      reject(400, errc::bad_request, "malformed HTTP request: " + ec.message());
      return;
    }
    if (phase_ == Phase::head && parser_->is_header_done() && !on_head()) return;
    if (parser_->is_done()) {
      dispatch();
      return;
    }
    if (used == 0) break;
  }
}

bool Session::on_head() {
  const auto& msg = parser_->get();
  method_ = std::string(msg.method_string());
  const std::string_view target = msg.target();
  path_ = percent_decode(target.substr(0, target.find('?')));
  version_ = msg.version();
  origin_ = std::string(msg[http::field::origin]);
  started_ = Clock::now();
  status_ = 0;
  logged_ = false;
  phase_ = Phase::body;
  // Bodies are never decompressed: a compressed one would escape the size
  // limit (a zip bomb) and no OpenAI client sends one.
  const std::string_view encoding = trim(msg[http::field::content_encoding]);
  if (!encoding.empty() && !iequals(encoding, "identity")) {
    reject(415, http_errc::unsupported_media_type,
           "Content-Encoding '" + std::string(encoding) + "' is not supported: send the body uncompressed");
    return false;
  }
  if (parser_->is_done()) return true;
  arm(opt_.idle_timeout);
  if (version_ >= 11 && iequals(trim(msg[http::field::expect]), "100-continue"))
    send("HTTP/1.1 100 Continue\r\n\r\n", After::none);
  return true;
}

// ---- handling ----

void Session::dispatch() {
  disarm();  // a handler may take long (model load): the client's close is what ends it
  phase_ = Phase::handling;
  auto msg = parser_->release();
  keep_alive_ = msg.keep_alive();
  head_only_ = msg.method() == http::verb::head;
  if (opt_.cors.enabled() && CorsPolicy::is_preflight(method_, origin_, msg[http::field::access_control_request_method])) {
    // Answered here, before the handler: a preflight carries no API key.
    const std::string request_headers(msg[http::field::access_control_request_headers]);
    new_parser();
    respond(opt_.cors.preflight(origin_, request_headers));
    return;
  }
  auto request = std::make_shared<HttpRequest>();
  request->method = method_;
  request->path = path_;
  request->remote = remote_;
  request->body = std::move(msg.body());
  for (const auto& field : msg) request->headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  client_gone_ = std::make_shared<std::atomic<bool>>(peer_closed_);
  request->client_gone = [gone = client_gone_] { return gone->load(); };
  new_parser();
  asio::post(*ctx_->handlers, [self = shared_from_this(), request] {
    HttpResponse response = safe_handle(self->ctx_->handler, *request);
    asio::post(self->socket_.get_executor(),
               [self, response = std::move(response)]() mutable { self->on_response(std::move(response)); });
  });
}

void Session::on_response(HttpResponse response) {
  if (closed_ || peer_closed_) {
    if (response.stream) response.stream->cancel();
    if (!closed_) {
      status_ = response.status;  // 499 from a generation that saw the client leave
      log_exchange();
      close();
    }
    return;
  }
  respond(std::move(response));
}

void Session::respond(HttpResponse response) {
  status_ = response.status;
  if (ctx_->stopping) keep_alive_ = false;
  http::response<http::empty_body> head;
  head.version(version_);
  head.result(static_cast<unsigned>(response.status));
  if (!response.content_type.empty()) head.set(http::field::content_type, response.content_type);
  if (opt_.cors.enabled() && response.header("Access-Control-Allow-Origin").empty()) opt_.cors.decorate(origin_, response.headers);
  for (const auto& [name, value] : response.headers) head.insert(name, value);
  if (response.stream && !head_only_) {
    head.set(http::field::cache_control, "no-cache");
    head.set("X-Accel-Buffering", "no");
    chunked_ = version_ >= 11;
    if (chunked_) head.chunked(true);
    else keep_alive_ = false;  // HTTP/1.0: the body ends with the connection
    head.keep_alive(keep_alive_);
    std::ostringstream os;
    os << head.base();
    start_stream(std::move(response.stream), os.str());
    return;
  }
  if (response.stream) response.stream->cancel();  // HEAD of a stream: its headers only
  else if (response.status != 204) head.content_length(response.body.size());  // a 204 has no body and no length
  head.keep_alive(keep_alive_);
  std::ostringstream os;
  os << head.base();
  std::string bytes = os.str();
  if (!head_only_) bytes += response.body;
  phase_ = Phase::responding;
  send(std::move(bytes), After::finish);
}

void Session::reject(int status, const char* kind, const std::string& message) {
  if (logged_) {  // refused before its head was complete: name what was parsed
    const auto& msg = parser_->get();
    method_ = std::string(msg.method_string());
    path_ = percent_decode(msg.target().substr(0, msg.target().find('?')));
    origin_ = std::string(msg[http::field::origin]);  // a browser can read the refusal too
    started_ = Clock::now();
    logged_ = false;
  }
  ApiError err = classify(kind, message);
  err.status = status;
  keep_alive_ = false;  // the rest of the request is not read: the connection cannot carry another
  head_only_ = false;
  spdlog::info("{} {} from {}: {}", method_.empty() ? "-" : method_, path_.empty() ? "-" : path_, remote_, message);
  respond(error_response(err));
}

// ---- streaming ----

void Session::start_stream(std::shared_ptr<BodyStream> stream, std::string head) {
  phase_ = Phase::streaming;
  stream_ = std::move(stream);
  stream_done_ = false;
  std::weak_ptr<Session> weak = weak_from_this();
  stream_->start([weak] {
    if (auto self = weak.lock()) self->wake();
  });
  send(std::move(head), After::pump);
}

void Session::wake() {
  if (wake_posted_.exchange(true)) return;  // one pull is already on its way
  std::lock_guard gate(ctx_->post_mu);
  if (!ctx_->posts_open) return;
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->wake_posted_ = false;
    if (self->phase_ == Phase::streaming && !self->writing_ && !self->closed_) self->pump();
  });
}

void Session::pump() {
  if (stream_done_) return;
  std::string data;
  const bool more = stream_->pull(data);
  if (!more) stream_done_ = true;
  if (data.empty() && more) {
    if (!waiting_heartbeat_ && opt_.heartbeat_interval.count() > 0) {
      waiting_heartbeat_ = true;
      heartbeat_.expires_at(last_write_ + opt_.heartbeat_interval);
      heartbeat_.async_wait([self = shared_from_this()](beast::error_code ec) { self->on_heartbeat(ec); });
    }
    return;
  }
  std::string bytes;
  if (chunked_) {
    if (!data.empty()) bytes = chunk(data);
    if (stream_done_) bytes += kLastChunk;
  } else {
    bytes = std::move(data);
  }
  send(std::move(bytes), stream_done_ ? After::finish : After::pump);
}

void Session::on_heartbeat(beast::error_code ec) {
  waiting_heartbeat_ = false;
  if (ec || closed_ || phase_ != Phase::streaming || stream_done_ || writing_) return;
  if (Clock::now() < last_write_ + opt_.heartbeat_interval) {
    pump();  // something was written since: wait again from then
    return;
  }
  const std::string beat = stream_->heartbeat();
  if (beat.empty()) return;
  send(chunked_ ? chunk(beat) : beat, After::pump);
}

// ---- writing ----

void Session::send(std::string bytes, After next) {
  if (writing_) {
    queued_.emplace(std::move(bytes), next);
    return;
  }
  writing_ = true;
  out_ = std::move(bytes);
  arm(opt_.write_timeout);  // a client that stops reading is cut off
  asio::async_write(socket_, asio::buffer(out_),
                    [self = shared_from_this(), next](beast::error_code ec, std::size_t) { self->on_written(ec, next); });
}

void Session::on_written(beast::error_code ec, After next) {
  writing_ = false;
  if (closed_) return;
  if (ec) {
    close();
    return;
  }
  last_write_ = Clock::now();
  if (queued_) {  // a response that waited for the "100 Continue" to go out
    auto [bytes, then] = std::move(*queued_);
    queued_.reset();
    send(std::move(bytes), then);
    return;
  }
  switch (next) {
    case After::none:
      if (phase_ == Phase::body) arm(opt_.idle_timeout);
      else if (phase_ == Phase::handling) disarm();
      break;
    case After::pump:
      disarm();  // nothing in flight: no deadline until the next write
      pump();
      break;
    case After::finish:
      finish_exchange();
      break;
  }
}

void Session::finish_exchange() {
  log_exchange();
  stream_.reset();
  stream_done_ = false;
  client_gone_.reset();
  origin_.clear();
  if (!keep_alive_ || peer_closed_ || ctx_->stopping) {
    linger();
    return;
  }
  if (buffer_.size() > 0) {  // pipelined: the next request is already here
    phase_ = Phase::head;
    arm(opt_.header_timeout);
    parse();
  } else {
    phase_ = Phase::idle;
    arm(opt_.idle_timeout);
  }
  start_read();
}

void Session::linger() {
  phase_ = Phase::closing;
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  buffer_.consume(buffer_.size());
  if (peer_closed_ || ec) {
    close();
    return;
  }
  arm(std::chrono::duration_cast<std::chrono::milliseconds>(kLinger));
  start_read();
}

void Session::log_exchange() {
  if (logged_) return;
  logged_ = true;
  if (!ctx_->observer) return;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
  try {
    ctx_->observer(method_, path_, status_, ms);
  } catch (const std::exception& e) {
    spdlog::error("access log observer failed: {}", e.what());
  }
}

// ---- deadlines ----

void Session::arm(std::chrono::milliseconds d) {
  deadline_.expires_after(d);  // a wait in progress ends with operation_aborted and waits again
  if (!waiting_deadline_) wait_deadline();
}

void Session::disarm() {
  deadline_.expires_at(Clock::time_point::max());
  if (!waiting_deadline_) wait_deadline();
}

void Session::wait_deadline() {
  waiting_deadline_ = true;
  deadline_.async_wait([self = shared_from_this()](beast::error_code) {
    self->waiting_deadline_ = false;
    if (self->closed_) return;
    if (self->deadline_.expiry() <= Clock::now()) self->on_deadline();
    else self->wait_deadline();
  });
}

void Session::on_deadline() {
  switch (phase_) {
    case Phase::idle:
    case Phase::closing:
      break;
    case Phase::head:
      spdlog::debug("closing the connection from {}: no complete request head within {} ms", remote_, opt_.header_timeout.count());
      break;
    case Phase::body:
      spdlog::info("closing the connection from {}: {} {} sent no body bytes for {} ms", remote_, method_, path_,
                   opt_.idle_timeout.count());
      break;
    case Phase::responding:
    case Phase::streaming:
      spdlog::warn("closing the connection from {}: {} {}: the client read nothing for {} ms{}", remote_, method_, path_,
                   opt_.write_timeout.count(), phase_ == Phase::streaming ? " (its stream is cancelled)" : "");
      break;
    case Phase::handling:
      disarm();  // not armed while a handler runs
      return;
  }
  close();
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  if (stream_ && !stream_done_) stream_->cancel();  // the generation stops at its next step
  stream_.reset();
  if (client_gone_) client_gone_->store(true);
  if (status_ != 0) log_exchange();
  beast::error_code ec;
  deadline_.cancel();
  heartbeat_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

}  // namespace neuron::server::transport
