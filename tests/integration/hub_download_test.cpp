// The hub client against a hub on loopback (tests/support/hub_server.hpp):
// the cache layout, the token's reach, typed errors, resume, verification,
// and the registry loading an id that only the hub has.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/registry.hpp"
#include "io/hub_download.hpp"
#include "io/model_resolver.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "support/hub_server.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "util/sha256.hpp"

namespace neuron::io {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;
using test_support::TestHub;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string sha256_of(const std::string& s) {
  Sha256 h;
  h.update(s);
  return h.hex_digest();
}

TestHub::Repo small_repo() {
  TestHub::Repo r;
  r.commit = kCommit;
  r.files = {{"config.json", R"({"model_type": "qwen3"})"},
             {"tokenizer.json", R"({"model": {}})"},
             {"model.safetensors", random_bytes(300000, 1)},
             {"README.md", "# not a model file"},
             {"original/extra.safetensors", random_bytes(1000, 2)}};
  return r;
}

std::string error_kind(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  return "no error";
}

class HubDownload : public ::testing::Test {
 protected:
  HubOptions options() const {
    HubOptions o;
    o.endpoint = hub.endpoint();
    o.cache = cache.path();
    o.stall_timeout = std::chrono::seconds(5);
    return o;
  }
  fs::path repo_dir() const { return cache.path() / "models--org--model"; }
  TestHub hub;
  TempDir cache{"neuron-hub-cache"};
};

TEST_F(HubDownload, FillsTheSharedCacheLayoutAndKeepsTheTokenOnTheHub) {
  hub.token = "hf_secret";
  hub.add_repo("org/model", small_repo());
  HubOptions o = options();
  o.token = "hf_secret";
  std::vector<TransferProgress> seen;
  std::mutex mu;
  const fs::path snap = pull_model("org/model", std::nullopt, HubClient(o), [&](const TransferProgress& p) {
    std::lock_guard lock(mu);
    seen.push_back(p);
  });

  EXPECT_EQ(snap, repo_dir() / "snapshots" / kCommit);
  EXPECT_EQ(read_file(repo_dir() / "refs" / "main"), kCommit) << "the ref holds the commit, no newline";
  const auto weights = small_repo().files.at("model.safetensors");
  for (const char* name : {"config.json", "tokenizer.json", "model.safetensors"}) {
    const fs::path link = snap / name;
    ASSERT_TRUE(fs::is_symlink(link)) << name;
    const fs::path target = fs::read_symlink(link);
    EXPECT_TRUE(target.is_relative()) << target;
    EXPECT_EQ(target.parent_path(), fs::path("../../blobs")) << target;
    EXPECT_EQ(read_file(link), small_repo().files.at(name)) << name;
  }
  EXPECT_EQ(fs::read_symlink(snap / "model.safetensors").filename().string(), sha256_of(weights))
      << "an LFS blob is named by its sha256";
  EXPECT_FALSE(fs::exists(snap / "README.md"));
  EXPECT_FALSE(fs::exists(snap / "original"));
  for (const auto& f : fs::directory_iterator(repo_dir() / "blobs"))
    EXPECT_EQ(f.path().extension(), "") << "no partial file left: " << f.path();

  // The token went to the hub on every request and never to the CDN the 302 named.
  int cdn_requests = 0;
  for (const auto& r : hub.requests()) {
    if (r.cdn) {
      ++cdn_requests;
      EXPECT_EQ(r.authorization, "") << r.path;
    } else {
      EXPECT_EQ(r.authorization, "Bearer hf_secret") << r.method << " " << r.path;
    }
  }
  EXPECT_EQ(cdn_requests, 1) << "one LFS file";

  ASSERT_FALSE(seen.empty());
  const std::int64_t total = static_cast<std::int64_t>(small_repo().files.at("config.json").size() +
                                                      small_repo().files.at("tokenizer.json").size() + weights.size());
  EXPECT_EQ(seen.back().bytes_done, total);
  EXPECT_EQ(seen.back().bytes_total, total);
  EXPECT_EQ(seen.back().files_done, 3);
  EXPECT_EQ(seen.back().files_total, 3);
  for (std::size_t i = 1; i < seen.size(); ++i) EXPECT_LE(seen[i - 1].files_done, seen[i].files_done);

  // The resolver (and so every HF tool reading this cache) finds it; a second pull fetches nothing.
  ResolveOptions ro;
  ro.hf_hub_cache = cache.path();
  EXPECT_EQ(resolve_model("org/model", ro), snap);
  hub.clear_requests();
  EXPECT_EQ(pull_model("org/model", std::nullopt, HubClient(o)), snap);
  for (const auto& r : hub.requests())
    if (r.method == "GET") { EXPECT_TRUE(r.path.starts_with("/api/")) << "cached blobs are not fetched again: " << r.path; }
}

TEST_F(HubDownload, HubErrorsAreTyped) {
  TestHub::Repo gated = small_repo();
  gated.gated = true;
  hub.add_repo("org/gated", gated);
  hub.add_repo("org/model", small_repo());
  const HubClient client(options());
  std::string message;
  EXPECT_EQ(error_kind([&] { pull_model("org/missing", std::nullopt, client); }, &message), errc::not_found);
  EXPECT_NE(message.find("org/missing"), std::string::npos) << message;
  EXPECT_EQ(error_kind([&] { pull_model("org/model@v9", std::nullopt, client); }), errc::not_found) << "no such revision";
  EXPECT_EQ(error_kind([&] { pull_model("org/gated", std::nullopt, client); }, &message), errc::gated);
  EXPECT_NE(message.find("HF_TOKEN"), std::string::npos) << message;
  EXPECT_EQ(error_kind([&] { pull_model("org/model", "Q4_K_M", client); }, &message), errc::not_found);
  EXPECT_NE(message.find("Q4_K_M"), std::string::npos) << message;
  hub.token = "hf_right";
  HubOptions wrong = options();
  wrong.token = "hf_wrong";
  EXPECT_EQ(error_kind([&] { pull_model("org/model", std::nullopt, HubClient(wrong)); }), errc::unauthorized);
  HubOptions nowhere = options();
  nowhere.endpoint = "http://127.0.0.1:1";  // nothing listens there
  EXPECT_EQ(error_kind([&] { pull_model("org/model", std::nullopt, HubClient(nowhere)); }, &message), errc::unavailable);
  EXPECT_NE(message.find("127.0.0.1:1"), std::string::npos) << "names where it failed: " << message;
  EXPECT_FALSE(fs::exists(cache.path() / "models--org--model" / "refs" / "main"));
}

TEST_F(HubDownload, QuantFetchesOnlyTheNamedGguf) {
  TestHub::Repo r;
  r.commit = kCommit;
  r.files = {{"README.md", "x"}, {"m-Q4_K_M.gguf", random_bytes(5000, 3)}, {"m-Q8_0.gguf", random_bytes(9000, 4)}};
  hub.add_repo("org/model", r);
  const fs::path snap = pull_model("org/model", "q4_k_m", HubClient(options()));
  EXPECT_EQ(read_file(snap / "m-Q4_K_M.gguf"), r.files.at("m-Q4_K_M.gguf"));
  EXPECT_FALSE(fs::exists(snap / "m-Q8_0.gguf"));
}

TEST_F(HubDownload, ADroppedConnectionResumesWithRange) {
  hub.add_repo("org/model", small_repo());
  hub.drop_after = 100000;
  const fs::path snap = pull_model("org/model", std::nullopt, HubClient(options()));
  EXPECT_EQ(read_file(snap / "model.safetensors"), small_repo().files.at("model.safetensors"));
  std::vector<std::string> ranges;
  for (const auto& r : hub.requests())
    if (r.cdn) ranges.push_back(r.range);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], "");
  EXPECT_EQ(ranges[1], "bytes=100000-") << "the second request resumes where the first stopped";
}

