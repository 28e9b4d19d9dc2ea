// Line framing over pipes: what the leader and the workers rely on to never
// block forever on a silent peer or buffer a runaway line whole.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "tp/line_channel.hpp"
#include "tp/unique_fd.hpp"
#include "util/error.hpp"

namespace {

using namespace neuron;
using namespace neuron::tp;
using namespace std::chrono_literals;
using Status = LineReader::Status;

struct Pipe {
  UniqueFd read, write;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read.reset(fds[0]);
    write.reset(fds[1]);
  }
  void put(const std::string& bytes) { ASSERT_EQ(::write(write.get(), bytes.data(), bytes.size()), (ssize_t)bytes.size()); }
};

auto soon() { return std::chrono::steady_clock::now() + 2s; }

TEST(LineReader, SplitsLinesAndStripsCarriageReturns) {
  Pipe p;
  LineReader r(p.read.get(), 1024);
  p.put("one\ntwo\r\nthr");
  auto a = r.read_line(soon());
  EXPECT_EQ(a.status, Status::line);
  EXPECT_EQ(a.line, "one");
  auto b = r.read_line(soon());
  EXPECT_EQ(b.line, "two");
  p.put("ee\n");
  EXPECT_EQ(r.read_line(soon()).line, "three");
}

TEST(LineReader, SilentPeerTimesOutAtTheDeadline) {
  Pipe p;
  LineReader r(p.read.get(), 1024);
  p.put("partial line without end");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(r.read_line(t0 + 200ms).status, Status::timeout);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 1s);
  // The partial line is kept: it completes later.
  p.put("\n");
  EXPECT_EQ(r.read_line(soon()).line, "partial line without end");
}

TEST(LineReader, OverlongLineIsReportedOnceAndTheNextLineStillArrives) {
  Pipe p;
  LineReader r(p.read.get(), 16);
  p.put(std::string(40, 'x'));
  p.put(std::string(40, 'y') + "\nok\n");
  EXPECT_EQ(r.read_line(soon()).status, Status::too_long);
  auto next = r.read_line(soon());
  EXPECT_EQ(next.status, Status::line);
  EXPECT_EQ(next.line, "ok");
}

TEST(LineReader, OverlongLineArrivingInOneChunkIsRefusedToo) {
  Pipe p;
  LineReader r(p.read.get(), 8);
  p.put("0123456789abcdef\nshort\n");
  EXPECT_EQ(r.read_line(soon()).status, Status::too_long);
  EXPECT_EQ(r.read_line(soon()).line, "short");
}

TEST(LineReader, EndOfInputDropsAPartialLine) {
  Pipe p;
  LineReader r(p.read.get(), 1024);
  p.put("done\nhalf");
  p.write.reset();
  EXPECT_EQ(r.read_line(soon()).line, "done");
  EXPECT_EQ(r.read_line(soon()).status, Status::eof);
  EXPECT_EQ(r.read_line(soon()).status, Status::eof);
}

TEST(WriteLine, FullPipeOfAStoppedReaderTimesOutInsteadOfBlocking) {
  Pipe p;
  ::fcntl(p.write.get(), F_SETFL, ::fcntl(p.write.get(), F_GETFL) | O_NONBLOCK);
  const std::string big(1 << 20, 'z');  // larger than a pipe's buffer; nobody reads
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(write_line(p.write.get(), big, t0 + 200ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(WriteLine, DeadReaderIsAnIoError) {
  ::signal(SIGPIPE, SIG_IGN);
  Pipe p;
  p.read.reset();
  try {
    write_line(p.write.get(), "hello");
    FAIL() << "write to a closed pipe succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::io);
  }
}

}  // namespace
