#include "engine/registry.hpp"

#include <atomic>
#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <spdlog/spdlog.h>

#include "engine/model_assets.hpp"
#include "engine/model_loader.hpp"
#include "io/hub_download.hpp"
#include "io/model_resolver.hpp"
#include "model/shard.hpp"
#include "util/error.hpp"
#include "util/retry_later.hpp"

namespace neuron::engine {

namespace {
// A step's token budget when none is configured: a GPU runs large prefill chunks in
// about the time of a decode step; on the CPU a chunk delays every running decode.
constexpr std::int32_t kDefaultGpuBatchTokens = 8192;
constexpr std::int32_t kDefaultCpuBatchTokens = 512;
}  // namespace

std::string_view to_string(ModelStatus s) noexcept {
  switch (s) {
    case ModelStatus::loading: return "loading";
    case ModelStatus::loaded: return "loaded";
    case ModelStatus::failed: return "failed";
    case ModelStatus::reloading: return "reloading";
  }
  return "unknown";
}

namespace {

constexpr std::size_t kMaxModelIdLength = 1024;

using Clock = std::chrono::steady_clock;

// glibc raises its mmap and trim thresholds (up to 32 and 64 MiB) each time a
// large mmapped block is freed. After that, weights land inside per-thread
// arena heaps whose free top malloc_trim() does not release, and an unloaded
// model's memory stays resident. Fixed thresholds keep big buffers mmapped
// (munmap gives them back) and keep arena tops trimmed.
void pin_malloc_thresholds() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 8 << 20);
    mallopt(M_TRIM_THRESHOLD, 8 << 20);
  });
#endif
}

void validate_model_id(const std::string& id, bool allow_any_directory) {
  if (id.empty()) fail(errc::invalid_argument, "model_id is empty");
  if (id.size() > kMaxModelIdLength) {
    fail(errc::invalid_argument, "model_id is " + std::to_string(id.size()) + " bytes long; the limit is " +
                                     std::to_string(kMaxModelIdLength));
  }
  for (unsigned char c : id) {
    if (c < 0x20 || c == 0x7f) fail(errc::invalid_argument, "model_id contains a control character");
  }
  if (!allow_any_directory) {
    // Refused before anything touches the file system: ".." can only be used to walk out of the roots.
    std::size_t begin = 0;
    while (begin <= id.size()) {
      std::size_t end = id.find_first_of("/\\", begin);
      if (end == std::string::npos) end = id.size();
      if (id.compare(begin, end - begin, "..") == 0) {
        fail(errc::invalid_argument, "model_id '" + id + "' contains a '..' path component");
      }
      begin = end + 1;
    }
  }
}

// The model directory of `id`, within what the options allow.
std::filesystem::path resolve(const std::string& id, const RegistryOptions& options, const std::string& gguf_quant) {
  io::ResolveOptions resolve;
  if (options.hub) resolve.hf_hub_cache = options.hub->cache_dir();  // the cache downloads go to
  resolve.gguf_quant = gguf_quant;
  if (!options.allow_any_directory) {
    if (options.model_roots.empty()) {
      // No roots configured: only Hugging Face cache ids, never a directory.
      std::error_code ec;
      if (std::filesystem::exists(id, ec)) {
        fail(errc::invalid_argument, "model_id '" + id + "' names a directory; this server loads only cached model ids");
      }
      return io::resolve_model(id, resolve);
    }
    resolve.allowed_roots = options.model_roots;
  }
  return io::resolve_model(id, resolve);
}

// `id` could not be resolved (`missing`). With a hub configured and online, a
// Hugging Face id is looked up there (one API call, so a repository that does
// not exist or cannot be used is refused now) and the revision to download is
// returned; otherwise `missing` is rethrown.
io::RepoRevision hub_revision(const std::string& id, const RegistryOptions& options, const Error& missing) {
  if (missing.kind() != errc::not_found || !options.hub || options.hub->offline) throw missing;
  io::HfModelId hf;
  try {
    hf = io::parse_hf_model_id(id);
  } catch (const Error&) {
    throw missing;  // a missing directory, not a hub id
  }
  const io::HubClient hub(*options.hub);
  io::RepoRevision rev = hub.revision(hf);
  io::select_model_files(rev, std::nullopt);  // no config.json or weights there: not_found now
  io::HttpSession session;
  hub.file_meta(session, rev, "config.json");  // a gated repository lists its files but refuses them
  return rev;
}

