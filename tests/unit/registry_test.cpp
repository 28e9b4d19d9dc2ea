#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/model_assets.hpp"
#include "engine/model_loader.hpp"
#include "engine/registry.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "util/error.hpp"
#include "util/retry_later.hpp"
#include "support/memory_test_model.hpp"
#include "support/gguf_writer.hpp"
#include "support/temp_dir.hpp"
#include "util/sanitizers.hpp"
#include "support/model_paths.hpp"

namespace neuron::engine {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kModels = test_support::models_dir();
using test_support::kTinyModel;

using test_support::TempDir;

std::uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Live child processes of this test running `neuron worker` (the TP ranks).
std::vector<pid_t> worker_children() {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != ::getpid() || state == 'Z') continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (args.find("worker") != std::string::npos) out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

RegistryOptions daemon_options() {
  RegistryOptions o;
  o.model_roots = {kModels};
  o.allow_any_directory = false;
  o.worker_binary = NEURON_BINARY;
  o.step_timeout = 20s;
  return o;
}

ModelSpec spec_for(const fs::path& dir, int tp = 1) {
  ModelSpec s;
  s.model_id = dir.string();
  s.tensor_parallel = tp;
  return s;
}

std::string error_kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return "no error";
}

std::vector<std::int32_t> greedy_tokens(Engine& engine, std::vector<std::int32_t> prompt, std::int32_t n) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  auto channel = engine.submit(std::move(r));
  for (;;) {
    std::optional<Event> e = channel->next(120s);
    if (!e) throw std::runtime_error("engine gave no event in time");
    if (e->kind == Event::Kind::done) return e->tokens;
    if (e->kind == Event::Kind::error) throw Error(e->error_kind, e->error_message);
  }
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Hugging Face ids resolve in an empty private cache: nothing on this machine leaks in.
    const char* old = std::getenv("HF_HUB_CACHE");
    if (old) saved_cache_ = old;
    ::setenv("HF_HUB_CACHE", (hub_.path() / "hub").c_str(), 1);
  }
  void TearDown() override {
    if (saved_cache_) {
      ::setenv("HF_HUB_CACHE", saved_cache_->c_str(), 1);
    } else {
      ::unsetenv("HF_HUB_CACHE");
    }
  }
  TempDir hub_;
  std::optional<std::string> saved_cache_;
};

TEST_F(RegistryTest, LoadUnloadLoadAgain) {
  Registry registry(daemon_options());
  const ModelInfo info = registry.load(spec_for(kTinyModel), /*wait=*/true);
  EXPECT_EQ(info.status, ModelStatus::loaded);
  EXPECT_EQ(info.kind, "single");
  EXPECT_EQ(info.devices, std::vector<std::string>{"cpu"});
  EXPECT_GT(info.max_context, 0);
  EXPECT_GT(info.memory.weight_bytes, 0u);
  EXPECT_EQ(fs::canonical(info.path), fs::canonical(kTinyModel));

  auto assets = registry.assets(kTinyModel.string());
  ASSERT_NE(assets->tokenizer, nullptr);
  EXPECT_TRUE(assets->chat.has_value());
  EXPECT_FALSE(assets->configs.stop_ids().empty());
  const auto prompt = assets->tokenizer->encode("Hello there");
  const auto first = greedy_tokens(*registry.engine(kTinyModel.string()), prompt, 8);
  EXPECT_EQ(first.size(), 8u);

  ASSERT_EQ(registry.list().size(), 1u);
  registry.unload(kTinyModel.string());
  EXPECT_TRUE(registry.list().empty());
  EXPECT_FALSE(registry.info(kTinyModel.string()).has_value());
  EXPECT_EQ(error_kind_of([&] { registry.engine(kTinyModel.string()); }), errc::not_found);

  registry.load(spec_for(kTinyModel), /*wait=*/true);
  EXPECT_EQ(greedy_tokens(*registry.engine(kTinyModel.string()), prompt, 8), first);
}