TEST_F(HubDownload, AnInterruptedDownloadLeavesNoSnapshotAndResumesNextTime) {
  hub.add_repo("org/model", small_repo());
  hub.drop_after = 120000;
  HubOptions once = options();
  once.attempts = 1;
  EXPECT_EQ(error_kind([&] { pull_model("org/model", std::nullopt, HubClient(once)); }), errc::unavailable);
  const std::string sha = sha256_of(small_repo().files.at("model.safetensors"));
  EXPECT_EQ(fs::file_size(repo_dir() / "blobs" / (sha + ".incomplete")), 120000u);
  EXPECT_FALSE(fs::exists(repo_dir() / "refs" / "main"));
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots" / kCommit / "config.json"));
  ResolveOptions ro;
  ro.hf_hub_cache = cache.path();
  EXPECT_EQ(error_kind([&] { resolve_model("org/model", ro); }), errc::not_found);

  hub.clear_requests();
  pull_model("org/model", std::nullopt, HubClient(options()));
  bool resumed = false;
  for (const auto& r : hub.requests()) resumed = resumed || (r.cdn && r.range == "bytes=120000-");
  EXPECT_TRUE(resumed);
  EXPECT_EQ(read_file(repo_dir() / "blobs" / sha), small_repo().files.at("model.safetensors"));
}

