#pragma once
// Test helpers: a real `neuron serve` child process on a free loopback port
// (the port is read from its log), an HTTP client, SSE parsing, and a raw
// socket client for requests a well-behaved client library would not send.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/model_paths.hpp"

namespace neuron::server::testing_support {

using nlohmann::json;

using test_support::repo_path;
using test_support::tiny_model_dir;

inline std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Daemon {
 public:
  // Starts `neuron serve --port 0 <args>` and waits until it listens and every
  // startup model is loaded. `env`: "NAME=value" entries added to (or replacing
  // those of) this process's environment.
  explicit Daemon(std::vector<std::string> args, bool wait_loaded = true, std::vector<std::string> env = {}) {
    static int counter = 0;
    log_path_ = ::testing::TempDir() + "/neuron-serve-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".log";
    std::vector<std::string> argv = {NEURON_BINARY, "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    // Built before fork: the child may only exec.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& x) {
        return entry.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0;
      });
      if (!replaced) env_strings.push_back(entry);
    }
    env_strings.insert(env_strings.end(), env.begin(), env.end());
    std::vector<char*> cenv;
    for (auto& e : env_strings) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::dup2(fd, 1);
      ::execve(cargv[0], cargv.data(), cenv.data());
      ::_exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::regex listening(R"(listening on http://[^:]+:(\d+))");
    while (port_ == 0) {
      std::smatch m;
      std::string log = read_all(log_path_);
      if (std::regex_search(log, m, listening)) port_ = std::stoi(m[1]);
      else if (std::chrono::steady_clock::now() > deadline || exited()) {
        stop();  // no destructor runs for a constructor that throws: no daemon and no log left behind
        std::error_code ec;
        std::filesystem::remove(log_path_, ec);
        throw std::runtime_error("daemon did not start:\n" + log);  // the log travels in the message
      }
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (wait_loaded) {
      try {
        wait_models_loaded();
      } catch (...) {
        stop();  // no destructor runs for a constructor that throws: leave no daemon behind
        std::error_code ec;
        std::filesystem::remove(log_path_, ec);
        throw;
      }
    }
  }
  ~Daemon() {
    stop();
    std::error_code ec;
    std::filesystem::remove(log_path_, ec);  // tests leave nothing behind in the temp directory
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // SIGTERM and reap; returns the exit status (or -1 if it had to be killed).
  int stop(std::chrono::seconds grace = std::chrono::seconds(30)) {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + grace;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        return exit_status_ = -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    return exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  bool exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return true;
    }
    return false;
  }

  void wait_models_loaded(std::chrono::seconds timeout = std::chrono::seconds(120)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      // A failed first load leaves /models; /health's activation keeps what failed at startup.
      if (auto health = client().Get("/health"); health && health->status == 200) {
        const json failed = json::parse(health->body)["activation"]["failed"];
        if (!failed.empty()) throw std::runtime_error("model failed to load: " + failed.dump());
      }
      auto res = client().Get("/models", auth_headers());
      if (res && res->status == 200) {
        json models = json::parse(res->body);  // a bare array
        bool all = !models.empty();
        for (const auto& m : models) {
          if (m["state"] == "failed") throw std::runtime_error("model failed to load: " + m.dump());
          all = all && m["status"] == "loaded";
        }
        if (all) return;
      }
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("models did not load:\n" + log());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(std::chrono::seconds(120));
    c.set_write_timeout(std::chrono::seconds(30));
    return c;
  }
  httplib::Headers auth_headers() const {
    if (api_key.empty()) return {};
    return {{"Authorization", "Bearer " + api_key}};
  }
  httplib::Result post(const std::string& path, const json& body) const {
    return client().Post(path.c_str(), auth_headers(), body.dump(), "application/json");
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return read_all(log_path_); }
  std::string api_key;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_status_ = 0;
  std::string log_path_;
};

// The JSON payloads of a server-sent-event body, in order ("[DONE]" kept as a string).
inline std::vector<json> sse_payloads(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    std::string data = line.substr(6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
  }
  return out;
}

// A connected loopback socket, closed on destruction.
class RawConnection {
 public:
  // `small_window`: the smallest receive buffer the kernel allows, set before
  // connecting, so that a client that stops reading backs up the daemon soon.
  explicit RawConnection(int port, bool small_window = false) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (small_window) {
      int size = 1;
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect failed");
    }
    set_read_timeout(std::chrono::seconds(30));
  }
  ~RawConnection() { close(); }
  // How long one recv may wait (30 s from the constructor).
  void set_read_timeout(std::chrono::seconds timeout) {
    timeval tv{static_cast<time_t>(timeout.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  // False once the peer refuses more (closed or reset).
  bool send(const std::string& data) {
    std::size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;  // the server may close early (e.g. 413); the response is still readable
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Reads until `stop` returns true on the received text, or the peer closes.
  std::string read_until(const std::function<bool(const std::string&)>& stop) {
    std::string got;
    char buf[4096];
    while (!stop(got)) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    return got;
  }
  // What is there now, without waiting (0 when nothing, -1 on close or error).
  ssize_t read_some(char* buf, std::size_t size) {
    ssize_t n = ::recv(fd_, buf, size, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return n == 0 ? -1 : n;
  }
  // Something to read (or the peer closed), without waiting.
  bool readable() {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  // Waits up to `within` for the peer to close, discarding what it sends meanwhile.
  bool wait_closed(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    }
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Child processes of `parent` whose command line contains `needle`.
inline std::vector<pid_t> child_processes(pid_t parent, const std::string& needle) {
  std::vector<pid_t> out;
  // Children of any of the parent's threads (workers are spawned by loader threads).
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(parent) + "/task")) {
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;) {
      std::string cmdline = read_all("/proc/" + std::to_string(child) + "/cmdline");
      for (char& c : cmdline)
        if (c == '\0') c = ' ';
      if (cmdline.find(needle) != std::string::npos) out.push_back(child);
    }
  }
  return out;
}

inline std::string http_post_text(const std::string& path, const std::string& body, const std::string& extra_headers = {}) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n" + extra_headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A counter's value in Prometheus text (sum over every series matching the prefix), 0 when absent.
inline double metric_sum(const std::string& text, const std::string& series_prefix) {
  double total = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.rfind(series_prefix, 0) != 0) continue;
    auto space = line.rfind(' ');
    total += std::stod(line.substr(space + 1));
  }
  return total;
}

}  // namespace neuron::server::testing_support