TEST_F(RegistryTest, ALoadThatCannotFitIsRefusedBeforeAnythingIsAllocated) {
  // A KV budget below one sequence of max_context (the tiny model takes 512 bytes a position).
  RegistryOptions options = daemon_options();
  options.kv_budget.bytes = 1u << 20;
  Registry registry(options);
  ModelSpec spec = spec_for(kTinyModel);
  spec.max_context = 4096;  // 2 MiB of KV for one sequence
  EXPECT_EQ(error_kind_of([&] { registry.load(spec, /*wait=*/false); }), errc::out_of_memory);
  EXPECT_TRUE(registry.list().empty());
  spec.max_context = 1024;  // 512 KiB: fits
  EXPECT_EQ(registry.load(spec, /*wait=*/true).status, ModelStatus::loaded);
  EXPECT_EQ(registry.engine(kTinyModel.string())->stats().kv_blocks_total, (1 << 20) / (512 * 16));

  // More than the host has: refused with the numbers.
  LoadPlan plan;
  plan.devices = {backend::Device{}};
  plan.rank_bytes = {std::uint64_t{1} << 50};
  try {
    check_host_memory(plan);
    FAIL() << "a petabyte fit";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("available"), std::string::npos) << e.what();
  }
}

TEST_F(RegistryTest, BackgroundLoadIsVisibleAsLoadingThenLoaded) {
  Registry registry(daemon_options());
  const ModelInfo info = registry.load(spec_for(kTinyModel), /*wait=*/false);
  EXPECT_NE(info.status, ModelStatus::failed);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (registry.info(kTinyModel.string())->status == ModelStatus::loading) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    const std::string kind = error_kind_of([&] { registry.engine(kTinyModel.string()); });
    EXPECT_TRUE(kind == errc::loading || kind == "no error") << kind;
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(registry.info(kTinyModel.string())->status, ModelStatus::loaded);
  EXPECT_NE(registry.engine(kTinyModel.string()), nullptr);
}

TEST_F(RegistryTest, DuplicateIdIsConflict) {
  Registry registry(daemon_options());
  registry.load(spec_for(kTinyModel), /*wait=*/false);
  EXPECT_EQ(error_kind_of([&] { registry.load(spec_for(kTinyModel), true); }), errc::conflict);
  // Unloading a model that is still loading is refused rather than racing the load.
  const std::string kind = error_kind_of([&] { registry.unload(kTinyModel.string()); });
  EXPECT_TRUE(kind == errc::busy || kind == "no error") << kind;
}

TEST_F(RegistryTest, EverySpellingOfADirectoryIsOneModelUnderItsRealPath) {
  TempDir links;  // symlinks from outside the roots: what counts is where they lead
  fs::create_directory_symlink(kTinyModel, links / "link");
  fs::create_directory_symlink(kModels, links / "models-link");
  const std::string m = kModels.string();
  const std::vector<std::string> spellings = {kTinyModel.string(),        kTinyModel.string() + "/", m + "//qwen3-tiny-a",
                                              m + "/./qwen3-tiny-a",      kTinyModel.string() + "/.", (links / "link").string(),
                                              (links / "models-link" / "qwen3-tiny-a").string()};
  const std::string real = fs::canonical(kTinyModel).string();
  Registry registry(daemon_options());
  // Loaded through a symlink, it is known by its real path.
  const ModelInfo info = registry.load(spec_for(links / "link"), /*wait=*/true);
  EXPECT_EQ(info.model_id, real);
  for (const auto& s : spellings) {
    ModelSpec again;
    again.model_id = s;
    EXPECT_EQ(error_kind_of([&] { registry.load(again, true); }), errc::conflict) << s;
  }
  ASSERT_EQ(registry.list().size(), 1u);
  EXPECT_NE(registry.engine(real), nullptr);
  registry.unload(real);
  // And the other way round: the plain spelling after a trailing-slash one.
  EXPECT_EQ(registry.load(spec_for(m + "/./qwen3-tiny-a/"), true).model_id, real);
  EXPECT_EQ(error_kind_of([&] { registry.load(spec_for(kTinyModel), true); }), errc::conflict);
  EXPECT_EQ(registry.list().size(), 1u);
}