// A LoadedHandle: Single or Tp is only the runner behind the engine, so every
// route treats both alike.
struct Entry {
  ModelInfo info;
  LoadOptions load;                            // how to load it (again)
  EngineOptions engine_options;                // on_failed bound to this entry
  std::shared_ptr<Engine> engine;              // set when loaded
  std::shared_ptr<const ModelAssets> assets;  // set when loaded
  std::thread loader;                          // the background load, later the reload loop; joined by whoever removes the entry
  bool unloading = false;                      // unload() is draining it: no new lookups, no more reloads
  std::optional<Clock::time_point> loaded_at;  // when the current (or last) engine started serving
  std::atomic<int> leases{0};                  // engine() leases held now (requests using it)
  std::atomic<Clock::rep> last_used{0};        // when the last lease ended (or the load did), steady ticks
  std::optional<io::RepoRevision> download;    // not in the cache: fetched from the hub before loading
  std::atomic<bool> cancel{false};             // ~Registry: an ongoing download stops
};

// Wakes the idle reaper: a lease ended, a load ended, or the registry is closing.
struct Waker {
  std::mutex mu;
  std::condition_variable cv;
  bool poked = false;
  bool stop = false;
  void poke() {
    {
      std::lock_guard lock(mu);
      poked = true;
    }
    cv.notify_one();
  }
};

// What engine() hands out: the engine plus the use it stands for. The last
// copy dropped ends the use: the model's idle time starts.
struct Lease {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<Entry> entry;
  std::shared_ptr<Waker> waker;
  Lease(std::shared_ptr<Engine> e, std::shared_ptr<Entry> en, std::shared_ptr<Waker> w)
      : engine(std::move(e)), entry(std::move(en)), waker(std::move(w)) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() {
    entry->last_used.store(Clock::now().time_since_epoch().count());
    entry->leases.fetch_sub(1);
    waker->poke();
  }
};

Clock::time_point from_ticks(Clock::rep ticks) { return Clock::time_point(Clock::duration(ticks)); }

// The entry's info with its use now (leases and idle time live outside info).
ModelInfo snapshot(const Entry& entry) {
  ModelInfo info = entry.info;
  info.active = entry.leases.load();
  if (info.status == ModelStatus::loaded && info.active == 0) info.idle_since = from_ticks(entry.last_used.load());
  return info;
}

// A relative id that names a model folder under one of the roots (and not a
// path from the working directory): that folder. Otherwise the id as given.
std::string find_under_roots(const std::string& id, const std::vector<std::filesystem::path>& roots) {
  std::error_code ec;
  if (id.empty() || id.front() == '/' || std::filesystem::exists(id, ec)) return id;
  for (const auto& root : roots) {
    const std::filesystem::path candidate = root / id;
    if (std::filesystem::is_regular_file(candidate / "config.json", ec)) return candidate.string();
  }
  return id;
}

// ModelInfo::name: the id a client loaded it by, unless that is a path.
// `requested` is the spec's id, `under_root` whether it named a folder under
// a model root, `id` the registry's key (a path's real path).
std::string public_name(const std::string& requested, bool under_root, const std::string& id) {
  if (!id.starts_with('/')) return requested;  // a Hugging Face id
  if (under_root) {
    std::string name = requested;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    return name;
  }
  return std::filesystem::path(id).filename().string();  // canonical: no trailing '/'
}

// A first load that failed: dropped (the reaper or the next load of its id
// removes it; until then nothing lists it).
bool failed_first_load(const Entry& entry) { return entry.info.status == ModelStatus::failed && !entry.loaded_at; }

std::int64_t seconds_until(Clock::time_point t) {
  return std::max<std::int64_t>(1, std::chrono::ceil<std::chrono::seconds>(t - Clock::now()).count());
}

// Why a model that is not loaded cannot serve: the error the routes answer with.
[[noreturn]] void throw_unavailable(const Entry& entry, const std::string& model_id, const ReloadPolicy& policy) {
  const ModelInfo& info = entry.info;
  const std::string why = info.error_kind + ": " + info.error_message;
  switch (info.status) {
    case ModelStatus::loading: fail(errc::loading, "model " + model_id + " is still loading");
    case ModelStatus::reloading:
      throw RetryLaterError(errc::model_failed,
                            "model " + model_id + " failed (" + why + "); reload attempt " +
                                std::to_string(info.reload_attempt) + " is running",
                            std::chrono::seconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(info.load_ms / 1000))));
    case ModelStatus::failed:
      if (!entry.loaded_at) fail(errc::model_failed, "model " + model_id + " failed to load (" + why + ")");
      if (info.next_reload) {
        const auto in_s = seconds_until(*info.next_reload);
        throw RetryLaterError(errc::model_failed,
                              "model " + model_id + " failed (" + why + "); reloading automatically, attempt " +
                                  std::to_string(info.reload_attempt) + " in " + std::to_string(in_s) + " s",
                              std::chrono::seconds(in_s));
      }
      throw RetryLaterError(errc::model_failed,
                            "model " + model_id + " failed (" + why +
                                "); automatic reload is off: unload it and load it again",
                            std::chrono::duration_cast<std::chrono::seconds>(policy.max_backoff));
    case ModelStatus::loaded: break;
  }
  NEURON_ASSERT(false);
  std::abort();
}