TEST_F(HubDownload, AChecksumMismatchFailsAndLeavesNothingThatLooksComplete) {
  hub.add_repo("org/model", small_repo());
  hub.corrupt = true;
  std::string message;
  EXPECT_EQ(error_kind([&] { pull_model("org/model", std::nullopt, HubClient(options())); }, &message), errc::checksum_mismatch);
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(repo_dir() / "refs" / "main"));
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots" / kCommit / "config.json"));
  const std::string sha = sha256_of(small_repo().files.at("model.safetensors"));
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / sha));
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / (sha + ".incomplete"))) << "a corrupt part is not resumed";
}

TEST_F(HubDownload, OfflineUsesTheCacheAndNeverTheNetwork) {
  hub.add_repo("org/model", small_repo());
  const fs::path snap = pull_model("org/model", std::nullopt, HubClient(options()));
  hub.stop();
  HubOptions offline = options();
  offline.offline = true;
  EXPECT_EQ(pull_model("org/model", std::nullopt, HubClient(offline)), snap);
  EXPECT_EQ(error_kind([&] { pull_model("org/other", std::nullopt, HubClient(offline)); }), errc::not_found);
}

// --- the registry: an id only the hub has -------------------------------------------------

// A generated Qwen3 (two safetensors shards and their index) with the bundled model's tokenizer.
fs::path generated_model(const TempDir& dir) {
  model::ModelConfig c = model::ModelConfig::parse(read_file(fs::path(NEURON_REPO_ROOT) / "models/qwen3-tiny-a/config.json"));
  model::write_random_checkpoint(dir.path(), c, {.seed = 3, .shards = 2});
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(fs::path(NEURON_REPO_ROOT) / "models/qwen3-tiny-a" / name, dir.path() / name);
  return dir.path();
}