TEST_F(RegistryTest, TensorParallelMustDivideTheModelAndBeInRange) {
  Registry registry(daemon_options());
  // The tiny model has 4 query heads: 3 ranks cannot split them. Answered synchronously.
  EXPECT_EQ(error_kind_of([&] { registry.load(spec_for(kTinyModel, 3), false); }), errc::bad_tensor_parallel);
  EXPECT_EQ(error_kind_of([&] { registry.load(spec_for(kTinyModel, 0), false); }), errc::bad_tensor_parallel);
  EXPECT_EQ(error_kind_of([&] { registry.load(spec_for(kTinyModel, 17), false); }), errc::bad_tensor_parallel);
  EXPECT_TRUE(registry.list().empty());
}

TEST_F(RegistryTest, PathTraversalAndOutsideRootsAreRefused) {
  TempDir outside;  // a loadable model, but not under the configured roots
  model::write_random_checkpoint(outside.path(), model::load_model_configs(kTinyModel).model);
  fs::copy_file(kTinyModel / "tokenizer.json", outside.path() / "tokenizer.json");
  Registry registry(daemon_options());
  const std::vector<std::string> ids = {
      (kModels / ".." / "models" / "qwen3-tiny-a").string(),  // inside the roots after all, but spelled with ..
      "../models/qwen3-tiny-a",
      "Qwen/../../etc",
      "org/..",
      "..\\windows",
      outside.path().string(),
      "/etc",
  };
  for (const auto& id : ids) {
    ModelSpec s;
    s.model_id = id;
    EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::invalid_argument) << id;
  }
  ModelSpec control;
  control.model_id = std::string("evil\n") + "id";
  EXPECT_EQ(error_kind_of([&] { registry.load(control, true); }), errc::invalid_argument);
  ModelSpec huge;
  huge.model_id = std::string(5000, 'a');
  EXPECT_EQ(error_kind_of([&] { registry.load(huge, true); }), errc::invalid_argument);
  ModelSpec empty;
  EXPECT_EQ(error_kind_of([&] { registry.load(empty, true); }), errc::invalid_argument);
  EXPECT_TRUE(registry.list().empty());
}

TEST_F(RegistryTest, UnknownIdsAreNotFound) {
  Registry registry(daemon_options());
  ModelSpec s;
  s.model_id = "Qwen/Qwen3-NotInThisCache";
  EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::not_found);
  EXPECT_EQ(error_kind_of([&] { registry.unload("nothing-here"); }), errc::not_found);
  EXPECT_EQ(error_kind_of([&] { registry.engine("nothing-here"); }), errc::not_found);
  EXPECT_EQ(error_kind_of([&] { registry.assets("nothing-here"); }), errc::not_found);
}

TEST_F(RegistryTest, DeviceAndQuantAreValidated) {
  Registry registry(daemon_options());
  ModelSpec s = spec_for(kTinyModel);
  s.device = "tpu:0";
  EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::invalid_argument);
  s = spec_for(kTinyModel);
  s.quant = "int4";
  EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::unsupported_arch);
  s = spec_for(kTinyModel);
  s.device = "cpu";
  s.devices = {0};
  EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::invalid_argument);
  s = spec_for(kTinyModel);
  s.max_context = -5;
  EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::invalid_argument);
  if (backend::cuda_device_count() == 0) {
    s = spec_for(kTinyModel);
    s.device = "cuda";
    EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::invalid_argument);
  }
  s = spec_for(kTinyModel);
  s.quant = "bf16";
  s.max_context = 64;
  const ModelInfo info = registry.load(s, true);
  EXPECT_EQ(info.max_context, 64);
}