// The engine or the assets of a loaded model, or the error the routes answer with.
template <class T>
std::shared_ptr<T> loaded_member(const std::map<std::string, std::shared_ptr<Entry>>& entries,
                                 const std::string& model_id, std::shared_ptr<T> Entry::*member,
                                 const ReloadPolicy& policy) {
  auto it = entries.find(model_id);
  if (it == entries.end() || it->second->unloading || failed_first_load(*it->second))
    fail(errc::not_found, "model " + model_id + " is not loaded");
  const Entry& entry = *it->second;
  if (entry.info.status != ModelStatus::loaded) throw_unavailable(entry, model_id, policy);
  return entry.*member;
}

// The delay before reload attempt `attempt` (1-based): first_backoff, doubling, capped.
std::chrono::milliseconds backoff(const ReloadPolicy& policy, int attempt) {
  auto delay = policy.first_backoff;
  for (int i = 1; i < attempt && delay < policy.max_backoff; ++i) delay *= 2;
  return std::min(delay, policy.max_backoff);
}

}  // namespace

struct Registry::State {
  RegistryOptions options;
  mutable std::mutex mu;
  std::mutex build_mu;                // one load (or reload) builds at a time
  std::shared_ptr<Waker> waker = std::make_shared<Waker>();
  std::thread reaper;                 // idle unload
  std::condition_variable load_cv;    // a load finished
  std::condition_variable reload_cv;  // an entry is being unloaded: its backoff wait ends
  std::map<std::string, std::shared_ptr<Entry>> entries;

  struct Built {
    std::shared_ptr<Engine> engine;  // null on failure
    std::shared_ptr<const ModelAssets> assets;
    std::string kind, message;       // on failure
    double ms = 0;
  };
  static Built build(const LoadOptions& load, const EngineOptions& engine_options);
  // Downloads entry->download into the cache and checks the model as load() checks a cached one;
  // returns the model directory. Progress goes to entry->info.download.
  std::filesystem::path fetch_from_hub(Entry* entry, const LoadOptions& load, const io::RepoRevision& rev);
  // The quantize-at-load type of a downloaded model (its spec's quant, as quantize_for reads it).
  std::optional<quant::GgmlType> downloaded_quantize(Entry* entry, const std::filesystem::path& dir);
  void run_load(Entry* entry);
  // Engine::on_failed of `entry`'s engine (on its engine thread).
  void engine_failed(const std::weak_ptr<Entry>& entry, const std::string& kind, const std::string& message);
  // Under mu: counts the next attempt and sets when it runs.
  void schedule_reload(Entry& entry);
  // The reload loop on entry->loader: shuts `failed` down, then waits out the backoff and loads
  // until an attempt succeeds or the entry is unloaded.
  void run_reloads(Entry* entry, std::shared_ptr<Engine> failed);
  // Removes an entry already marked unloading and frees it (engine shut down, workers reaped).
  void remove(const std::string& model_id, const std::shared_ptr<Entry>& entry, std::shared_ptr<Engine> engine);
  // The reaper thread: unloads loaded models idle past their keep_alive.
  void run_reaper();
};

Registry::State::Built Registry::State::build(const LoadOptions& load, const EngineOptions& engine_options) {
  const auto started = Clock::now();
  Built out;
  try {
    // The tokenizer (~0.4 s of JSON for Qwen's 151k-entry vocabulary) loads
    // while the weights do. Its errors are reported first, as if sequential.
    auto pending_assets = std::async(std::launch::async, [dir = load.model_dir] { return load_model_assets(dir); });
    std::unique_ptr<backend::ModelRunner> runner;
    std::exception_ptr runner_error;
    try {
      runner = open_runner(load);
    } catch (...) {
      runner_error = std::current_exception();
    }
    ModelAssets assets = pending_assets.get();
    if (runner_error) std::rethrow_exception(runner_error);
    assets.task = resolve_task(load.model_dir, load.task, load.pooling, load.model_id);
    out.assets = std::make_shared<const ModelAssets>(std::move(assets));
    EngineOptions options = engine_options;
    if (options.max_batch_tokens <= 0)
      options.max_batch_tokens = load.device.is_cuda() ? kDefaultGpuBatchTokens : kDefaultCpuBatchTokens;
    out.engine = std::make_shared<Engine>(load.model_id, std::move(runner), out.assets->tokenizer, out.assets->configs,
                                          options);
  } catch (const Error& e) {
    out.kind = e.kind();
    out.message = e.what();
  } catch (const std::bad_alloc&) {
    out.kind = errc::out_of_memory;
    out.message = "out of memory while loading";
  } catch (const std::exception& e) {
    out.kind = errc::load_failed;
    out.message = e.what();
  }
  out.ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  if (!out.engine) {
    out.assets.reset();
#if defined(__GLIBC__)
    malloc_trim(0);  // a half-built runner's weights
#endif
  }
  return out;
}

