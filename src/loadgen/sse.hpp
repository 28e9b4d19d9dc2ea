#pragma once
// A server-sent-events parser (the WHATWG event-stream format) that takes
// the body in whatever pieces the network delivers: a line, a field name, a
// "\r\n" pair or a UTF-8 sequence may be split across two feeds.
//
// Lines end with "\n", "\r\n" or "\r". A line starting with ':' is a comment
// (servers send them as keep-alives); "data:" lines are joined with '\n';
// "event:" names the event; a blank line dispatches it. An event without any
// data line is dropped, as browsers do. Other fields (id, retry) are ignored.
#include <string>
#include <string_view>
#include <vector>

namespace neuron::loadgen {

struct SseEvent {
  std::string event;  // empty: the default "message"
  std::string data;
};

class SseParser {
 public:
  // Parses `bytes` and appends every event it completes to `out`.
  void feed(std::string_view bytes, std::vector<SseEvent>& out);

  // True when bytes of an unfinished event are held (a partial line, or data
  // lines not yet followed by the blank line): the stream ended mid-event.
  bool has_partial() const noexcept;

 private:
  void line(std::string_view l, std::vector<SseEvent>& out);

  std::string line_;      // the current line so far
  bool after_cr_ = false;  // the last byte was '\r': a following '\n' belongs to it
  SseEvent pending_;
  bool has_data_ = false;
  bool has_fields_ = false;
};

}  // namespace neuron::loadgen