// quant reaches the loader: q8_0 quantizes the tiny model at load (half the
// projection bytes); a .gguf file under a model root loads as a model of its
// own, tokenizer and all; a quant on that one file is refused.
TEST_F(RegistryTest, QuantAndGgufFilesLoad) {
  TempDir dir;
  const fs::path gguf = dir.path() / "tiny-q8_0.gguf";
  test_support::gguf_from_checkpoint(kTinyModel, quant::GgmlType::q8_0).write(gguf);
  RegistryOptions options = daemon_options();
  options.model_roots.push_back(dir.path());
  Registry registry(options);
  ModelSpec s = spec_for(kTinyModel);
  s.quant = "q8_0";
  s.max_context = 64;
  const ModelInfo q = registry.load(s, true);
  EXPECT_EQ(q.status, ModelStatus::loaded);
  s = spec_for(gguf);
  s.max_context = 64;
  const ModelInfo g = registry.load(s, true);
  EXPECT_EQ(g.status, ModelStatus::loaded);
  EXPECT_EQ(g.path, fs::canonical(gguf));
  EXPECT_EQ(registry.assets(g.model_id)->tokenizer->encode("Hello, world!"), (std::vector<std::int32_t>{9707, 11, 1879, 0}));
  s.quant = "q4_k";
  s.model_id = (dir.path() / "." / "tiny-q8_0.gguf").string();
  EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::conflict);  // one file, one model however spelled
  registry.unload(g.model_id);
  EXPECT_EQ(error_kind_of([&] { registry.load(s, true); }), errc::invalid_argument);
}

TEST_F(RegistryTest, FailedLoadIsReportedAndLeavesNothingBehind) {
  TempDir dir;
  model::ModelConfig cfg = model::load_model_configs(kTinyModel).model;
  model::write_random_checkpoint(dir.path(), cfg);
  // Configs are fine (so load() accepts it), but the tokenizer is missing: the background part fails.
  RegistryOptions options = daemon_options();
  options.model_roots.push_back(dir.path());
  std::vector<ModelInfo> ended;
  std::mutex mu;
  options.on_load_end = [&](const ModelInfo& info) {
    std::lock_guard lock(mu);
    ended.push_back(info);
  };
  Registry registry(options);
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second load is no conflict: the first left nothing
    std::string message;
    try {
      registry.load(spec_for(dir.path()), true);
      ADD_FAILURE() << "loaded without a tokenizer";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::not_found);
      message = e.what();
    }
    EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
    EXPECT_FALSE(registry.info(dir.path().string()).has_value());
    EXPECT_TRUE(registry.list().empty());
    EXPECT_EQ(error_kind_of([&] { registry.engine(dir.path().string()); }), errc::not_found);
    EXPECT_EQ(error_kind_of([&] { registry.unload(dir.path().string()); }), errc::not_found);
  }
  // on_load_end runs on the loading thread after the waiters were woken.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto count = [&] {
    std::lock_guard lock(mu);
    return ended.size();
  };
  while (count() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::lock_guard lock(mu);
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[0].status, ModelStatus::failed) << "on_load_end still reports it";
  EXPECT_EQ(ended[0].error_kind, errc::not_found);
}

TEST_F(RegistryTest, UnloadWaitsForRequestsOrAnswersBusy) {
  Registry registry(daemon_options());
  registry.load(spec_for(kTinyModel), true);
  auto engine = registry.engine(kTinyModel.string());
  CompletionRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 3000;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  auto channel = engine->submit(r);
  ASSERT_TRUE(channel->next(60s).has_value());
  EXPECT_EQ(error_kind_of([&] { registry.unload(kTinyModel.string(), 0ms); }), errc::busy);
  EXPECT_EQ(registry.info(kTinyModel.string())->status, ModelStatus::loaded);  // still there

  std::thread canceller([&] {
    std::this_thread::sleep_for(50ms);
    channel->cancel();
  });
  registry.unload(kTinyModel.string(), 30s);  // waits for the cancelled request to end
  canceller.join();
  EXPECT_TRUE(registry.list().empty());
  // The HTTP side may still hold the engine; it no longer serves.
  EXPECT_EQ(error_kind_of([&] { engine->submit(r); }), errc::shutting_down);
}