std::filesystem::path Registry::State::fetch_from_hub(Entry* entry, const LoadOptions& load, const io::RepoRevision& rev) {
  const io::HubClient hub(*options.hub);
  const auto progress = [this, entry](const io::TransferProgress& p) {
    std::lock_guard lock(mu);
    entry->info.download = DownloadProgress{p.bytes_done, p.bytes_total, p.files_done, p.files_total};
  };
  const auto started = Clock::now();
  const std::filesystem::path dir = io::download_snapshot(hub, rev, io::select_model_files(rev, std::nullopt), progress,
                                                          [entry] { return entry->cancel.load(); });
  spdlog::info("model {} downloaded in {:.1f} s", load.model_id,
               std::chrono::duration<double>(Clock::now() - started).count());
  LoadOptions checked = load;
  checked.model_dir = dir;
  check_host_memory(plan_load(checked, model::load_model_configs(dir).model));
  return dir;
}

std::optional<quant::GgmlType> Registry::State::downloaded_quantize(Entry* entry, const std::filesystem::path& dir) {
  std::string quant;
  {
    std::lock_guard lock(mu);
    quant = entry->info.quant;
  }
  return quantize_for(dir, quant, false);
}

void Registry::State::run_load(Entry* entry) {
  LoadOptions load;
  EngineOptions engine_options;
  std::optional<io::RepoRevision> download;
  {
    std::lock_guard lock(mu);
    load = entry->load;
    engine_options = entry->engine_options;
    download = entry->download;
  }
  Built built;
  if (download) {  // before taking the build lock: a download does not hold other loads back
    try {
      load.model_dir = fetch_from_hub(entry, load, *download);
      load.quantize = downloaded_quantize(entry, load.model_dir);
      std::lock_guard lock(mu);
      entry->load.model_dir = load.model_dir;  // reloads use the snapshot
      entry->load.quantize = load.quantize;
      entry->info.path = load.model_dir;
      entry->download.reset();
    } catch (const Error& e) {
      built.kind = e.kind();
      built.message = e.what();
    } catch (const std::exception& e) {
      built.kind = errc::load_failed;
      built.message = e.what();
    }
  }
  std::unique_lock building(build_mu);  // queued until the load before this one ends
  {
    std::lock_guard lock(mu);
    entry->info.queued = false;
  }
  if (built.kind.empty()) built = build(load, engine_options);
  building.unlock();
  ModelInfo ended;
  {
    std::lock_guard lock(mu);
    entry->info.load_ms = built.ms;
    if (built.engine) {
      entry->info.status = ModelStatus::loaded;
      entry->info.max_context = built.engine->max_context();
      entry->info.memory = built.engine->memory();
      entry->info.download.reset();
      entry->engine = std::move(built.engine);
      entry->assets = std::move(built.assets);
      entry->loaded_at = Clock::now();
      entry->last_used.store(entry->loaded_at->time_since_epoch().count());
      spdlog::info("model {} loaded in {:.0f} ms ({} ranks)", load.model_id, built.ms, load.tensor_parallel);
    } else {
      entry->info.status = ModelStatus::failed;
      entry->info.error_kind = built.kind;
      entry->info.error_message = built.message;
      spdlog::error("model {} failed to load: {}: {}", load.model_id, built.kind, built.message);
    }
    ended = entry->info;
  }
  load_cv.notify_all();
  waker->poke();
  if (options.on_load_end) options.on_load_end(ended);
}

void Registry::State::schedule_reload(Entry& entry) {
  entry.info.reload_attempt += 1;
  const auto delay = backoff(options.reload, entry.info.reload_attempt);
  entry.info.next_reload = Clock::now() + delay;
  spdlog::warn("model {}: reload attempt {} in {} ms", entry.info.model_id, entry.info.reload_attempt, delay.count());
}

