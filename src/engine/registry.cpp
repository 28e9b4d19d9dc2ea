#include "engine/registry.hpp"

#include <condition_variable>
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
#include "io/model_resolver.hpp"
#include "model/shard.hpp"
#include "util/error.hpp"

namespace neuron::engine {

std::string_view to_string(ModelStatus s) noexcept {
  switch (s) {
    case ModelStatus::loading: return "loading";
    case ModelStatus::loaded: return "loaded";
    case ModelStatus::failed: return "failed";
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
std::filesystem::path resolve(const std::string& id, const RegistryOptions& options) {
  io::ResolveOptions resolve;
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

// A LoadedHandle: Single or Tp is only the runner behind the engine, so every
// route treats both alike.
struct Entry {
  ModelInfo info;
  std::shared_ptr<Engine> engine;              // set when loaded
  std::shared_ptr<const ModelAssets> assets;  // set when loaded
  std::thread loader;                          // the background load; joined by whoever removes the entry
  bool unloading = false;                      // unload() is draining it: no new lookups
};

// The engine or the assets of a loaded model, or the error the routes answer with.
template <class T>
std::shared_ptr<T> loaded_member(const std::map<std::string, std::shared_ptr<Entry>>& entries,
                                 const std::string& model_id, std::shared_ptr<T> Entry::*member) {
  auto it = entries.find(model_id);
  if (it == entries.end() || it->second->unloading) fail(errc::not_found, "model " + model_id + " is not loaded");
  const Entry& entry = *it->second;
  switch (entry.info.status) {
    case ModelStatus::loading: fail(errc::loading, "model " + model_id + " is still loading");
    case ModelStatus::failed:
      fail(errc::model_failed, "model " + model_id + " failed to load (" + entry.info.error_kind + ": " +
                                   entry.info.error_message + ")");
    case ModelStatus::loaded: break;
  }
  return entry.*member;
}

}  // namespace

struct Registry::State {
  RegistryOptions options;
  mutable std::mutex mu;
  std::condition_variable load_cv;  // a load finished
  std::map<std::string, std::shared_ptr<Entry>> entries;

  void run_load(Entry* entry, LoadOptions load);
  // A loaded model whose engine has failed since (a TP worker died) shows as failed.
  static void refresh(ModelInfo& info, const std::shared_ptr<Engine>& engine);
};

void Registry::State::refresh(ModelInfo& info, const std::shared_ptr<Engine>& engine) {
  if (info.status == ModelStatus::loaded && engine) {
    const EngineStats stats = engine->stats();
    if (stats.failed) {
      info.status = ModelStatus::failed;
      info.error_kind = errc::model_failed;
      info.error_message = stats.failure;
    }
  }
}

void Registry::State::run_load(Entry* entry, LoadOptions load) {
  const std::string& id = load.model_id;
  const auto started = Clock::now();
  std::string kind, message;
  std::shared_ptr<const ModelAssets> assets;
  std::shared_ptr<Engine> engine;
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
    assets = std::make_shared<const ModelAssets>(pending_assets.get());
    if (runner_error) std::rethrow_exception(runner_error);
    engine = std::make_shared<Engine>(id, std::move(runner), assets->tokenizer, assets->configs, options.engine);
  } catch (const Error& e) {
    kind = e.kind();
    message = e.what();
  } catch (const std::bad_alloc&) {
    kind = errc::out_of_memory;
    message = "out of memory while loading";
  } catch (const std::exception& e) {
    kind = errc::load_failed;
    message = e.what();
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  if (!engine) {
    assets.reset();
#if defined(__GLIBC__)
    malloc_trim(0);  // a half-built runner's weights
#endif
  }
  {
    std::lock_guard lock(mu);
    entry->info.load_ms = ms;
    if (engine) {
      entry->info.status = ModelStatus::loaded;
      entry->info.max_context = engine->max_context();
      entry->info.memory = engine->memory();
      entry->engine = std::move(engine);
      entry->assets = std::move(assets);
      spdlog::info("model {} loaded in {:.0f} ms ({} ranks)", id, ms, load.tensor_parallel);
    } else {
      entry->info.status = ModelStatus::failed;
      entry->info.error_kind = kind;
      entry->info.error_message = message;
      spdlog::error("model {} failed to load: {}: {}", id, kind, message);
    }
  }
  load_cv.notify_all();
}

Registry::Registry(RegistryOptions options) : state_(std::make_unique<State>()) {
  pin_malloc_thresholds();
  state_->options = std::move(options);
  if (state_->options.worker_binary.empty()) state_->options.worker_binary = "/proc/self/exe";
}

Registry::~Registry() {
  std::map<std::string, std::shared_ptr<Entry>> entries;
  {
    std::lock_guard lock(state_->mu);
    entries.swap(state_->entries);
  }
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
  if (spec.quant && *spec.quant != "none" && *spec.quant != "bf16") {
    fail(errc::unsupported_arch, "quant '" + *spec.quant + "' is not supported (use none or bf16)");
  }
  if (spec.max_context < 0) {
    fail(errc::invalid_argument, "max_context must be >= 0, got " + std::to_string(spec.max_context));
  }
  // Every spelling of a directory ("/m/x/", "/m//x", "/m/./x", a symlink) is one model under one id.
  const std::string id = io::canonical_model_ref(spec.model_id);
  LoadOptions load;
  load.model_id = id;
  load.tensor_parallel = spec.tensor_parallel;
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
    if (s.entries.count(id)) fail(errc::conflict, "model " + id + " is already loaded");
  }

  load.model_dir = resolve(id, s.options);
  // Shape problems answer now, not from the background thread.
  const model::ModelConfigs configs = model::load_model_configs(load.model_dir);
  (void)model::ShardPlan::make(configs.model, 0, spec.tensor_parallel);
  if (spec.max_context > configs.model.max_position_embeddings) {
    fail(errc::invalid_argument, "max_context " + std::to_string(spec.max_context) +
                                     " exceeds the model's max_position_embeddings " +
                                     std::to_string(configs.model.max_position_embeddings));
  }

  auto entry = std::make_shared<Entry>();
  entry->info.model_id = id;
  entry->info.status = ModelStatus::loading;
  entry->info.kind = spec.tensor_parallel > 1 ? "tp" : "single";
  entry->info.tensor_parallel = spec.tensor_parallel;
  entry->info.devices = std::move(devices);
  entry->info.max_context = spec.max_context;
  entry->info.path = load.model_dir;
  entry->info.created = std::chrono::system_clock::now();
  {
    std::lock_guard lock(s.mu);
    if (s.entries.count(id)) fail(errc::conflict, "model " + id + " is already loaded");
    // Another id for the same files ("org/name" and "org/name@main" share a snapshot).
    for (const auto& [other, e] : s.entries)
      if (e->info.path == load.model_dir) fail(errc::conflict, "model " + id + " is already loaded as " + other);
    s.entries.emplace(id, entry);
    // The entry cannot leave the map while loading (unload refuses it; ~Registry joins
    // first), so the thread may keep a plain pointer to it.
    try {
      entry->loader = std::thread([&s, raw = entry.get(), load] { s.run_load(raw, load); });
    } catch (const std::system_error& e) {  // no thread: the entry must not stay "loading" forever
      s.entries.erase(id);
      fail(errc::load_failed, std::string("cannot start the loader thread: ") + e.what());
    }
  }
  spdlog::info("loading model {} from {} (tensor_parallel {}, {})", id, load.model_dir.string(),
               spec.tensor_parallel, load.device.str());

  std::unique_lock lock(s.mu);
  if (wait) {
    s.load_cv.wait(lock, [&] { return entry->info.status != ModelStatus::loading; });
    if (entry->info.status == ModelStatus::failed) fail(entry->info.error_kind, entry->info.error_message);
  }
  return entry->info;
}

void Registry::unload(const std::string& model_id, std::chrono::milliseconds drain) {
  State& s = *state_;
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard lock(s.mu);
    auto it = s.entries.find(model_id);
    if (it == s.entries.end()) fail(errc::not_found, "model " + model_id + " is not loaded");
    entry = it->second;
    if (entry->info.status == ModelStatus::loading) fail(errc::busy, "model " + model_id + " is still loading");
    if (entry->unloading) fail(errc::busy, "model " + model_id + " is already being unloaded");
    entry->unloading = true;  // engine() stops handing it out
  }

  if (entry->engine) {
    const auto deadline = Clock::now() + drain;
    while (!entry->engine->idle() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!entry->engine->idle()) {
      std::lock_guard lock(s.mu);
      entry->unloading = false;
      fail(errc::busy, "model " + model_id + " has requests in flight after waiting " + std::to_string(drain.count()) +
                           " ms; try again or cancel them");
    }
  }
  {
    std::lock_guard lock(s.mu);
    s.entries.erase(model_id);
  }
  if (entry->loader.joinable()) entry->loader.join();
  // Frees weights and KV cache and reaps TP workers now, even if an HTTP thread
  // still holds the Engine while it finishes writing a response.
  if (entry->engine) entry->engine->shutdown();
  entry->engine.reset();
  entry->assets.reset();
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  spdlog::info("model {} unloaded", model_id);
}

std::vector<ModelInfo> Registry::list() const {
  const State& s = *state_;
  // Copied under the lock: unload() may reset an entry's engine right after.
  std::vector<std::pair<ModelInfo, std::shared_ptr<Engine>>> snapshot;
  {
    std::lock_guard lock(s.mu);
    for (const auto& [id, entry] : s.entries) snapshot.emplace_back(entry->info, entry->engine);
  }
  std::vector<ModelInfo> out;
  for (auto& [info, engine] : snapshot) {
    State::refresh(info, engine);
    out.push_back(std::move(info));
  }
  return out;
}

std::optional<ModelInfo> Registry::info(const std::string& model_id) const {
  const State& s = *state_;
  ModelInfo info;
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard lock(s.mu);
    auto it = s.entries.find(model_id);
    if (it == s.entries.end()) return std::nullopt;
    info = it->second->info;
    engine = it->second->engine;
  }
  State::refresh(info, engine);
  return info;
}


std::shared_ptr<Engine> Registry::engine(const std::string& model_id) const {
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard lock(state_->mu);
    engine = loaded_member(state_->entries, model_id, &Entry::engine);
  }
  const EngineStats stats = engine->stats();
  if (stats.failed) {
    fail(errc::model_failed, "model " + model_id + " failed (" + stats.failure + "); unload and load it again");
  }
  return engine;
}

std::shared_ptr<const ModelAssets> Registry::assets(const std::string& model_id) const {
  std::lock_guard lock(state_->mu);
  return loaded_member(state_->entries, model_id, &Entry::assets);
}

}  // namespace neuron::engine
