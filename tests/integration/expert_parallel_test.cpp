// Expert parallelism (model::ShardPlan::expert_parallel): a MoE's experts
// dealt out whole over the ranks, the router replicated, must not change the
// model. qwen3_moe-a (8 experts, top 2) at TP = 2 and 4 (4 and 2 whole experts
// a rank) gives the goldens' greedy tokens and the single rank's logits, from
// the checkpoint and from its GGUF; each rank holds only its experts; what
// expert parallelism cannot do is refused before any worker starts, named,
// and CUDA ranks are planned as CPU ones are (their runs:
// tests/unit/cuda_family_test.cpp, cuda_moe_test.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/model_runner.hpp"
#include "dist/communicator.hpp"
#include "dist/factory.hpp"
#include "engine/model_loader.hpp"
#include "engine/registry.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"
#include "model/shard_weights.hpp"
#include "support/batch_driver.hpp"
#include "support/gguf_writer.hpp"
#include "support/temp_dir.hpp"
#include "tp/tp_runner.hpp"
#include "util/error.hpp"
#include "support/family_golden.hpp"
#include "support/model_paths.hpp"

namespace neuron {
namespace {

using namespace std::chrono_literals;

const std::filesystem::path kFamilies = std::filesystem::path(NEURON_TEST_DATA) / "families";
const std::filesystem::path kMoe = test_support::family_dir("qwen3_moe-a");

std::vector<test_support::GoldenPrompt> goldens() { return test_support::load_golden_prompts(kMoe); }

engine::LoadOptions options(const std::filesystem::path& model, int tp, bool ep) {
  engine::LoadOptions o;
  o.model_dir = model;
  o.model_id = "expert-parallel";
  o.tensor_parallel = tp;
  o.expert_parallel = ep;
  o.max_context = 1024;  // the goldens' long prompt is 841 tokens
  o.step_timeout = 20000ms;
  o.worker_binary = NEURON_BINARY;
  return o;
}

template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(errc::invalid_argument, "no error");
}

void expect_refused(const Error& e, const std::string& kind, const std::vector<std::string>& needles) {
  EXPECT_EQ(e.kind(), kind) << e.what();
  for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
}

// Every golden prompt, its 32 greedy tokens and the logits after the prompt and after each of them.
TEST(ExpertParallel, Qwen3MoeGivesTheGoldensAndTheSingleRanksLogitsAtTwoAndFourRanks) {
  auto single = engine::open_runner(options(kMoe, 1, false));
  std::vector<std::unique_ptr<backend::ModelRunner>> split;
  for (int tp : {2, 4}) {
    split.push_back(engine::open_runner(options(kMoe, tp, true)));
    ASSERT_NE(dynamic_cast<tp::TpRunner*>(split.back().get()), nullptr);
  }
  for (const test_support::GoldenPrompt& g : goldens()) {
    const int steps = static_cast<int>(g.greedy.size()) - 1;
    const test_support::SeqTrace want = test_support::run_solo(*single, g.ids, steps);
    ASSERT_EQ(want.tokens, g.greedy) << g.name << ": the single rank misses the golden";
    for (std::size_t i = 0; i < split.size(); ++i) {
      const int tp = i == 0 ? 2 : 4;
      const test_support::SeqTrace got = test_support::run_solo(*split[i], g.ids, steps);
      EXPECT_EQ(got.tokens, g.greedy) << g.name << ": EP at TP=" << tp;
      ASSERT_EQ(got.logits.size(), want.logits.size());
      for (std::size_t k = 0; k < want.logits.size(); ++k)
        EXPECT_LE(test_support::relative_error(got.logits[k], want.logits[k]), test_support::kAcrossProcesses)
            << g.name << ": EP at TP=" << tp << ", logits row " << k;
    }
  }
  for (const auto& r : split) EXPECT_FALSE(dynamic_cast<tp::TpRunner&>(*r).failed());
}

// The GGUF llama.cpp's converter would write for the same weights (its experts
// stacked in one tensor per projection): every rank takes its experts' planes.
TEST(ExpertParallel, Qwen3MoeGgufAtTwoRanksGivesTheGoldens) {
  test_support::TempDir tmp("neuron-ep-gguf");
  const auto gguf = tmp / "qwen3_moe-a.gguf";
  test_support::gguf_from_checkpoint(kMoe.string(), quant::GgmlType::bf16).write(gguf);
  auto runner = engine::open_runner(options(gguf, 2, true));
  for (const test_support::GoldenPrompt& g : goldens()) {
    const auto got = test_support::run_solo(*runner, g.ids, static_cast<int>(g.greedy.size()) - 1);
    EXPECT_EQ(got.tokens, g.greedy) << g.name;
  }
}

// Each rank holds E / N whole experts (a contiguous range), so its weights are
// the whole model's less (N - 1) / N of the experts and of the attention: the
// same bytes as the intermediate split, counted alike by the load plan.
TEST(ExpertParallel, EachRankHoldsItsWholeExperts) {
  const auto cfg = model::load_model_configs(kMoe).model;
  ASSERT_EQ(cfg.moe.num_experts, 8);
  constexpr int kRanks = 2;
  for (int r = 0; r < kRanks; ++r) {
    const auto plan = model::ShardPlan::make(cfg, r, kRanks, true);
    EXPECT_EQ(plan.expert_begin, 4 * r);
    EXPECT_EQ(plan.experts, 4);
    EXPECT_EQ(plan.moe_ff_size, cfg.moe.intermediate_size);
    const auto specs = model::shard_specs(cfg, plan);
    for (const model::LayerSpecs& l : specs.layers) {
      ASSERT_TRUE(l.moe);
      EXPECT_EQ(l.moe->router.rows(), 8) << "the router stays whole";
      EXPECT_EQ(l.moe->expert_begin, 4 * r);
      ASSERT_EQ(l.moe->experts.size(), 4u);
      for (std::size_t i = 0; i < 4; ++i) {
        const model::MlpSpecs& e = l.moe->experts[i];
        EXPECT_NE(e.gate_proj.name.find("experts." + std::to_string(4 * r + static_cast<int>(i)) + ".gate_proj"),
                  std::string::npos)
            << e.gate_proj.name;
        EXPECT_EQ(e.gate_proj.rows(), cfg.moe.intermediate_size);
        EXPECT_EQ(e.down_proj.cols(), cfg.moe.intermediate_size);
      }
    }
    const auto split = model::ShardPlan::make(cfg, r, kRanks);
    EXPECT_EQ(model::weight_elements(cfg, plan), model::weight_elements(cfg, split));
    EXPECT_EQ(model::projection_elements(cfg, plan), model::projection_elements(cfg, split));
  }
  const std::int64_t whole = model::weight_elements(cfg, model::ShardPlan::make(cfg, 0, 1));
  const std::int64_t hidden = cfg.hidden_size, hd = cfg.head_dim;
  const std::int64_t experts = cfg.num_hidden_layers * cfg.moe.num_experts * 3 * cfg.moe.intermediate_size * hidden;
  const std::int64_t attention =
      cfg.num_hidden_layers * (2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * hd * hidden;
  EXPECT_EQ(whole - model::weight_elements(cfg, model::ShardPlan::make(cfg, 1, kRanks, true)),
            (experts + attention) / kRanks);

  // The runners hold what the plan counts: every rank built here, each with its member of a real group.
  const auto ckpt = io::Checkpoint::open_dir(kMoe);
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  std::vector<std::shared_ptr<dist::Communicator>> comms(kRanks);
  std::vector<std::thread> joiners;
  for (int r = 0; r < kRanks; ++r)
    joiners.emplace_back([&, r] { comms[r] = dist::make_communicator(id, r, kRanks, {.timeout = 10000ms}); });
  for (auto& t : joiners) t.join();
  auto single = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr,
                                     {.max_context = 64});
  for (int r = 0; r < kRanks; ++r) {
    auto ep = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, r, kRanks, true), backend::Device{},
                                   comms[r], {.max_context = 64});
    // bf16 matrices (2 bytes an element): the rank's share of the experts and attention is gone.
    EXPECT_EQ(single->memory().weight_bytes - ep->memory().weight_bytes,
              static_cast<std::uint64_t>((experts + attention) / kRanks * 2))
        << "rank " << r;
  }
  engine::LoadOptions o = options(kMoe, kRanks, true);
  o.quantize = std::nullopt;
  const auto ep_plan = engine::plan_load(o, cfg);
  o.expert_parallel = false;
  EXPECT_EQ(ep_plan.rank_bytes, engine::plan_load(o, cfg).rank_bytes);
}

