#include "tp/worker_pool.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
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

// After the deadline, how long live workers get to answer: a worker blocked in a
// collective with a stuck peer fails fast once rank 0 aborted its communicator.
std::chrono::milliseconds grace_after_deadline(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 10, std::chrono::milliseconds{1}, std::chrono::milliseconds{500});
}

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
  std::vector<ChildWatcher::Child> watched;
  for (const auto& w : workers_)
    watched.push_back({.pid = w.process.pid(), .pidfd = w.process.pidfd(), .stdout_fd = w.process.stdout_fd()});
  try {
    watcher_ = std::make_unique<ChildWatcher>(std::move(watched), [this] { abort_communicator(); });
  } catch (const Error& e) {
    throw fail_pool(std::string("cannot watch the workers: ") + e.what());
  }
  // The first answer also waits out each process's start (exec and dynamic loading of the CUDA and BLAS
  // libraries: ~0.8 s on a busy 2-core machine), which is no step: at least kStartupTimeout for it. A worker
  // that exits or answers garbage is still seen at once (its pidfd, its line).
  constexpr std::chrono::milliseconds kStartupTimeout{10000};
  std::vector<PongResponse> pongs;
  for (auto& r : round(PingRequest{}, "pong", nullptr, std::max(options_.step_timeout, kStartupTimeout)))
    pongs.push_back(std::get<PongResponse>(r));
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

void WorkerPool::abort_communicator() noexcept {
  std::lock_guard lock(comm_mu_);
  if (comm_) comm_->abort();
}

Error WorkerPool::fail_pool(const std::string& why) noexcept {
  if (failure_.empty()) failure_ = why;
  spdlog::error("tp: {}; aborting the group", why);
  watcher_.reset();  // it polls the workers' descriptors, which kill() closes
  abort_communicator();
  for (auto& w : workers_) w.process.kill();
  return Error(errc::worker_failed, why);
}

std::string WorkerPool::exit_story(Slot& w) {
  // A pipe's writer that closed is usually exiting: give the kernel a moment to report the status.
  for (int k = 0; k < 20 && w.process.running(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds{5});
  const std::string who = "rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.process.pid()) + ")";
  if (w.process.running()) return who + " closed its output";
  return who + " exited: " + w.process.exit_description();
}

