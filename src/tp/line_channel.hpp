#pragma once
// Newline-delimited messages over a pair of file descriptors (a worker's
// stdin/stdout, or the leader's ends of a worker's pipes).
//
// Reads wait with poll() against a deadline, so a silent peer costs at most
// the deadline; a line longer than the bound is discarded as it streams in
// (never buffered whole) and reported once its newline arrives.
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "tp/unique_fd.hpp"

namespace neuron::tp {

class LineReader {
 public:
  enum class Status { line, eof, timeout, too_long };
  struct Result {
    Status status = Status::eof;
    std::string line;  // without the newline; only for Status::line
  };

  // Does not own `fd`.
  LineReader(int fd, std::size_t max_line_bytes);

  // Waits until `deadline` (nullopt: forever); a deadline already past still
  // takes what the pipe holds now, so it reads without blocking. Throws
  // Error{io} on a read error.
  Result read_line(std::optional<std::chrono::steady_clock::time_point> deadline);

 private:
  int fd_;
  std::size_t max_;
  std::string buf_;
  std::size_t scanned_ = 0;  // bytes of buf_ known to hold no newline
  bool discarding_ = false;  // inside an over-long line
  bool eof_ = false;
};

// Writes `line` plus "\n" in full. On a non-blocking fd whose pipe is full it
// waits until `deadline` and returns false if the reader never made room (a
// stopped peer). Throws Error{io} on a write error (EPIPE when the peer died;
// SIGPIPE must be ignored by the process).
bool write_line(int fd, const std::string& line,
                std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

}  // namespace neuron::tp