// A model without experts, one rank, experts that do not divide: each refused
// with the option named, before any worker starts.
TEST(ExpertParallel, WhatItCannotDoIsRefusedNamingWhy) {
  const auto moe = model::load_model_configs(kMoe).model;
  const auto dense = model::load_model_configs(kFamilies / "llama-a").model;
  expect_refused(error_of([&] { engine::open_runner(options(kFamilies / "llama-a", 2, true)); }),
                 errc::bad_tensor_parallel, {"expert_parallel", "no experts"});
  expect_refused(error_of([&] { engine::open_runner(options(kMoe, 1, true)); }), errc::bad_tensor_parallel,
                 {"expert_parallel", "2 or more"});
  auto six = moe;
  six.moe.num_experts = 6;
  expect_refused(error_of([&] { engine::plan_load(options(kMoe, 4, true), six); }), errc::bad_tensor_parallel,
                 {"expert_parallel", "num_experts 6 is not divisible by 4"});
  expect_refused(error_of([&] { (void)model::ShardPlan::make(dense, 0, 2, true); }), errc::bad_tensor_parallel,
                 {"no experts"});
  // Without expert_parallel the same 6 experts split 4 ways (their intermediate dimension, 16, divides).
  EXPECT_NO_THROW((void)model::ShardPlan::make(six, 3, 4));

  // On CUDA ranks the same refusals, from the load plan.
  engine::LoadOptions cuda = options(kMoe, 4, true);
  cuda.device = backend::Device::parse("cuda:0");
  cuda.kv_budget.bytes = 64u << 20;  // a budget of its own: the plan reads no device
  expect_refused(error_of([&] { engine::plan_load(cuda, six); }), errc::bad_tensor_parallel,
                 {"expert_parallel", "num_experts 6 is not divisible by 4"});

  // Through the registry (what POST /models/load answers 422 for): refused in load() itself, nothing left behind.
  engine::RegistryOptions ro;
  ro.model_roots = {kFamilies};
  ro.worker_binary = NEURON_BINARY;
  engine::Registry registry(ro);
  auto spec = [&](const char* family, int tp) {
    engine::ModelSpec s;
    s.model_id = (kFamilies / family).string();
    s.tensor_parallel = tp;
    s.expert_parallel = true;
    return s;
  };
  expect_refused(error_of([&] { registry.load(spec("llama-a", 2), false); }), errc::bad_tensor_parallel,
                 {"expert_parallel"});
  expect_refused(error_of([&] { registry.load(spec("qwen3_moe-a", 1), false); }), errc::bad_tensor_parallel,
                 {"expert_parallel"});
  EXPECT_TRUE(registry.list().empty());
}

// CUDA ranks take expert-parallel plans: the load plan (which reads no device given a KV budget of its own)
// gives every rank on cuda:0 its whole experts' share, the same bytes as the intermediate split, as on the CPU.
TEST(ExpertParallel, CudaRanksArePlannedLikeCpuRanks) {
  const auto moe = model::load_model_configs(kMoe).model;
  for (const int tp : {2, 4}) {
    engine::LoadOptions o = options(kMoe, tp, true);
    o.device = backend::Device::parse("cuda:0");
    o.kv_budget.bytes = 64u << 20;
    const engine::LoadPlan ep = engine::plan_load(o, moe);
    ASSERT_EQ(ep.devices.size(), static_cast<std::size_t>(tp));
    for (const backend::Device& d : ep.devices) EXPECT_TRUE(d.is_cuda()) << d.str();
    o.expert_parallel = false;
    EXPECT_EQ(ep.rank_bytes, engine::plan_load(o, moe).rank_bytes) << "tp " << tp;
  }
}

}  // namespace
}  // namespace neuron