TEST_F(RegistryTest, UnloadReturnsTheMemory) {
#if NEURON_ASAN
  GTEST_SKIP() << "ASan's allocator keeps freed memory in quarantine; RSS says nothing about neuron under it";
#endif
  TempDir dir;
  test_support::write_memory_test_model(dir.path(), kTinyModel);

  RegistryOptions options = daemon_options();
  options.model_roots.push_back(dir.path());
  Registry registry(options);
  ModelSpec s = spec_for(dir.path());
  s.max_context = 1024;

  // Warm up once so that allocator arenas and lazily loaded libraries are not counted.
  registry.load(s, true);
  registry.unload(s.model_id);

  const std::uint64_t before = rss_bytes();
  const ModelInfo info = registry.load(s, true);
  greedy_tokens(*registry.engine(s.model_id), {1, 2, 3, 4}, 4);
  const std::uint64_t loaded = rss_bytes();
  // The KV pool is address space until positions are written (4 here): the weights are what must show.
  const std::uint64_t model_bytes = info.memory.weight_bytes;
  ASSERT_GT(info.memory.weight_bytes, 50u << 20) << "the test model is meant to be ~60 MB of bf16 weights";
  EXPECT_GT(loaded, before + model_bytes / 2) << "loading did not show in RSS";
  registry.unload(s.model_id);
  const std::uint64_t after = rss_bytes();
  std::printf("RSS before load %.1f MB, loaded %.1f MB, after unload %.1f MB (model %.1f MB)\n", before / 1e6,
              loaded / 1e6, after / 1e6, model_bytes / 1e6);
  EXPECT_LT(after, before + model_bytes / 5)
      << "RSS before " << before << ", loaded " << loaded << ", after unload " << after << " (model " << model_bytes
      << " bytes)";
}

TEST_F(RegistryTest, TensorParallelTwoMatchesSingle) {
  Registry registry(daemon_options());
  ModelSpec single = spec_for(kTinyModel);
  registry.load(single, true);
  const auto prompt = registry.assets(single.model_id)->tokenizer->encode("Tensor parallel check");
  const auto expected = greedy_tokens(*registry.engine(single.model_id), prompt, 24);
  // A second request sharing the first one's prefix resumes from the ranks' caches.
  auto extended = prompt;
  extended.insert(extended.end(), expected.begin(), expected.begin() + 20);  // past one whole KV block of 16
  const auto expected_extended = greedy_tokens(*registry.engine(single.model_id), extended, 12);
  registry.unload(single.model_id);

  ModelSpec tp = spec_for(kTinyModel, 2);
  const ModelInfo info = registry.load(tp, true);
  EXPECT_EQ(info.kind, "tp");
  EXPECT_EQ(info.tensor_parallel, 2);
  EXPECT_EQ(info.devices, (std::vector<std::string>{"cpu", "cpu"}));
  EXPECT_EQ(greedy_tokens(*registry.engine(tp.model_id), prompt, 24), expected);
  EXPECT_EQ(greedy_tokens(*registry.engine(tp.model_id), extended, 12), expected_extended);
  EXPECT_GT(registry.engine(tp.model_id)->stats().prompt_tokens_cached, 0u);
  registry.unload(tp.model_id);
  // And again: unloading reaped the workers, a new load spawns fresh ones.
  registry.load(tp, true);
  EXPECT_EQ(greedy_tokens(*registry.engine(tp.model_id), prompt, 24), expected);
}

