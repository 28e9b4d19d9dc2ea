#include "tp/child_process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "util/error.hpp"

namespace neuron::tp {

namespace {

// The one thread that starts children (see the header for why).
class Spawner {
 public:
  Spawner() : thread_([this] { loop(); }) {}
  ~Spawner() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  template <typename F>
  auto run(F&& f) {
    std::packaged_task<std::invoke_result_t<F>()> task(std::forward<F>(f));
    auto result = task.get_future();
    {
      std::lock_guard lock(mu_);
      jobs_.emplace_back([t = std::make_shared<decltype(task)>(std::move(task))] { (*t)(); });
    }
    cv_.notify_all();
    return result.get();
  }

  static Spawner& instance() {
    static Spawner s;
    return s;
  }

 private:
  void loop() {
    // An empty signal mask, inherited by every child until exec resets nothing else.
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_ && jobs_.empty()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

std::pair<UniqueFd, UniqueFd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail(errc::io, std::string("pipe2 failed: ") + std::strerror(errno));
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + (WCOREDUMP(status) ? " (core dumped)" : "");
  return "status " + std::to_string(status);
}

// A pidfd for `pid`, or an empty one where the kernel (or a seccomp filter) refuses pidfd_open.
UniqueFd open_pidfd(pid_t pid) noexcept {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return UniqueFd(static_cast<int>(fd));
  }
#endif
  (void)pid;
  return UniqueFd();
}

// The environment variable that tells a spawned child its leader's pid.
constexpr const char* kParentEnv = "NEURON_SPAWNED_BY";

}  // namespace

void die_with_parent() {
  const char* leader = std::getenv(kParentEnv);
  if (!leader) return;  // not started by ChildProcess::spawn
  const long pid = std::strtol(leader, nullptr, 10);
  ::unsetenv(kParentEnv);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (pid <= 0 || ::getppid() != pid) ::_exit(126);  // the leader died before prctl took effect
}

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv) {
  if (argv.empty()) fail(errc::invalid_argument, "spawn: empty argv");
  auto [in_read, in_write] = make_pipe();
  auto [out_read, out_write] = make_pipe();

  // posix_spawn, not fork: its child runs no code of this process (a forked
  // child of a multi-threaded process can block on a lock another thread held
  // at the fork, as the sanitizers' allocator did). The child asks for its
  // parent-death signal itself (die_with_parent), told the leader's pid here.
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const std::string parent_entry = std::string(kParentEnv) + "=";
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::string_view(*e).rfind(parent_entry, 0) != 0) env.emplace_back(*e);
  env.push_back(parent_entry + std::to_string(::getpid()));
  std::vector<char*> cenv;
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  struct Actions {  // the child's stdin and stdout: the pipes' far ends
    posix_spawn_file_actions_t a;
    Actions() { posix_spawn_file_actions_init(&a); }
    ~Actions() { posix_spawn_file_actions_destroy(&a); }
  } actions;
  for (const auto& [fd, to] : {std::pair{in_read.get(), 0}, std::pair{out_write.get(), 1}})
    if (const int rc = posix_spawn_file_actions_adddup2(&actions.a, fd, to); rc != 0)
      fail(errc::io, "cannot start " + argv[0] + ": " + std::strerror(rc));
  // On the spawner thread: the child's parent-death signal follows that thread.
  const pid_t pid = Spawner::instance().run([&]() -> pid_t {
    pid_t p = 0;
    const int rc = ::posix_spawn(&p, cargv[0], &actions.a, nullptr, cargv.data(), cenv.data());
    return rc == 0 ? p : -rc;
  });
  if (pid < 0) fail(errc::io, "cannot start " + argv[0] + ": " + std::strerror(-pid));

  ChildProcess c;
  c.pid_ = pid;
  c.stdin_ = std::move(in_write);
  c.stdout_ = std::move(out_read);
  c.pidfd_ = open_pidfd(pid);  // nobody else reaps the child, so `pid` is still ours even if it already exited
  // A stopped worker must not block the leader's write: it polls with a deadline instead.
  const int flags = ::fcntl(c.stdin_.get(), F_GETFL);
  ::fcntl(c.stdin_.get(), F_SETFL, flags | O_NONBLOCK);
  return c;
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      reaped_(std::exchange(o.reaped_, false)),
      exit_(std::move(o.exit_)),
      stdin_(std::move(o.stdin_)),
      stdout_(std::move(o.stdout_)),
      pidfd_(std::move(o.pidfd_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    kill();
    pid_ = std::exchange(o.pid_, -1);
    reaped_ = std::exchange(o.reaped_, false);
    exit_ = std::move(o.exit_);
    stdin_ = std::move(o.stdin_);
    stdout_ = std::move(o.stdout_);
    pidfd_ = std::move(o.pidfd_);
  }
  return *this;
}

ChildProcess::~ChildProcess() { kill(); }

bool ChildProcess::running() noexcept {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    exit_ = describe(status);
    return false;
  }
  return r == 0;
}

bool ChildProcess::stopped() const noexcept {
  if (pid_ <= 0 || reaped_) return false;
  // "pid (comm) S ...": the state letter follows the last ')' (comm may contain one).
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'T' || state == 't';
}

std::string ChildProcess::stop(std::chrono::milliseconds grace) noexcept {
  if (pid_ <= 0 || reaped_) return exit_;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    exit_ = describe(status);
  }
  stdin_.reset();
  stdout_.reset();
  pidfd_.reset();
  return exit_;
}

}  // namespace neuron::tp
