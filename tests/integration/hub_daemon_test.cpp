// The daemon downloading a model it does not have: POST /models/load of an id
// absent from the cache, with HF_ENDPOINT at a hub on loopback that serves
// slowly, shows the download's progress in /models while loading, then
// answers a chat completion with it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "server_daemon.hpp"
#include "support/hub_server.hpp"
#include "support/temp_dir.hpp"

namespace neuron::server {
namespace {

using namespace testing_support;
namespace fs = std::filesystem;

TEST(HubDaemon, LoadDownloadsWithProgressThenServes) {
  test_support::TempDir model_dir("neuron-hub-model"), home("neuron-hub-home");
  const fs::path tiny = repo_path("models/qwen3-tiny-a");
  model::write_random_checkpoint(model_dir.path(), model::ModelConfig::parse(read_all((tiny / "config.json").string())),
                                 {.seed = 5, .shards = 2});
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(tiny / name, model_dir.path() / name);

  test_support::TestHub hub;
  hub.add_model_dir("org/tiny", model_dir.path(), "89abcdef0123456789abcdef0123456789abcdef");
  hub.chunk_delay_ms = 5;  // ~10 MB of weights in 64 KiB chunks: 150 chunks, about 1 s
  // The bundled model loads meanwhile: nothing here waits for it.
  Daemon daemon({}, /*wait_loaded=*/false, {"HF_ENDPOINT=" + hub.endpoint(), "HF_HOME=" + home.path().string(),
                                           "HF_HUB_CACHE=", "HF_HUB_OFFLINE=0", "HF_TOKEN="});

  auto missing = daemon.post("/models/load", {{"model_id", "org/absent"}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 422) << missing->body;  // impossible before loading (the helexa contract)
  EXPECT_EQ(json::parse(missing->body)["error"]["code"], "not_found") << missing->body;

  auto load = daemon.post("/models/load", {{"model_id", "org/tiny"}, {"wait", false}});
  ASSERT_TRUE(load);
  ASSERT_EQ(load->status, 202) << load->body;

  bool saw_partial = false;
  std::string status;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (status != "loaded" && std::chrono::steady_clock::now() < deadline) {
    auto res = daemon.client().Get("/models");
    ASSERT_TRUE(res);
    const json models = json::parse(res->body);  // a bare array (the helexa contract)
    for (const auto& m : models) {
      if (m["model_id"] != "org/tiny") continue;
      status = m["state"];
      ASSERT_NE(status, "failed") << m.dump() << "\n" << daemon.log();
      if (m.contains("download")) {
        const auto& d = m["download"];
        EXPECT_EQ(status, "loading");
        EXPECT_LE(d["bytes_done"].get<std::int64_t>(), d["bytes_total"].get<std::int64_t>());
        if (d["bytes_done"].get<std::int64_t>() > 0 && d["bytes_done"] < d["bytes_total"]) {
          saw_partial = true;
          EXPECT_EQ(d["files_total"], 7) << d.dump();  // config, generation config, 2 tokenizer files, 2 shards, the index
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  ASSERT_EQ(status, "loaded") << daemon.log();
  EXPECT_TRUE(saw_partial) << "/models showed the download part way through";

  auto chat = daemon.post("/v1/chat/completions", {{"model", "org/tiny"},
                                                   {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                                   {"max_tokens", 4},
                                                   {"temperature", 0}});
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  const auto tokens = json::parse(chat->body)["usage"]["completion_tokens"].get<int>();
  EXPECT_GE(tokens, 1);
  EXPECT_LE(tokens, 4);
  EXPECT_TRUE(fs::is_regular_file(home.path() / "hub" / "models--org--tiny" / "refs" / "main"));
}

}  // namespace
}  // namespace neuron::server
