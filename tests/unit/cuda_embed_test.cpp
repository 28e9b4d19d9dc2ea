// Embeddings on CUDA (bf16): the seam's hidden rows from the CUDA runner,
// pooled and normalized on the host as the engine does, against
// sentence-transformers' float32 vectors for the Qwen3-Embedding-shaped
// checkpoint (tests/data/embed) and transformers' mean-pooled states of
// qwen3-tiny-a, within bf16 tolerance. Skips without a GPU.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "backend/batch.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_runner.hpp"
#include "dist/communicator.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/embedding.hpp"
#include "model/shard.hpp"
#include "support/cosine.hpp"

namespace neuron::backend::cuda {
namespace {

namespace fs = std::filesystem;
const fs::path kEmbedData = fs::path(NEURON_TEST_DATA) / "embed";
const fs::path kTiny = fs::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
// bf16 activations over 2 layers of a 16-wide model: each entry of a unit vector within 0.03, cosine above 0.999.
constexpr double kMaxAbs = 0.03;
constexpr double kMinCosine = 0.999;

nlohmann::json read_json(const fs::path& p) {
  nlohmann::json j;
  std::ifstream(p) >> j;
  return j;
}

std::unique_ptr<ModelRunner> open_cuda(model::ModelConfig& cfg, const fs::path& dir) {
  cfg = model::load_model_configs(dir).model;
  const auto ckpt = io::Checkpoint::open_dir(dir);  // the embedder's bare tensors answer to the prefixed names
  return make_cuda_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), Device{Device::Kind::cuda, 0},
                          std::make_shared<dist::LocalCommunicator>(), {.max_context = 1024, .kv_blocks = 256});
}

void expect_close(const std::vector<float>& got, const nlohmann::json& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const auto w = want.get<std::vector<float>>();
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - w[i]));
  EXPECT_LT(worst, kMaxAbs) << what;
  EXPECT_GT(test_support::cosine(got, w), kMinCosine) << what;
}

TEST(CudaEmbed, LastTokenEmbeddingsMatchSentenceTransformers) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  model::ModelConfig cfg;
  auto runner = open_cuda(cfg, kEmbedData / "qwen3_embed-a");
  const auto golden = read_json(kEmbedData / "qwen3_embed-a" / "embed_golden.json");
  const auto hidden = static_cast<std::size_t>(cfg.hidden_size);
  const std::int32_t bs = runner->kv_pool().block_size;
  // Every input in one step (the 632-token one spans passes), each in its own blocks.
  Batch batch;
  std::int32_t next_block = 0;
  for (const auto& in : golden["inputs"]) {
    const auto ids = in["token_ids"].get<std::vector<std::int32_t>>();
    const std::int32_t blocks = (static_cast<std::int32_t>(ids.size()) + bs - 1) / bs;
    std::vector<std::int32_t> table(static_cast<std::size_t>(blocks));
    std::iota(table.begin(), table.end(), next_block);
    next_block += blocks;
    batch.add(ids, 0, table, LogitsWanted::hidden_last);
  }
  std::vector<float> rows(static_cast<std::size_t>(batch.hidden_rows()) * hidden);
  runner->step(batch, {}, {}, rows);
  for (std::size_t i = 0; i < golden["inputs"].size(); ++i) {
    const std::span<const float> row(rows.data() + i * hidden, hidden);
    expect_close(model::finish_embedding(row, 0, true), golden["inputs"][i]["embedding"], "input " + std::to_string(i));
    expect_close(model::finish_embedding(row, 8, true), golden["inputs"][i]["embedding_dims8"], "dims 8, input " + std::to_string(i));
  }
}

TEST(CudaEmbed, MeanPooledRowsMatchTransformers) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  model::ModelConfig cfg;
  auto runner = open_cuda(cfg, kTiny);
  const auto golden = read_json(kEmbedData / "pooled_golden.json");
  const auto hidden = static_cast<std::size_t>(cfg.hidden_size);
  const std::int32_t bs = runner->kv_pool().block_size;
  for (const auto& in : golden["inputs"]) {
    const auto ids = in["token_ids"].get<std::vector<std::int32_t>>();
    std::vector<std::int32_t> table(static_cast<std::size_t>((static_cast<std::int32_t>(ids.size()) + bs - 1) / bs));
    std::iota(table.begin(), table.end(), 0);
    Batch batch;
    batch.add(ids, 0, table, LogitsWanted::hidden_all);
    std::vector<float> rows(ids.size() * hidden);
    runner->step(batch, {}, {}, rows);
    std::vector<float> mean(hidden, 0.f), last(rows.end() - static_cast<std::ptrdiff_t>(hidden), rows.end());
    for (std::size_t r = 0; r < ids.size(); ++r)
      for (std::size_t c = 0; c < hidden; ++c) mean[c] += rows[r * hidden + c] / static_cast<float>(ids.size());
    expect_close(model::finish_embedding(mean, 0, true), in["mean"], "mean of " + in["text"].get<std::string>());
    expect_close(model::finish_embedding(last, 0, true), in["last"], "last of " + in["text"].get<std::string>());
  }
}

}  // namespace
}  // namespace neuron::backend::cuda
#endif
