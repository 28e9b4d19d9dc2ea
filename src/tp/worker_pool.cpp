#include "tp/worker_pool.hpp"

#include <csignal>
#include <exception>
#include <filesystem>
#include <future>
#include <thread>

#include <spdlog/spdlog.h>

#include "util/error.hpp"

namespace neuron::tp {

namespace {

using Clock = std::chrono::steady_clock;

std::string ms_string(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

std::string excerpt(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 80)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return s.size() > 80 ? out + "..." : out;
}

std::filesystem::path resolve_binary(const std::filesystem::path& configured) {
  std::error_code ec;
  std::filesystem::path p = configured.empty() ? std::filesystem::read_symlink("/proc/self/exe", ec) : configured;
  if (ec || p.empty()) fail(errc::io, "cannot resolve this executable's path for spawning TP workers");
  if (!std::filesystem::is_regular_file(p, ec))
    fail(errc::not_found, "TP worker binary " + p.string() + " does not exist");
  return p;
}

}  // namespace

bool poisons_group(std::string_view kind) noexcept {
  return kind == errc::comm || kind == errc::worker_failed || kind == errc::timeout || kind == errc::internal ||
         kind == errc::cuda || kind == errc::out_of_memory || kind == errc::io;
}

WorkerPool::WorkerPool(PoolOptions options) : options_(std::move(options)) {
  const int world = options_.world;
  if (world < 2) fail(errc::bad_tensor_parallel, "a worker pool needs at least 2 ranks, got " + std::to_string(world));
  devices_ = options_.devices.empty() ? std::vector<backend::Device>(world) : options_.devices;
  if (static_cast<int>(devices_.size()) != world)
    fail(errc::invalid_argument, "worker pool: " + std::to_string(devices_.size()) + " devices for " +
                                     std::to_string(world) + " ranks");
  // A worker that died must surface as EPIPE on our write, not kill this process.
  std::signal(SIGPIPE, SIG_IGN);
  const auto binary = resolve_binary(options_.worker_binary);

  for (int r = 1; r < world; ++r) {
    std::vector<std::string> argv = {binary.string(),   "worker", "--rank", std::to_string(r),
                                     "--tp-size",       std::to_string(world), "--device", devices_[r].str(),
                                     "--step-timeout-ms", std::to_string(options_.step_timeout.count())};
    if (r < static_cast<int>(options_.worker_args.size()))
      argv.insert(argv.end(), options_.worker_args[r].begin(), options_.worker_args[r].end());
    Slot slot;
    slot.rank = r;
    try {
      slot.process = ChildProcess::spawn(argv);
    } catch (const Error& e) {
      throw fail_pool("rank " + std::to_string(r) + ": cannot start " + binary.string() + ": " + e.what());
    }
    slot.reader = std::make_unique<LineReader>(slot.process.stdout_fd(), kMaxLineBytes);
    spdlog::debug("tp: spawned rank {} as pid {}", r, slot.process.pid());
    workers_.push_back(std::move(slot));
  }
  const auto pongs = ping();
  for (std::size_t i = 0; i < pongs.size(); ++i) {
    const int r = static_cast<int>(i) + 1;
    if (pongs[i].rank != r || pongs[i].world_size != world)
      throw fail_pool("rank " + std::to_string(r) + ": answered ping as rank " + std::to_string(pongs[i].rank) +
                      " of " + std::to_string(pongs[i].world_size));
  }
}

WorkerPool::~WorkerPool() { shutdown(); }

std::vector<pid_t> WorkerPool::worker_pids() const {
  std::vector<pid_t> pids;
  for (const auto& w : workers_) pids.push_back(w.process.pid());
  return pids;
}

void WorkerPool::check_usable() const {
  if (failed()) fail(errc::worker_failed, "the TP group failed earlier and cannot be used: " + failure_);
  if (shut_down_) fail(errc::shutting_down, "the TP group has been shut down");
}

Error WorkerPool::fail_pool(const std::string& why) noexcept {
  if (failure_.empty()) failure_ = why;
  spdlog::error("tp: {}; aborting the group", why);
  if (comm_) comm_->abort();
  for (auto& w : workers_) w.process.kill();
  return Error(errc::worker_failed, why);
}

std::vector<Response> WorkerPool::round(const Request& request, std::string_view expected_op,
                                        const std::function<void()>& own, std::chrono::milliseconds timeout) {
  check_usable();
  const std::string line = to_line(request);
  const std::string_view op = op_name(request);
  // A worker would refuse it unread while rank 0 ran it: refuse it here, before any rank does.
  if (line.size() > kMaxLineBytes)
    fail(errc::invalid_argument, std::string(op) + " request of " + std::to_string(line.size()) +
                                     " bytes is longer than the protocol's " + std::to_string(kMaxLineBytes));
  RoundTiming timing;
  std::string hard_failure;  // the first worker that died, hung or answered garbage
  auto note_hard = [&](int rank, const std::string& what) {
    if (hard_failure.empty()) hard_failure = "rank " + std::to_string(rank) + ": " + what;
  };

  // 1. Send to every worker; one that cannot take the request gets no read below.
  const auto t_send = Clock::now();
  std::vector<bool> sent(workers_.size(), false);
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    auto& w = workers_[i];
    try {
      if (write_line(w.process.stdin_fd(), line, t_send + timeout))
        sent[i] = true;
      else
        note_hard(w.rank, "did not accept the " + std::string(op) + " request within " + ms_string(timeout));
    } catch (const Error& e) {
      note_hard(w.rank, std::string("cannot send ") + std::string(op) + " (" + e.what() + "; worker " +
                            (w.process.running() ? "still running" : "exited: " + w.process.exit_description()) + ")");
    }
  }

