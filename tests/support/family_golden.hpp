#pragma once
// A family fixture's golden.json (tests/data/families/<name>, written by
// transformers' float32 eager forward): per prompt its ids, the greedy
// continuation, and the top-5 logits at some positions.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace neuron::test_support {

struct GoldenPrompt {
  std::string name;
  std::vector<std::int32_t> ids, greedy;
  struct Top5 {
    std::int64_t pos;
    std::vector<std::int32_t> ids;
    std::vector<float> logits;
  };
  std::vector<Top5> top5;
};

inline std::vector<GoldenPrompt> load_golden_prompts(const std::filesystem::path& dir) {
  std::ifstream in(dir / "golden.json");
  const auto j = nlohmann::json::parse(in);
  std::vector<GoldenPrompt> out;
  for (const auto& p : j.at("prompts")) {
    GoldenPrompt g;
    g.name = p.at("name").get<std::string>();
    g.ids = p.at("prompt_ids").get<std::vector<std::int32_t>>();
    g.greedy = p.at("greedy_ids").get<std::vector<std::int32_t>>();
    for (const auto& t : p.at("top5"))
      g.top5.push_back({t.at("pos").get<std::int64_t>(), t.at("ids").get<std::vector<std::int32_t>>(),
                        t.at("logits").get<std::vector<float>>()});
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace neuron::test_support
