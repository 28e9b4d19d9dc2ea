#include "io/hub_download.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "util/error.hpp"
#include "util/sha256.hpp"

namespace neuron::io {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(int err) { return std::strerror(err); }

// An open file descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// flock on a lock file: one writer per blob, across threads and processes
// (huggingface_hub locks the same path). Waits, polling `cancelled`.
class BlobLock {
 public:
  BlobLock(const fs::path& path, const std::function<bool()>& cancelled)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_.get() < 0) fail(errc::io, "cannot open lock file " + path.string() + ": " + errno_text(errno));
    while (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) fail(errc::io, "cannot lock " + path.string() + ": " + errno_text(errno));
      if (cancelled && cancelled()) fail(errc::cancelled, "cancelled while waiting for " + path.string());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }  // the lock goes with the descriptor

 private:
  Fd fd_;
};

// A name next to `path` no other writer uses (process and counter), for write-then-rename.
fs::path temp_sibling(const fs::path& path) {
  static std::atomic<std::uint64_t> counter{0};
  return path.parent_path() /
         ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
}

std::int64_t file_size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  return ec ? 0 : static_cast<std::int64_t>(size);
}

// Shared by the download threads: totals, the throttled callback and the log.
class Progress {
 public:
  Progress(std::string repo, const ProgressFn& fn, std::int64_t bytes_total, std::int64_t files_total)
      : repo_(std::move(repo)), fn_(fn) {
    state_.bytes_total = bytes_total;
    state_.files_total = files_total;
  }
  void add_bytes(std::int64_t delta) { report(delta, 0, false); }
  void file_done() { report(0, 1, true); }
  void finish() { report(0, 0, true); }

 private:
  void report(std::int64_t bytes, std::int64_t files, bool force) {
    std::lock_guard lock(mu_);
    state_.bytes_done += bytes;
    state_.files_done += files;
    const auto now = Clock::now();
    if (fn_ && (force || now - last_call_ >= std::chrono::milliseconds(100))) {
      last_call_ = now;
      fn_(state_);
    }
    if (force || now - last_log_ >= std::chrono::seconds(5)) {
      last_log_ = now;
      spdlog::info("downloading {}: {} of {}, {} of {} files", repo_, format_bytes(state_.bytes_done),
                   format_bytes(state_.bytes_total), state_.files_done, state_.files_total);
    }
  }
  std::string repo_;
  const ProgressFn& fn_;
  std::mutex mu_;
  TransferProgress state_;
  Clock::time_point last_call_{}, last_log_{Clock::now()};
};

void write_all(int fd, std::span<const char> data, const fs::path& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(errc::io, "cannot write " + path.string() + ": " + errno_text(errno));
    data = data.subspan(static_cast<std::size_t>(n));
  }
}

// Feeds the first `bytes` of `path` to `hash` (a resumed download's existing part).
void hash_prefix(const fs::path& path, std::int64_t bytes, Sha256& hash) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (bytes > 0 && in) {
    in.read(buf.data(), static_cast<std::streamsize>(std::min<std::int64_t>(bytes, buf.size())));
    const auto got = in.gcount();
    if (got <= 0) break;
    hash.update(std::string_view(buf.data(), static_cast<std::size_t>(got)));
    bytes -= got;
  }
  if (bytes != 0) fail(errc::io, "cannot read " + path.string());
}

class Downloader {
 public:
  Downloader(const HubClient& hub, const RepoRevision& rev, const std::function<bool()>& cancelled)
      : hub_(hub), rev_(rev), external_cancel_(cancelled) {
    const fs::path cache = hub.options().cache_dir();
    repo_dir_ = cache / rev.id.cache_folder();
    locks_dir_ = cache / ".locks" / rev.id.cache_folder();
    std::error_code ec;
    for (const auto& d : {repo_dir_ / "blobs", repo_dir_ / "snapshots", repo_dir_ / "refs", locks_dir_}) {
      fs::create_directories(d, ec);
      if (ec) fail(errc::io, "cannot create " + d.string() + ": " + ec.message());
    }
    cancelled_ = [this] { return stop_.load() || (external_cancel_ && external_cancel_()); };
  }