TEST_F(RegistryTest, KilledTpWorkerFailsTheModelWhichCanBeUnloadedAndLoadedAgain) {
  RegistryOptions options = daemon_options();
  options.step_timeout = 5s;
  options.reload.enabled = false;  // the operator's way back; the automatic one is below
  Registry registry(options);
  const ModelSpec tp = spec_for(kTinyModel, 2);
  registry.load(tp, true);
  auto engine = registry.engine(tp.model_id);
  const auto workers = worker_children();
  ASSERT_EQ(workers.size(), 1u);

  CompletionRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 3000;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  auto channel = engine->submit(r);
  ASSERT_TRUE(channel->next(60s).has_value());  // generating
  ASSERT_EQ(::kill(workers[0], SIGKILL), 0);

  std::optional<Event> last;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!last || last->kind == Event::Kind::delta) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the request did not end after its worker died";
    last = channel->next(1s);
  }
  ASSERT_EQ(last->kind, Event::Kind::error);
  EXPECT_TRUE(last->error_kind == errc::worker_failed || last->error_kind == errc::comm) << last->error_kind;
  EXPECT_EQ(registry.info(tp.model_id)->status, ModelStatus::failed);
  EXPECT_EQ(error_kind_of([&] { registry.engine(tp.model_id); }), errc::model_failed);
  EXPECT_EQ(error_kind_of([&] { engine->submit(r); }), errc::model_failed);

  registry.unload(tp.model_id);
  EXPECT_TRUE(worker_children().empty()) << "workers left behind after unload";
  registry.load(tp, true);
  EXPECT_EQ(worker_children().size(), 1u);
  EXPECT_EQ(greedy_tokens(*registry.engine(tp.model_id), {1, 2, 3}, 8).size(), 8u);
}

TEST_F(RegistryTest, KilledTpWorkerIsReloadedWithBackoffUntilUnloaded) {
  RegistryOptions options = daemon_options();
  options.step_timeout = 5s;
  options.reload.first_backoff = 200ms;
  Registry registry(options);
  const ModelSpec tp = spec_for(kTinyModel, 2);
  registry.load(tp, true);
  auto kill_and_fail = [&] {
    const auto workers = worker_children();
    ASSERT_EQ(workers.size(), 1u);
    CompletionRequest r;
    r.prompt = {1, 2, 3};
    r.max_tokens = 3000;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    auto channel = registry.engine(tp.model_id)->submit(r);
    ASSERT_TRUE(channel->next(60s).has_value());
    ASSERT_EQ(::kill(workers[0], SIGKILL), 0);
    std::optional<Event> last;
    while (!last || last->kind == Event::Kind::delta) last = channel->next(10s);
    EXPECT_EQ(last->kind, Event::Kind::error);
  };
  auto wait_loaded = [&] {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (registry.info(tp.model_id)->status != ModelStatus::loaded && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    return registry.info(tp.model_id)->status == ModelStatus::loaded;
  };

  kill_and_fail();
  ModelInfo info = *registry.info(tp.model_id);
  EXPECT_EQ(info.status, ModelStatus::failed);
  EXPECT_EQ(info.error_kind, errc::worker_failed);
  EXPECT_EQ(info.reload_attempt, 1);
  ASSERT_TRUE(info.next_reload.has_value());
  EXPECT_LE(*info.next_reload - std::chrono::steady_clock::now(), 200ms);
  try {
    registry.engine(tp.model_id);
    ADD_FAILURE() << "a failed model handed out its engine";
  } catch (const RetryLaterError& e) {
    EXPECT_EQ(e.kind(), errc::model_failed);
    EXPECT_GE(e.retry_after(), 1s);
  }
  ASSERT_TRUE(wait_loaded());
  EXPECT_EQ(greedy_tokens(*registry.engine(tp.model_id), {1, 2, 3}, 8).size(), 8u);

  // Failing again right away doubles the wait; unloading during it ends the reloads.
  kill_and_fail();
  info = *registry.info(tp.model_id);
  EXPECT_EQ(info.reload_attempt, 2);
  ASSERT_TRUE(info.next_reload.has_value());
  EXPECT_GT(*info.next_reload - std::chrono::steady_clock::now(), 200ms);
  registry.unload(tp.model_id);
  EXPECT_FALSE(registry.info(tp.model_id).has_value());
  std::this_thread::sleep_for(600ms);
  EXPECT_TRUE(worker_children().empty()) << "a reload ran after the unload, or workers were left behind";
}

}  // namespace
}  // namespace neuron::engine