  // 2. The leader's own part. Its failure is held until every reply is read.
  const auto t_own = Clock::now();
  timing.send = t_own - t_send;
  std::exception_ptr own_error;
  if (own) {
    try {
      own();
    } catch (...) {
      own_error = std::current_exception();
    }
  }

  // 3. Exactly one reply from every worker that was sent the request.
  const auto t_wait = Clock::now();
  timing.own = t_wait - t_own;
  // When rank 0's own part broke the group (a collective failed), healthy
  // workers fail the same way at once: only a stuck one needs the deadline,
  // and a shorter one suffices to name it.
  bool own_poisoned = false;
  if (own_error) {
    try {
      std::rethrow_exception(own_error);
    } catch (const Error& e) {
      own_poisoned = poisons_group(e.kind());
    } catch (...) {
      own_poisoned = true;
    }
  }
  const auto reply_wait = own_poisoned ? std::max(timeout / 4, std::chrono::milliseconds{1}) : timeout;
  const auto deadline = t_wait + reply_wait;
  std::vector<Response> replies(workers_.size(), Response{ErrorResponse{errc::worker_failed, "no reply"}});
  std::optional<Error> reported;  // the first error a rank reported
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (!sent[i]) continue;
    auto& w = workers_[i];
    // Once a worker failed hard the group is going down: give the rest a short grace, not the full deadline.
    const auto my_deadline = hard_failure.empty() ? deadline : std::min(deadline, Clock::now() + timeout / 10);
    LineReader::Result got;
    try {
      got = w.reader->read_line(my_deadline);
    } catch (const Error& e) {
      note_hard(w.rank, std::string("reading its reply failed: ") + e.what());
      continue;
    }
    switch (got.status) {
      case LineReader::Status::eof: {
        // Give the kernel a moment to report the exit status for the message.
        for (int k = 0; k < 20 && w.process.running(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds{5});
        note_hard(w.rank, "worker process (pid " + std::to_string(w.process.pid()) + ") exited during " +
                              std::string(op) + " (" +
                              (w.process.running() ? std::string("output closed") : w.process.exit_description()) + ")");
        continue;
      }
      case LineReader::Status::timeout:
        note_hard(w.rank, "no reply to " + std::string(op) + " within " +
                              ms_string(hard_failure.empty() ? reply_wait : timeout / 10) + " after rank 0's part");
        continue;
      case LineReader::Status::too_long:
        note_hard(w.rank, "answered garbage: a line longer than " + std::to_string(kMaxLineBytes) + " bytes");
        continue;
      case LineReader::Status::line:
        break;
    }
    Response resp;
    try {
      resp = parse_response(got.line);
    } catch (const Error& e) {
      note_hard(w.rank, "answered garbage to " + std::string(op) + " (" + e.what() + "): \"" + excerpt(got.line) + "\"");
      continue;
    }
    if (const auto* err = std::get_if<ErrorResponse>(&resp)) {
      if (!reported) reported.emplace(err->kind, "rank " + std::to_string(w.rank) + ": " + err->message);
    } else if (op_name(resp) != expected_op) {
      note_hard(w.rank, "answered " + std::string(op_name(resp)) + " to " + std::string(op));
      continue;
    }
    if (const auto* ok = std::get_if<StepOkResponse>(&resp)) {
      timing.worker_forward_us_max = std::max(timing.worker_forward_us_max, ok->forward_us.value_or(0));
      timing.worker_comm_us_max = std::max(timing.worker_comm_us_max, ok->comm_us.value_or(0));
    }
    replies[i] = std::move(resp);
  }
  timing.wait = Clock::now() - t_wait;
  last_round_ = timing;