TEST_F(HubDownload, RegistryDownloadsAnAbsentIdThenFindsItOfflineWithTheHubStopped) {
  TempDir model_dir("neuron-hub-model");
  hub.add_model_dir("org/tiny", generated_model(model_dir), kCommit);
  TestHub::Repo gated = small_repo();
  gated.gated = true;
  hub.add_repo("org/gated", gated);
  {
    engine::RegistryOptions ro;
    ro.hub = options();
    engine::Registry registry(ro);
    engine::ModelSpec spec;
    spec.model_id = "org/missing";
    EXPECT_EQ(error_kind([&] { registry.load(spec, false); }), errc::not_found) << "refused before loading";
    spec.model_id = "org/gated";
    EXPECT_EQ(error_kind([&] { registry.load(spec, false); }), errc::gated) << "refused before loading";
    EXPECT_TRUE(registry.list().empty());

    spec.model_id = "org/tiny";
    const engine::ModelInfo info = registry.load(spec, /*wait=*/true);
    EXPECT_EQ(info.status, engine::ModelStatus::loaded);
    EXPECT_EQ(info.path, cache.path() / "models--org--tiny" / "snapshots" / kCommit);
    EXPECT_FALSE(info.download.has_value()) << "progress is gone once loaded";
    EXPECT_TRUE(fs::is_symlink(info.path / "model.safetensors.index.json"));
    EXPECT_TRUE(fs::is_symlink(info.path / "model-00002-of-00002.safetensors"));
  }
  hub.stop();
  engine::RegistryOptions ro;
  ro.hub = options();
  ro.hub->offline = true;
  engine::Registry registry(ro);
  engine::ModelSpec spec;
  spec.model_id = "org/tiny";
  EXPECT_EQ(registry.load(spec, true).status, engine::ModelStatus::loaded);
  spec.model_id = "org/other";
  EXPECT_EQ(error_kind([&] { registry.load(spec, true); }), errc::not_found);
}

}  // namespace
}  // namespace neuron::io

namespace neuron::io {
namespace {

// `neuron pull`: the snapshot directory on stdout, progress on stderr, typed errors and exit 1.
TEST_F(HubDownload, PullCommandDownloadsWithProgressOnStderr) {
  hub.add_repo("org/model", small_repo());
  const std::string env = "HF_ENDPOINT=" + hub.endpoint() + " HF_HUB_CACHE=" + cache.path().string() + " HF_HUB_OFFLINE= HF_TOKEN= ";
  const fs::path err = cache.path() / "stderr.txt";
  const auto run = [&](const std::string& args, std::string& out) {
    FILE* p = ::popen((env + NEURON_BINARY + " pull " + args + " 2>" + err.string()).c_str(), "r");
    char buf[4096];
    out.clear();
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  ASSERT_EQ(run("org/model --revision main", out), 0) << read_file(err);
  EXPECT_EQ(out, (repo_dir() / "snapshots" / kCommit).string() + "\n");
  const std::string progress = read_file(err);
  EXPECT_NE(progress.find("100.0%"), std::string::npos) << progress;
  EXPECT_NE(progress.find("3 of 3 files"), std::string::npos) << progress;

  EXPECT_EQ(run("org/absent", out), 1);
  EXPECT_NE(read_file(err).find("not_found"), std::string::npos) << read_file(err);
  EXPECT_EQ(run("org/model --quant Q4_K_M", out), 1);
  EXPECT_NE(read_file(err).find("Q4_K_M"), std::string::npos) << read_file(err);
}

}  // namespace
}  // namespace neuron::io

namespace neuron::io {
namespace {

// Shutting the registry down does not wait for a download to finish.
TEST_F(HubDownload, RegistryShutdownCancelsADownload) {
  hub.add_repo("org/model", small_repo());
  hub.chunk_delay_ms = 900;  // 300 kB in 64 KiB chunks: 4.5 s
  std::chrono::steady_clock::time_point stopping;
  {
    engine::RegistryOptions ro;
    ro.hub = options();
    engine::Registry registry(ro);
    engine::ModelSpec spec;
    spec.model_id = "org/model";
    registry.load(spec, /*wait=*/false);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_EQ(registry.info("org/model")->status, engine::ModelStatus::loading);
    stopping = std::chrono::steady_clock::now();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::milliseconds(2500));
  EXPECT_FALSE(fs::exists(repo_dir() / "refs" / "main"));
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots" / kCommit / "config.json"));
}

}  // namespace
}  // namespace neuron::io