  fs::path run(const std::vector<std::string>& files, const ProgressFn& fn) {
    HttpSession session;
    std::vector<FileMeta> metas;
    std::int64_t total = 0, missing = 0;
    for (const auto& f : files) {
      metas.push_back(hub_.file_meta(session, rev_, f, cancelled_));
      total += metas.back().size;
      const fs::path blob = blob_path(metas.back());
      if (file_size_or_zero(blob) != metas.back().size) missing += metas.back().size - file_size_or_zero(part_path(blob));
    }
    check_disk_space(missing);
    Progress progress(rev_.id.repo(), fn, total, static_cast<std::int64_t>(metas.size()));
    progress.finish();  // the totals, before the first byte

    std::atomic<std::size_t> next{0};
    std::exception_ptr first_error;
    std::mutex error_mu;
    const auto worker = [&] {
      try {
        HttpSession own;
        for (std::size_t i = next++; i < metas.size() && !stop_; i = next++) {
          fetch_blob(own, metas[i], progress);
          progress.file_done();
        }
      } catch (...) {
        std::lock_guard lock(error_mu);
        if (!first_error) first_error = std::current_exception();
        stop_ = true;  // the other files stop too
      }
    };
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(hub_.options().parallel_downloads), metas.size());
    std::vector<std::thread> pool;
    try {
      for (std::size_t i = 1; i < n; ++i) pool.emplace_back(worker);
    } catch (const std::system_error&) {
      // Fewer threads than asked: the ones running (and this one) take every file.
    }
    worker();
    for (auto& t : pool) t.join();
    if (first_error) std::rethrow_exception(first_error);
    return publish(metas);
  }

 private:
  fs::path blob_path(const FileMeta& m) const { return repo_dir_ / "blobs" / m.etag; }
  static fs::path part_path(const fs::path& blob) { return fs::path(blob.string() + ".incomplete"); }

  void check_disk_space(std::int64_t needed) const {
    struct statvfs st {};
    if (::statvfs((repo_dir_ / "blobs").c_str(), &st) != 0) return;  // cannot tell: the writes will say
    const auto free_bytes = static_cast<std::int64_t>(st.f_bavail) * static_cast<std::int64_t>(st.f_frsize);
    if (needed > free_bytes)
      fail(errc::io, "not enough disk space for '" + rev_.id.repo() + "': " + format_bytes(needed) + " to download, " +
                         format_bytes(free_bytes) + " free in " + repo_dir_.string());
  }

  void fetch_blob(HttpSession& session, const FileMeta& meta, Progress& progress) {
    const fs::path blob = blob_path(meta);
    const BlobLock lock(locks_dir_ / (meta.etag + ".lock"), cancelled_);
    if (fs::exists(blob)) {
      if (file_size_or_zero(blob) == meta.size) {
        progress.add_bytes(meta.size);
        return;
      }
      fs::remove(blob);  // not what the hub has now: fetch it again
    }
    const fs::path part = part_path(blob);
    std::int64_t counted = 0;  // bytes of this file reported to progress so far
    for (int attempt = 1;; ++attempt) {
      try {
        download_part(session, meta, part, progress, counted);
        break;
      } catch (const Error& e) {
        if (e.kind() != errc::unavailable || attempt >= hub_.options().attempts || cancelled_()) throw;
        spdlog::warn("{}: {}; resuming (attempt {} of {})", meta.name, e.what(), attempt + 1, hub_.options().attempts);
        std::this_thread::sleep_for(std::chrono::milliseconds(200 * attempt));
      }
    }
    std::error_code ec;
    fs::rename(part, blob, ec);
    if (ec) fail(errc::io, "cannot rename " + part.string() + ": " + ec.message());
  }

  // One attempt at completing `part`: resumes from its size, verifies size and sha256.
  void download_part(HttpSession& session, const FileMeta& meta, const fs::path& part, Progress& progress,
                     std::int64_t& counted) {
    std::int64_t have = file_size_or_zero(part);
    if (have > meta.size) {
      fs::remove(part);
      have = 0;
    }
    Sha256 hash;
    if (meta.sha256 && have > 0) hash_prefix(part, have, hash);
    progress.add_bytes(have - counted);
    counted = have;
    {
      const Fd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
      if (fd.get() < 0) fail(errc::io, "cannot open " + part.string() + ": " + errno_text(errno));
      if (have < meta.size) {
        bool first = true, overflow = false;
        const BodySink sink = [&](long status, std::span<const char> chunk) {
          if (first && status != 206 && have > 0) {  // the range was ignored: the whole file comes
            if (::ftruncate(fd.get(), 0) != 0) fail(errc::io, "cannot truncate " + part.string() + ": " + errno_text(errno));
            progress.add_bytes(-have);
            counted -= have;
            have = 0;
            hash = Sha256();
          }
          first = false;
          if (have + static_cast<std::int64_t>(chunk.size()) > meta.size) {
            overflow = true;
            return false;
          }
          write_all(fd.get(), chunk, part);
          if (meta.sha256) hash.update(std::string_view(chunk.data(), chunk.size()));
          have += static_cast<std::int64_t>(chunk.size());
          counted += static_cast<std::int64_t>(chunk.size());
          progress.add_bytes(static_cast<std::int64_t>(chunk.size()));
          return true;
        };
        try {
          hub_.fetch(session, rev_, meta.name, have, sink, cancelled_);
        } catch (const Error&) {
          if (!overflow) throw;
          fs::remove(part);
          fail(errc::checksum_mismatch, "'" + rev_.id.repo() + "' file " + meta.name + ": the hub sent more than the " +
                                            std::to_string(meta.size) + " bytes it announced");
        }
        if (::fsync(fd.get()) != 0) fail(errc::io, "cannot sync " + part.string() + ": " + errno_text(errno));
      }
    }
    const std::int64_t got = file_size_or_zero(part);
    if (got != meta.size)
      fail(errc::unavailable, "'" + rev_.id.repo() + "' file " + meta.name + ": the transfer ended after " +
                                  std::to_string(got) + " of " + std::to_string(meta.size) + " bytes");
    if (meta.sha256) {
      const std::string digest = hash.hex_digest();
      if (digest != meta.etag) {
        fs::remove(part);
        fail(errc::checksum_mismatch, "'" + rev_.id.repo() + "' file " + meta.name + ": sha256 " + digest +
                                          " is not the hub's " + meta.etag + " (the partial file was removed)");
      }
    }
  }

  // Atomically (create under a temporary name, rename over) makes `link` point at `target`.
  static void replace_symlink(const fs::path& target, const fs::path& link) {
    std::error_code ec;
    fs::create_directories(link.parent_path(), ec);
    const fs::path tmp = temp_sibling(link);
    fs::create_symlink(target, tmp, ec);
    if (!ec) fs::rename(tmp, link, ec);
    if (ec) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      fail(errc::io, "cannot link " + link.string() + ": " + ec.message());
    }
  }

  fs::path publish(std::vector<FileMeta> metas) const {
    // config.json last: a snapshot directory that has one is complete.
    std::stable_partition(metas.begin(), metas.end(), [](const FileMeta& m) { return m.name != "config.json"; });
    const fs::path snapshot = repo_dir_ / "snapshots" / rev_.commit;
    for (const auto& m : metas) {
      std::string up = "../../";
      for (char c : m.name)
        if (c == '/') up += "../";
      replace_symlink(fs::path(up + "blobs/" + m.etag), snapshot / m.name);
    }
    if (rev_.id.revision != rev_.commit) {
      const fs::path ref = repo_dir_ / "refs" / rev_.id.revision;
      std::error_code ec;
      fs::create_directories(ref.parent_path(), ec);
      const fs::path tmp = temp_sibling(ref);
      {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << rev_.commit;
        if (!out.flush()) fail(errc::io, "cannot write " + tmp.string());
      }
      fs::rename(tmp, ref, ec);
      if (ec) fail(errc::io, "cannot write " + ref.string() + ": " + ec.message());
    }
    spdlog::info("downloaded {}@{} (commit {}) into {}", rev_.id.repo(), rev_.id.revision, rev_.commit, snapshot.string());
    return snapshot;
  }

  const HubClient& hub_;
  const RepoRevision& rev_;
  std::function<bool()> external_cancel_;
  std::function<bool()> cancelled_;
  std::atomic<bool> stop_{false};
  fs::path repo_dir_, locks_dir_;
};

}  // namespace

fs::path download_snapshot(const HubClient& hub, const RepoRevision& rev, const std::vector<std::string>& files,
                           const ProgressFn& progress, const std::function<bool()>& cancelled) {
  if (hub.options().offline) fail(errc::not_found, "'" + rev.id.repo() + "' is not in the cache and HF_HUB_OFFLINE is set");
  Downloader d(hub, rev, cancelled);
  return d.run(files, progress);
}

fs::path pull_model(std::string_view ref, const std::optional<std::string>& quant, const HubClient& hub,
                    const ProgressFn& progress, const std::function<bool()>& cancelled) {
  const HfModelId id = parse_hf_model_id(ref);
  if (hub.options().offline) {
    ResolveOptions opts;
    opts.hf_hub_cache = hub.options().cache_dir();
    opts.allow_directories = false;
    try {
      return resolve_model(ref, opts);
    } catch (const Error& e) {
      if (e.kind() != errc::not_found) throw;
      fail(errc::not_found, std::string(e.what()) + "; HF_HUB_OFFLINE is set, so nothing is downloaded");
    }
  }
  const RepoRevision rev = hub.revision(id, cancelled);
  return download_snapshot(hub, rev, select_model_files(rev, quant), progress, cancelled);
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::abs(v) >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace neuron::io