void Registry::State::engine_failed(const std::weak_ptr<Entry>& weak, const std::string& kind,
                                    const std::string& message) {
  const auto entry = weak.lock();
  if (!entry) return;
  std::lock_guard lock(mu);
  if (entry->unloading || entry->info.status != ModelStatus::loaded) return;
  entry->info.status = ModelStatus::failed;
  entry->info.error_kind = kind;
  entry->info.error_message = message;
  if (!options.reload.enabled) {
    spdlog::error("model {} failed ({}: {}); automatic reload is off: unload it and load it again",
                  entry->info.model_id, kind, message);
    return;
  }
  if (entry->loaded_at && Clock::now() - *entry->loaded_at >= options.reload.stable_after) entry->info.reload_attempt = 0;
  schedule_reload(*entry);
  // The thread that built this engine is done with the entry (it is loaded); the reload thread joins it.
  auto previous = std::make_shared<std::thread>(std::move(entry->loader));
  try {
    entry->loader = std::thread([this, raw = entry.get(), failed = entry->engine, previous]() mutable {
      if (previous->joinable()) previous->join();
      run_reloads(raw, std::move(failed));
    });
  } catch (const std::system_error& e) {
    entry->loader = std::move(*previous);
    entry->info.next_reload.reset();
    spdlog::error("model {}: cannot start the reload thread ({}); it stays failed", entry->info.model_id, e.what());
    return;
  }
  entry->engine.reset();  // the reload thread shuts it down
}

void Registry::State::run_reloads(Entry* entry, std::shared_ptr<Engine> failed) {
  // Off the engine's own thread now: join it, free its weights and KV cache, reap its TP workers.
  failed->shutdown();
  failed.reset();
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  for (;;) {
    LoadOptions load;
    EngineOptions engine_options;
    int attempt = 0;
    {
      std::unique_lock lock(mu);
      reload_cv.wait_until(lock, *entry->info.next_reload, [&] { return entry->unloading; });
      entry->info.next_reload.reset();
      if (entry->unloading) return;
      entry->info.status = ModelStatus::reloading;
      load = entry->load;
      engine_options = entry->engine_options;
      attempt = entry->info.reload_attempt;
    }
    spdlog::info("model {}: reload attempt {}", load.model_id, attempt);
    std::unique_lock building(build_mu);
    Built built = build(load, engine_options);
    building.unlock();
    std::shared_ptr<Engine> discard;
    {
      std::lock_guard lock(mu);
      if (entry->unloading) {
        discard = std::move(built.engine);
      } else if (built.engine) {
        entry->info.status = ModelStatus::loaded;
        entry->info.load_ms = built.ms;
        entry->info.max_context = built.engine->max_context();
        entry->info.memory = built.engine->memory();
        entry->info.error_kind.clear();
        entry->info.error_message.clear();
        entry->engine = std::move(built.engine);
        entry->assets = std::move(built.assets);
        entry->loaded_at = Clock::now();
        entry->last_used.store(entry->loaded_at->time_since_epoch().count());
        spdlog::info("model {} reloaded in {:.0f} ms (attempt {})", load.model_id, built.ms, attempt);
        return;  // from here the entry may fail again and pass to a new reload thread: touch nothing
      } else {
        entry->info.status = ModelStatus::failed;
        entry->info.error_kind = built.kind;
        entry->info.error_message = "reload attempt " + std::to_string(attempt) + " failed: " + built.message;
        spdlog::error("model {}: reload attempt {} failed: {}: {}", load.model_id, attempt, built.kind, built.message);
        schedule_reload(*entry);
        continue;
      }
    }
    if (discard) discard->shutdown();  // unloaded while this attempt ran
    return;
  }
}