std::vector<Response> WorkerPool::round(const Request& request, std::string_view expected_op,
                                        const std::function<void()>& own, std::chrono::milliseconds timeout) {
  check_usable();
  const std::string line = to_line(request);
  const std::string op(op_name(request));
  // A worker would refuse it unread while rank 0 ran it: refuse it here, before any rank does.
  if (line.size() > kMaxLineBytes)
    fail(errc::invalid_argument, std::string(op) + " request of " + std::to_string(line.size()) +
                                     " bytes is longer than the protocol's " + std::to_string(kMaxLineBytes));
  RoundTiming timing;
  std::string hard_failure;  // the first worker that died, hung or answered garbage
  auto who = [](Slot& w) { return "rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.process.pid()) + ")"; };
  auto note_hard = [&](const std::string& what) {
    if (hard_failure.empty()) hard_failure = what;
  };

  // One deadline for the whole round; the watcher aborts rank 0's collectives when it passes.
  const auto t_send = Clock::now();
  const auto deadline = t_send + timeout;
  watcher_->arm(deadline);
  struct Disarm {
    std::unique_ptr<ChildWatcher>& watcher;
    ~Disarm() {
      if (watcher) watcher->disarm();
    }
  } disarm{watcher_};

  // 1. Send to every worker; one that cannot take the request gets no read below.
  std::vector<bool> waiting(workers_.size(), false);
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    auto& w = workers_[i];
    try {
      if (write_line(w.process.stdin_fd(), line, deadline))
        waiting[i] = true;
      else
        note_hard(who(w) + " did not accept the " + op + " request within the " + ms_string(timeout) + " deadline");
    } catch (const Error& e) {
      if (!w.process.running())
        note_hard(exit_story(w) + " (cannot send " + op + ")");
      else
        note_hard(who(w) + " cannot be sent " + op + " (" + e.what() + ")");
    }
  }

  // 2. The leader's own part. Its failure is held until the replies are in.
  const auto t_own = Clock::now();
  timing.send = t_own - t_send;
  std::exception_ptr own_error;
  if (own && hard_failure.empty()) {
    try {
      own();
    } catch (...) {
      own_error = std::current_exception();
    }
  }

  // 3. One reply from every worker that was sent the request, read from all
  // of them at once, until the deadline. A worker that exits ends the wait.
  const auto t_wait = Clock::now();
  timing.own = t_wait - t_own;
  std::vector<Response> replies(workers_.size(), Response{ErrorResponse{errc::worker_failed, "no reply"}});
  std::optional<Error> reported;  // the first error a rank reported
  auto take = [&](std::size_t i, const std::string& got_line) {
    auto& w = workers_[i];
    Response resp;
    try {
      resp = parse_response(got_line);
    } catch (const Error& e) {
      note_hard(who(w) + " answered garbage to " + op + " (" + e.what() + "): \"" + excerpt(got_line) + "\"");
      return;
    }
    if (const auto* err = std::get_if<ErrorResponse>(&resp)) {
      if (!reported) reported.emplace(err->kind, "rank " + std::to_string(w.rank) + ": " + err->message);
    } else if (op_name(resp) != expected_op) {
      note_hard(who(w) + " answered " + std::string(op_name(resp)) + " to " + op);
      return;
    }
    if (const auto* ok = std::get_if<StepOkResponse>(&resp)) {
      timing.worker_forward_us_max = std::max(timing.worker_forward_us_max, ok->forward_us.value_or(0));
      timing.worker_comm_us_max = std::max(timing.worker_comm_us_max, ok->comm_us.value_or(0));
    }
    replies[i] = std::move(resp);
  };
  // Reads until every reply is in, a worker failed hard, or `until` passed.
  auto collect = [&](Clock::time_point until) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> index;
    while (hard_failure.empty()) {
      if (const auto dead = watcher_->first_exited()) {
        note_hard(exit_story(workers_[*dead]) + " during " + op);
        return;
      }
      fds.clear();
      index.clear();
      for (std::size_t i = 0; i < workers_.size(); ++i) {
        if (!waiting[i]) continue;
        fds.push_back({workers_[i].process.stdout_fd(), POLLIN, 0});
        index.push_back(i);
      }
      if (fds.empty()) return;
      fds.push_back({watcher_->event_fd(), POLLIN, 0});
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
      const int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30)));
      if (n < 0) {
        if (errno == EINTR) continue;
        note_hard(std::string("rank 0: poll on the workers' replies failed: ") + std::strerror(errno));
        return;
      }
      if (n == 0) return;  // `until` passed
      for (std::size_t k = 0; k + 1 < fds.size() && hard_failure.empty(); ++k) {
        if (fds[k].revents == 0) continue;
        const std::size_t i = index[k];
        auto& w = workers_[i];
        LineReader::Result got;
        try {
          got = w.reader->read_line(Clock::now());  // what the pipe holds; never blocks
        } catch (const Error& e) {
          note_hard(who(w) + ": reading its reply failed: " + e.what());
          break;
        }
        switch (got.status) {
          case LineReader::Status::timeout:  // part of a line so far
            break;
          case LineReader::Status::eof:
            waiting[i] = false;
            note_hard(exit_story(w) + " during " + op);
            break;
          case LineReader::Status::too_long:
            waiting[i] = false;
            note_hard(who(w) + " answered garbage: a line longer than " + std::to_string(kMaxLineBytes) + " bytes");
            break;
          case LineReader::Status::line:
            waiting[i] = false;
            take(i, got.line);
            break;
        }
      }
    }
  };
  collect(deadline);
  auto still_waiting = [&] { return std::find(waiting.begin(), waiting.end(), true) != waiting.end(); };
  if (hard_failure.empty() && still_waiting()) {
    // The deadline passed (and rank 0's collectives were aborted). A stopped
    // worker is the cause; without one, live workers get a short grace to
    // answer (their collectives fail fast now) and the first silent one is named.
    for (std::size_t i = 0; i < workers_.size() && hard_failure.empty(); ++i)
      if (waiting[i] && workers_[i].process.stopped())
        note_hard(who(workers_[i]) + " is stopped (SIGSTOP?) and sent no reply to " + op + " within the " +
                  ms_string(timeout) + " deadline");
    if (hard_failure.empty()) collect(Clock::now() + grace_after_deadline(timeout));
    for (std::size_t i = 0; i < workers_.size() && hard_failure.empty(); ++i)
      if (waiting[i])
        note_hard(who(workers_[i]) + " sent no reply to " + op + " within the " + ms_string(timeout) + " deadline");
  }
  timing.wait = Clock::now() - t_wait;
  last_round_ = timing;
  // Disarmed first, so a deadline cannot fire (and abort the communicator) after it was read.
  bool missed_deadline = false;
  if (watcher_) {
    watcher_->disarm();
    missed_deadline = watcher_->deadline_passed();
  }

  // 4. Verdict: a misbehaving process outranks every reported error (it is the cause).
  if (!hard_failure.empty()) throw fail_pool(hard_failure);
  if (own_error) {
    const std::string why = missed_deadline ? " (it missed the " + ms_string(timeout) + " deadline)" : std::string();
    try {
      std::rethrow_exception(own_error);
    } catch (const Error& e) {
      if (poisons_group(e.kind()) || missed_deadline)
        throw fail_pool("rank 0: " + op + " failed" + why + ": " + e.what());
      throw;
    } catch (const std::exception& e) {
      throw fail_pool("rank 0: " + op + " failed" + why + ": " + e.what());
    }
  }
  if (missed_deadline) throw fail_pool("rank 0: " + op + " missed the " + ms_string(timeout) + " deadline");
  if (reported) {
    if (poisons_group(reported->kind())) throw fail_pool(op + " failed on " + reported->what());
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
  {
    std::lock_guard lock(comm_mu_);
    comm_ = mine;
  }
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
  watcher_.reset();  // workers exit now on purpose; and stop() below closes what it polls
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
  if (failed()) abort_communicator();
}

}  // namespace neuron::tp
