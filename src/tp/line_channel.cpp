#include "tp/line_channel.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/error.hpp"

namespace neuron::tp {

LineReader::LineReader(int fd, std::size_t max_line_bytes) : fd_(fd), max_(max_line_bytes) {}

LineReader::Result LineReader::read_line(std::optional<std::chrono::steady_clock::time_point> deadline) {
  for (;;) {
    // A complete line (or the end of an over-long one) already buffered?
    const auto nl = buf_.find('\n', scanned_);
    if (nl != std::string::npos) {
      Result r;
      if (discarding_ || nl > max_) {
        discarding_ = false;
        r.status = Status::too_long;
      } else {
        r.status = Status::line;
        r.line = buf_.substr(0, nl);
        if (r.line.ends_with('\r')) r.line.pop_back();
      }
      buf_.erase(0, nl + 1);
      scanned_ = 0;
      return r;
    }
    scanned_ = buf_.size();
    if (buf_.size() > max_) {
      // Keep nothing of a line that is already too long; remember to report it.
      discarding_ = true;
      buf_.clear();
      scanned_ = 0;
    }
    if (eof_) {
      // A partial last line without its newline is not a message.
      buf_.clear();
      scanned_ = 0;
      return {Status::eof, {}};
    }

    int wait_ms = -1;
    bool expired = false;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      expired = left.count() <= 0;
      wait_ms = expired ? 0 : static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30));
    }
    pollfd pfd{fd_, POLLIN, 0};
    const int n = ::poll(&pfd, 1, wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(errc::io, std::string("poll failed: ") + std::strerror(errno));
    }
    if (n == 0) {
      if (expired) return {Status::timeout, {}};
      continue;  // re-check the deadline
    }
    char chunk[64 * 1024];
    const ssize_t got = ::read(fd_, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail(errc::io, std::string("read failed: ") + std::strerror(errno));
    }
    if (got == 0) {
      eof_ = true;
      continue;
    }
    buf_.append(chunk, static_cast<std::size_t>(got));
  }
}

bool write_line(int fd, const std::string& line, std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::string data = line;
  data += '\n';
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n >= 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) fail(errc::io, std::string("write failed: ") + std::strerror(errno));
    // A non-blocking fd whose pipe is full: the reader is slow or stopped.
    int wait_ms = -1;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      wait_ms = static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30));
    }
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, wait_ms) < 0 && errno != EINTR)
      fail(errc::io, std::string("poll failed: ") + std::strerror(errno));
  }
  return true;
}

}  // namespace neuron::tp