void Registry::State::remove(const std::string& model_id, const std::shared_ptr<Entry>& entry,
                             std::shared_ptr<Engine> engine) {
  {
    std::lock_guard lock(mu);
    // A dropped failed load may have been replaced by a new load of its id meanwhile.
    if (auto it = entries.find(model_id); it != entries.end() && it->second == entry) entries.erase(it);
  }
  load_cv.notify_all();  // wait_loaded() on it ends
  // A reload attempt already running ends first (its engine is discarded); a failed engine is shut down by then.
  if (entry->loader.joinable()) entry->loader.join();
  // Frees weights and KV cache and reaps TP workers now, even if an HTTP thread
  // still holds the Engine while it finishes writing a response.
  if (engine) engine->shutdown();
  engine.reset();
  entry->engine.reset();
  entry->assets.reset();
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

void Registry::State::run_reaper() {
  // Checked again this soon when an engine is busy with no lease held (a request ending).
  constexpr auto kRecheck = std::chrono::milliseconds(100);
  constexpr auto kLongest = std::chrono::seconds(60);
  for (;;) {
    std::vector<std::pair<std::string, std::shared_ptr<Entry>>> expired;
    std::vector<std::shared_ptr<Engine>> engines;
    auto next = Clock::now() + kLongest;
    {
      std::lock_guard lock(mu);
      const auto now = Clock::now();
      for (const auto& [id, entry] : entries) {
        if (failed_first_load(*entry) && !entry->unloading) {  // leaves nothing behind (see registry.hpp)
          entry->unloading = true;
          expired.emplace_back(id, entry);
          engines.push_back(nullptr);
          continue;
        }
        if (entry->info.status != ModelStatus::loaded || entry->unloading || !entry->engine) continue;
        if (entry->info.keep_alive.count() < 0 || entry->leases.load() > 0) continue;
        if (!entry->engine->idle()) {
          next = std::min(next, now + kRecheck);
          continue;
        }
        const auto deadline = from_ticks(entry->last_used.load()) + entry->info.keep_alive;
        if (now < deadline) {
          next = std::min(next, deadline);
          continue;
        }
        // No lease is held and none can be taken from here on (engine() checks unloading under mu).
        entry->unloading = true;
        expired.emplace_back(id, entry);
        engines.push_back(entry->engine);
      }
    }
    for (std::size_t i = 0; i < expired.size(); ++i) {
      const auto& [id, entry] = expired[i];
      const bool idle = engines[i] != nullptr;
      remove(id, entry, std::move(engines[i]));
      if (idle) spdlog::info("model {} unloaded after {} ms idle (keep_alive)", id, entry->info.keep_alive.count());
    }
    std::unique_lock lock(waker->mu);
    waker->cv.wait_until(lock, next, [&] { return waker->poked || waker->stop; });
    if (waker->stop) return;
    waker->poked = false;
  }
}

Registry::Registry(RegistryOptions options) : state_(std::make_unique<State>()) {
  pin_malloc_thresholds();
  state_->options = std::move(options);
  if (state_->options.worker_binary.empty()) state_->options.worker_binary = "/proc/self/exe";
  state_->reaper = std::thread([s = state_.get()] { s->run_reaper(); });
}

Registry::~Registry() {
  {
    std::lock_guard lock(state_->waker->mu);
    state_->waker->stop = true;
  }
  state_->waker->cv.notify_one();
  state_->reaper.join();
  std::map<std::string, std::shared_ptr<Entry>> entries;
  {
    std::lock_guard lock(state_->mu);
    for (auto& [id, entry] : state_->entries) {
      entry->unloading = true;  // ends reload loops, ignores new failures
      entry->cancel = true;     // ends downloads
    }
    entries.swap(state_->entries);
  }
  state_->reload_cv.notify_all();
  for (auto& [id, entry] : entries) {
    // A load cannot be interrupted halfway through building a runner; let it end, then free it.
    if (entry->loader.joinable()) entry->loader.join();
    if (entry->engine) entry->engine->shutdown();
  }
}

ModelInfo Registry::load(const ModelSpec& spec, bool wait) {
  State& s = *state_;
  validate_model_id(spec.model_id, s.options.allow_any_directory);
  if (spec.tensor_parallel < 1 || spec.tensor_parallel > kMaxTensorParallel) {
    fail(errc::bad_tensor_parallel, "tensor_parallel must be between 1 and " + std::to_string(kMaxTensorParallel) +
                                        ", got " + std::to_string(spec.tensor_parallel));
  }
  // quant: none / bf16 (weights as bf16); a GGUF file's tag in a cached GGUF
  // repo ("Q4_K_M" picks Qwen3-0.6B-Q4_K_M.gguf); or, for a safetensors
  // model, a type to quantize to at load (q8_0, q4_k, q6_k; fp8 on CUDA).
  const std::string quant = spec.quant && *spec.quant != "none" && *spec.quant != "bf16" ? *spec.quant : std::string();
  if (quant.size() > 32 || !std::all_of(quant.begin(), quant.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      }))
    fail(errc::invalid_argument, "quant must be none, bf16, q8_0, q4_k, q6_k, fp8 or a GGUF file's quantization tag (such as Q4_K_M)");
  if (spec.max_context < 0) {
    fail(errc::invalid_argument, "max_context must be >= 0, got " + std::to_string(spec.max_context));
  }
  if (spec.served_name.size() > kMaxModelIdLength) fail(errc::invalid_argument, "served_name is too long");
  for (unsigned char c : spec.served_name)
    if (c < 0x20 || c == 0x7f) fail(errc::invalid_argument, "served_name contains a control character");
  // Every spelling of a directory ("/m/x/", "/m//x", "/m/./x", a symlink) is one model under one id.
  const std::string located = find_under_roots(spec.model_id, s.options.model_roots);
  const std::string id = io::canonical_model_ref(located);
  const std::string name = !spec.served_name.empty() ? spec.served_name : public_name(spec.model_id, located != spec.model_id, id);
  LoadOptions load;
  load.model_id = id;
  load.tensor_parallel = spec.tensor_parallel;
  load.expert_parallel = spec.expert_parallel;
  if (spec.device) {
    load.device = backend::Device::parse(*spec.device);
  } else if (!spec.devices.empty()) {
    load.device = backend::Device{backend::Device::Kind::cuda, spec.devices.front()};
  }
  if (!spec.devices.empty() && !load.device.is_cuda()) {
    fail(errc::invalid_argument, "devices lists CUDA ordinals but device is " + load.device.str());
  }
  load.devices = spec.devices;
  load.max_context = spec.max_context;
  load.task = spec.task;
  load.pooling = spec.pooling;
  load.kv_budget = s.options.kv_budget;
  load.state_snapshots = s.options.state_snapshots;
  load.step_timeout = s.options.step_timeout;
  load.worker_binary = s.options.worker_binary;
  std::vector<std::string> devices;
  for (const auto& d : rank_devices(load)) {  // validates the device list
    if (d.is_cuda() && d.index >= backend::cuda_device_count()) {
      fail(errc::invalid_argument, "device " + d.str() + " is not available: this host has " +
                                       std::to_string(backend::cuda_device_count()) + " CUDA devices" +
                                       (backend::cuda_available() ? "" : " (or this build has no CUDA support)"));
    }
    devices.push_back(d.str());
  }
  {
    std::lock_guard lock(s.mu);
    if (auto it = s.entries.find(id); it != s.entries.end() && !failed_first_load(*it->second))
      fail(errc::conflict, "model " + it->second->info.name + " is already loaded");
  }

  std::optional<io::RepoRevision> download;
  try {
    load.model_dir = resolve(id, s.options, quant);
  } catch (const Error& e) {
    download = hub_revision(id, s.options, e);  // rethrows `e` when the hub cannot help
  }
  if (!download) {
    load.quantize = quantize_for(load.model_dir, quant, id == load.model_dir.string());
    // Shape problems answer now, not from the background thread.
    const model::ModelConfigs configs = model::load_model_configs(load.model_dir);
    resolve_task(load.model_dir, load.task, load.pooling, id);  // a bad task or pooling answers now
    // Split, max_context, KV budget and host memory answer now (507 when it cannot fit).
    check_host_memory(plan_load(load, configs.model));
  }

  auto entry = std::make_shared<Entry>();
  entry->load = load;
  entry->engine_options = s.options.engine;
  entry->engine_options.on_failed = [&s, weak = std::weak_ptr<Entry>(entry)](const std::string& kind,
                                                                             const std::string& message) {
    s.engine_failed(weak, kind, message);
  };
  entry->info.model_id = id;
  entry->info.name = name;
  entry->info.status = ModelStatus::loading;
  entry->info.kind = spec.tensor_parallel > 1 ? "tp" : "single";
  entry->info.tensor_parallel = spec.tensor_parallel;
  entry->info.expert_parallel = spec.expert_parallel;
  entry->info.devices = std::move(devices);
  entry->info.max_context = spec.max_context;
  entry->info.path = load.model_dir;
  entry->download = download;
  if (download) entry->info.download = DownloadProgress{0, 0, 0, 0};
  entry->info.created = std::chrono::system_clock::now();
  entry->info.served_name = spec.served_name;
  entry->info.quant = spec.quant.value_or("");
  entry->info.keep_alive = spec.keep_alive.value_or(s.options.keep_alive);
  entry->info.queued = true;
  std::shared_ptr<Entry> dropped;  // a failed first load of this id, replaced here; its loader is joined below
  {
    std::lock_guard lock(s.mu);
    if (auto it = s.entries.find(id); it != s.entries.end()) {
      if (!failed_first_load(*it->second)) fail(errc::conflict, "model " + it->second->info.name + " is already loaded");
      if (!it->second->unloading) {  // else the reaper has it and joins it
        it->second->unloading = true;
        dropped = it->second;
      }
      s.entries.erase(it);
    }
    for (const auto& [other, e] : s.entries) {
      if (failed_first_load(*e)) continue;
      if (other == name || e->info.name == name || e->info.served_name == name)
        fail(errc::conflict, "the name '" + name + "' is already used by model " + e->info.name);
      // Another id for the same files ("org/name" and "org/name@main" share a snapshot).
      if (!load.model_dir.empty() && e->info.path == load.model_dir)
        fail(errc::conflict, "model " + name + " is already loaded as " + e->info.name);
    }
    s.entries.emplace(id, entry);
    // The entry cannot leave the map while loading (unload refuses it; ~Registry joins
    // first), so the thread may keep a plain pointer to it.
    try {
      entry->loader = std::thread([&s, raw = entry.get()] { s.run_load(raw); });
    } catch (const std::system_error& e) {  // no thread: the entry must not stay "loading" forever
      s.entries.erase(id);
      fail(errc::load_failed, std::string("cannot start the loader thread: ") + e.what());
    }
  }
  if (dropped && dropped->loader.joinable()) dropped->loader.join();  // it has ended: only its last notifications were left
  spdlog::info("loading model {} from {} (tensor_parallel {}, {})", id,
               download ? s.options.hub->endpoint + " (commit " + download->commit + ")" : load.model_dir.string(),
               spec.tensor_parallel, load.device.str());

  if (wait) return wait_loaded(id);
  std::lock_guard lock(s.mu);
  return entry->info;
}