  // 4. Verdict: a misbehaving process outranks every reported error (it is the cause).
  if (!hard_failure.empty()) throw fail_pool(hard_failure);
  if (own_error) {
    try {
      std::rethrow_exception(own_error);
    } catch (const Error& e) {
      if (poisons_group(e.kind())) throw fail_pool(std::string("rank 0: ") + std::string(op) + " failed: " + e.what());
      throw;
    } catch (const std::exception& e) {
      throw fail_pool(std::string("rank 0: ") + std::string(op) + " failed: " + e.what());
    }
  }
  if (reported) {
    if (poisons_group(reported->kind())) throw fail_pool(std::string(op) + " failed on " + reported->what());
    throw *reported;
  }
  return replies;
}

std::vector<PongResponse> WorkerPool::ping() {
  auto replies = round(PingRequest{}, "pong", nullptr, options_.step_timeout);
  std::vector<PongResponse> pongs;
  for (auto& r : replies) pongs.push_back(std::get<PongResponse>(r));
  return pongs;
}

std::shared_ptr<dist::Communicator> WorkerPool::init_communicator(dist::CommKind kind) {
  check_usable();
  const std::string comm_id = dist::new_comm_id(kind);
  dist::CommOptions co;
  co.timeout = options_.step_timeout;
  co.cuda_device = devices_[0].index;
  std::shared_ptr<dist::Communicator> mine;
  round(InitRequest{.comm_id = comm_id, .timeout_ms = options_.step_timeout.count()}, "init_ok",
        [&] { mine = dist::make_communicator(comm_id, 0, world(), co); }, options_.step_timeout);
  comm_ = mine;
  return mine;
}

float WorkerPool::sanity_check() {
  if (!comm_) fail(errc::invalid_argument, "sanity check before init_communicator");
  float own = 0;
  auto replies = round(SanityCheckRequest{}, "nccl_sanity_result", [&] { own = dist::sanity_check(*comm_); },
                       options_.step_timeout);
  const auto want = static_cast<float>(world());
  if (own != want)
    throw fail_pool("sanity all-reduce observed " + std::to_string(own) + " on rank 0, expected " + std::to_string(want));
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const double got = std::get<SanityResultResponse>(replies[i]).observed_sum;
    if (got != want)
      throw fail_pool("sanity all-reduce observed " + std::to_string(got) + " on rank " + std::to_string(i + 1) +
                      ", expected " + std::to_string(want));
  }
  return own;
}

void WorkerPool::shutdown() noexcept {
  if (shut_down_) return;
  shut_down_ = true;
  const auto deadline = Clock::now() + options_.shutdown_grace;
  const std::string line = to_line(ShutdownRequest{});
  for (auto& w : workers_) {
    if (!w.process.running()) continue;
    try {
      if (write_line(w.process.stdin_fd(), line, deadline)) {
        // Read the bye (or anything) so the worker is not blocked writing it; then EOF tells it to go.
        (void)w.reader->read_line(deadline);
      }
    } catch (const std::exception&) {
      // The worker is gone or broken; stop() below reaps it either way.
    }
    w.process.close_stdin();
  }
  for (auto& w : workers_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const std::string how = w.process.stop(std::max(left, std::chrono::milliseconds{0}));
    spdlog::debug("tp: rank {} ended ({})", w.rank, how);
  }
  if (comm_ && failed()) comm_->abort();
}

}  // namespace neuron::tp
