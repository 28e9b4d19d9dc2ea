#pragma once
// A Hugging Face hub on loopback for the hub client's tests: the API revision
// route, the resolve routes with the hub's headers (X-Repo-Commit, ETag,
// X-Linked-Etag, X-Linked-Size), LFS files (*.safetensors, *.gguf) answered
// with a 302 to a second server (the "CDN", another origin, so the token must
// not follow), and the hub's errors (404 RepoNotFound, 401 GatedRepo, 401 for
// a missing token). Faults on demand: the CDN drops the connection part way
// through a file, serves a corrupted byte, or serves slowly. Every request is
// recorded (method, path, Range, Authorization).
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "util/sha256.hpp"

namespace neuron::test_support {

class TestHub {
 public:
  struct Repo {
    std::string commit;                         // 40 hex; "main" resolves to it
    std::map<std::string, std::string> files;   // name -> content
    bool gated = false;                         // resolve answers 401 GatedRepo
  };
  struct Seen {
    std::string method, path, range, authorization;
    bool cdn = false;
  };

  TestHub() {
    routes();
    hub_port_ = hub_.bind_to_any_port("127.0.0.1");
    cdn_port_ = cdn_.bind_to_any_port("127.0.0.1");
    if (hub_port_ <= 0 || cdn_port_ <= 0) throw std::runtime_error("test hub: cannot bind");
    hub_thread_ = std::thread([this] { hub_.listen_after_bind(); });
    cdn_thread_ = std::thread([this] { cdn_.listen_after_bind(); });
    while (!hub_.is_running() || !cdn_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~TestHub() { stop(); }
  TestHub(const TestHub&) = delete;
  TestHub& operator=(const TestHub&) = delete;

  void stop() {
    hub_.stop();
    cdn_.stop();
    if (hub_thread_.joinable()) hub_thread_.join();
    if (cdn_thread_.joinable()) cdn_thread_.join();
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_port_); }

  void add_repo(const std::string& name, Repo repo) {
    std::lock_guard lock(mu_);
    for (const auto& [file, content] : repo.files) {
      Sha256 h;
      h.update(content);
      blobs_[h.hex_digest()] = content;
    }
    repos_[name] = std::move(repo);
  }
  // Every regular file of `dir` (not recursive) as a repository.
  void add_model_dir(const std::string& name, const std::filesystem::path& dir, const std::string& commit) {
    Repo repo;
    repo.commit = commit;
    for (const auto& f : std::filesystem::directory_iterator(dir)) {
      if (!f.is_regular_file()) continue;
      std::ifstream in(f.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      repo.files[f.path().filename().string()] = ss.str();
    }
    add_repo(name, std::move(repo));
  }

  std::vector<Seen> requests() const {
    std::lock_guard lock(mu_);
    return seen_;
  }
  void clear_requests() {
    std::lock_guard lock(mu_);
    seen_.clear();
  }

  std::string token;                         // non-empty: the hub answers 401 without "Bearer <token>"
  std::atomic<std::int64_t> drop_after{-1};  // the CDN closes the connection after this many body bytes, once
  std::atomic<bool> corrupt{false};          // the CDN flips the first byte of every file it serves
  std::atomic<int> chunk_delay_ms{0};        // the CDN sleeps this long per 64 KiB
  std::atomic<int> api_calls{0};

 private:
  static constexpr std::size_t kChunk = 64 << 10;

  static bool is_lfs(const std::string& file) { return file.ends_with(".safetensors") || file.ends_with(".gguf"); }
  // A stand-in for the git blob id of a small file: any stable 40-hex word will do.
  static std::string git_etag(const std::string& content) {
    Sha256 h;
    h.update("blob " + content);
    return h.hex_digest().substr(0, 40);
  }

  void record(const httplib::Request& req, bool cdn) {
    std::lock_guard lock(mu_);
    seen_.push_back({req.method, req.path, req.get_header_value("Range"), req.get_header_value("Authorization"), cdn});
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (token.empty() || req.get_header_value("Authorization") == "Bearer " + token) return true;
    res.status = 401;
    res.set_content("Invalid credentials in Authorization header", "text/plain");
    return false;
  }

  const Repo* find(const std::string& name, httplib::Response& res) {
    auto it = repos_.find(name);
    if (it != repos_.end()) return &it->second;
    res.status = 404;
    res.set_header("X-Error-Code", "RepoNotFound");
    res.set_content(R"({"error":"Repository not found"})", "application/json");
    return nullptr;
  }

  void routes() {
    hub_.Get(R"(/api/models/([^/]+)/([^/]+)/revision/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      record(req, false);
      ++api_calls;
      if (!authorized(req, res)) return;
      std::lock_guard lock(mu_);
      const Repo* repo = find(std::string(req.matches[1]) + "/" + std::string(req.matches[2]), res);
      if (repo == nullptr) return;
      const std::string rev = req.matches[3];
      if (rev != "main" && rev != repo->commit) {
        res.status = 404;
        res.set_header("X-Error-Code", "RevisionNotFound");
        return;
      }
      nlohmann::json siblings = nlohmann::json::array();
      for (const auto& [file, content] : repo->files) siblings.push_back({{"rfilename", file}});
      nlohmann::json j = {{"id", std::string(req.matches[1]) + "/" + std::string(req.matches[2])},
                          {"sha", repo->commit},
                          {"siblings", siblings}};
      if (repo->gated) j["gated"] = "manual";
      res.set_content(j.dump(), "application/json");
    });
    hub_.Get(R"(/([^/]+)/([^/]+)/resolve/([^/]+)/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      record(req, false);
      if (!authorized(req, res)) return;
      std::lock_guard lock(mu_);
      const Repo* repo = find(std::string(req.matches[1]) + "/" + std::string(req.matches[2]), res);
      if (repo == nullptr) return;
      if (repo->gated) {
        res.status = 401;
        res.set_header("X-Error-Code", "GatedRepo");
        res.set_header("X-Error-Message", "Access to this model is restricted.");
        return;
      }
      const std::string rev = req.matches[3];
      auto file = repo->files.find(req.matches[4]);
      if ((rev != "main" && rev != repo->commit) || file == repo->files.end()) {
        res.status = 404;
        res.set_header("X-Error-Code", rev != "main" && rev != repo->commit ? "RevisionNotFound" : "EntryNotFound");
        return;
      }
      res.set_header("X-Repo-Commit", repo->commit);
      if (is_lfs(file->first)) {
        Sha256 h;
        h.update(file->second);
        const std::string sha = h.hex_digest();
        res.status = 302;
        res.set_header("ETag", "\"" + sha + "\"");
        res.set_header("X-Linked-Etag", "\"" + sha + "\"");
        res.set_header("X-Linked-Size", std::to_string(file->second.size()));
        res.set_header("Location", "http://127.0.0.1:" + std::to_string(cdn_port_) + "/cdn/" + sha);
        return;
      }
      res.set_header("ETag", "\"" + git_etag(file->second) + "\"");
      res.set_content(file->second, "application/octet-stream");
    });
    cdn_.Get(R"(/cdn/([0-9a-f]{64}))", [this](const httplib::Request& req, httplib::Response& res) {
      record(req, true);
      std::string content;
      {
        std::lock_guard lock(mu_);
        auto it = blobs_.find(req.matches[1]);
        if (it == blobs_.end()) {
          res.status = 404;
          return;
        }
        content = it->second;
      }
      if (corrupt && !content.empty()) content[0] = static_cast<char>(content[0] ^ 0x5a);
      const std::int64_t drop = drop_after.exchange(-1);
      auto body = std::make_shared<std::string>(std::move(content));
      res.set_content_provider(body->size(), "application/octet-stream",
                               [this, body, drop, sent = std::int64_t{0}](std::size_t offset, std::size_t length,
                                                                          httplib::DataSink& sink) mutable {
                                 std::size_t n = std::min(length, kChunk);
                                 if (drop >= 0 && sent + static_cast<std::int64_t>(n) > drop) {
                                   n = static_cast<std::size_t>(drop - sent);
                                   if (n > 0) sink.write(body->data() + offset, n);
                                   return false;  // closes the connection mid-body
                                 }
                                 if (const int ms = chunk_delay_ms; ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
                                 sent += static_cast<std::int64_t>(n);
                                 return sink.write(body->data() + offset, n);
                               });
    });
  }

  httplib::Server hub_, cdn_;
  int hub_port_ = 0, cdn_port_ = 0;
  std::thread hub_thread_, cdn_thread_;
  mutable std::mutex mu_;
  std::map<std::string, Repo> repos_;
  std::map<std::string, std::string> blobs_;  // sha256 -> content, for the CDN
  std::vector<Seen> seen_;
};

}  // namespace neuron::test_support