ModelInfo Registry::wait_loaded(const std::string& model_id, std::optional<std::chrono::milliseconds> timeout) const {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  // The entry found first is followed even once it left the map: a first load
  // that failed is dropped right away, and its error is still the answer.
  std::shared_ptr<Entry> entry;
  bool gone = false;
  auto settled = [&] {
    auto it = s.entries.find(model_id);
    if (!entry) entry = it == s.entries.end() ? nullptr : it->second;
    gone = !entry || it == s.entries.end() || it->second != entry;
    return gone || entry->info.status != ModelStatus::loading;
  };
  if (timeout) s.load_cv.wait_for(lock, *timeout, settled);
  else s.load_cv.wait(lock, settled);
  if (entry && failed_first_load(*entry)) fail(entry->info.error_kind, entry->info.error_message);
  // Loaded, then unloaded before this thread looked (keep_alive 0): it loaded.
  if (gone && !(entry && entry->loaded_at)) fail(errc::not_found, "model " + model_id + " is not loaded");
  return snapshot(*entry);
}

void Registry::unload(const std::string& model_id, std::chrono::milliseconds drain) {
  State& s = *state_;
  std::shared_ptr<Entry> entry;
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard lock(s.mu);
    auto it = s.entries.find(model_id);
    if (it == s.entries.end() || failed_first_load(*it->second)) fail(errc::not_found, "model " + model_id + " is not loaded");
    entry = it->second;
    if (entry->info.status == ModelStatus::loading) fail(errc::busy, "model " + model_id + " is still loading");
    if (entry->unloading) fail(errc::busy, "model " + model_id + " is already being unloaded");
    entry->unloading = true;  // engine() stops handing it out; no reload starts or goes on
    engine = entry->engine;   // fixed from here: only a reload would replace it
  }
  s.reload_cv.notify_all();

  if (engine) {
    const auto deadline = Clock::now() + drain;
    while (!engine->idle() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!engine->idle() && !engine->stats().failed) {
      std::lock_guard lock(s.mu);
      entry->unloading = false;
      fail(errc::busy, "model " + model_id + " has requests in flight after waiting " + std::to_string(drain.count()) +
                           " ms; try again or cancel them");
    }
  }
  s.remove(model_id, entry, std::move(engine));
  spdlog::info("model {} unloaded", model_id);
}


std::vector<ModelInfo> Registry::list() const {
  std::lock_guard lock(state_->mu);
  std::vector<ModelInfo> out;
  for (const auto& [id, entry] : state_->entries)
    if (!failed_first_load(*entry)) out.push_back(snapshot(*entry));
  return out;
}

std::optional<ModelInfo> Registry::info(const std::string& model_id) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->entries.find(model_id);
  if (it == state_->entries.end() || failed_first_load(*it->second)) return std::nullopt;
  return snapshot(*it->second);
}

const std::vector<std::filesystem::path>& Registry::model_roots() const noexcept { return state_->options.model_roots; }

std::optional<std::filesystem::path> Registry::locate(const std::string& model_id) const {
  const RegistryOptions& o = state_->options;
  try {
    validate_model_id(model_id, o.allow_any_directory);
    return resolve(io::canonical_model_ref(find_under_roots(model_id, o.model_roots)), o, std::string());
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::shared_ptr<const Engine> Registry::peek(const std::string& model_id) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->entries.find(model_id);
  if (it == state_->entries.end() || it->second->unloading || it->second->info.status != ModelStatus::loaded) return nullptr;
  return it->second->engine;
}

std::shared_ptr<Engine> Registry::engine(const std::string& model_id) const {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard lock(state_->mu);
    engine = loaded_member(state_->entries, model_id, &Entry::engine, state_->options.reload);
    entry = state_->entries.at(model_id);
    entry->leases.fetch_add(1);  // under mu: the reaper sees it before it could pick this model
  }
  auto lease = std::make_shared<Lease>(std::move(engine), std::move(entry), state_->waker);
  const EngineStats stats = lease->engine->stats();
  if (stats.failed) {
    // Failed a moment ago; Engine::on_failed is about to mark the entry.
    throw RetryLaterError(errc::model_failed, "model " + model_id + " failed (" + stats.failure + ")",
                          std::chrono::ceil<std::chrono::seconds>(state_->options.reload.first_backoff));
  }
  Engine* raw = lease->engine.get();
  return std::shared_ptr<Engine>(std::move(lease), raw);
}

std::shared_ptr<const ModelAssets> Registry::assets(const std::string& model_id) const {
  std::lock_guard lock(state_->mu);
  return loaded_member(state_->entries, model_id, &Entry::assets, state_->options.reload);
}

}  // namespace neuron::engine
