// keep_alive as Ollama spells it (server/keep_alive.hpp).
#include <gtest/gtest.h>

#include "server/keep_alive.hpp"
#include "server/model_spec.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

using std::chrono::milliseconds;

TEST(ServerKeepAlive, ParsesDurationsNumbersZeroAndNever) {
  EXPECT_EQ(parse_keep_alive("5m"), milliseconds(300000));
  EXPECT_EQ(parse_keep_alive("30s"), milliseconds(30000));
  EXPECT_EQ(parse_keep_alive("1h30m"), milliseconds(5400000));
  EXPECT_EQ(parse_keep_alive("250ms"), milliseconds(250));
  EXPECT_EQ(parse_keep_alive("1.5s"), milliseconds(1500));
  EXPECT_EQ(parse_keep_alive("90"), milliseconds(90000));
  EXPECT_EQ(parse_keep_alive("0"), milliseconds(0));
  EXPECT_LT(parse_keep_alive("-1"), milliseconds(0));
  EXPECT_LT(parse_keep_alive("-5m"), milliseconds(0));
  EXPECT_EQ(parse_keep_alive_json(nlohmann::json(2)), milliseconds(2000));
  EXPECT_EQ(parse_keep_alive_json(nlohmann::json(0.25)), milliseconds(250));
  EXPECT_EQ(parse_keep_alive_json(nlohmann::json(0)), milliseconds(0));
  EXPECT_LT(parse_keep_alive_json(nlohmann::json(-1)), milliseconds(0));
  EXPECT_EQ(parse_keep_alive_json(nlohmann::json("10m")), milliseconds(600000));
}

TEST(ServerKeepAlive, RefusesWhatIsNotADuration) {
  for (const char* bad : {"", "m", "5x", "5m30", "1e400", "soon", "--1", "5 m", "1e9h", "nan"}) {
    try {
      parse_keep_alive(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::invalid_argument) << bad;
    }
  }
  for (const nlohmann::json& bad : {nlohmann::json(true), nlohmann::json::array(), nlohmann::json(1e300)}) {
    EXPECT_THROW(parse_keep_alive_json(bad), Error) << bad.dump();
  }
}

TEST(ServerKeepAlive, LoadBodiesAndSpecsCarryKeepAliveAndServedNames) {
  const LoadRequest r = parse_load_request({{"model_id", "Qwen/Qwen3-8B"}, {"keep_alive", "5m"}, {"served_model_name", "qwen"},
                                            {"harness", "neuron"}});
  EXPECT_EQ(r.spec.keep_alive, milliseconds(300000));
  EXPECT_EQ(r.spec.served_name, "qwen");
  EXPECT_EQ(r.harness, "neuron");
  EXPECT_TRUE(r.wait) << "loads are synchronous unless wait is false";
  EXPECT_FALSE(parse_load_request({{"model_id", "m"}}).spec.keep_alive);
  const engine::ModelSpec spec = parse_model_spec_text("/srv/models/qwen:tp=2,keep_alive=30s,name=qwen-tp");
  EXPECT_EQ(spec.model_id, "/srv/models/qwen");
  EXPECT_EQ(spec.tensor_parallel, 2);
  EXPECT_EQ(spec.keep_alive, milliseconds(30000));
  EXPECT_EQ(spec.served_name, "qwen-tp");
  EXPECT_THROW(parse_model_spec_text("/srv/models/qwen:keep_alive=later"), Error);
  EXPECT_THROW(parse_load_request({{"model_id", "m"}, {"served_model_name", ""}}), Error);
  EXPECT_THROW(parse_load_request({{"model_id", "m"}, {"harness", 3}}), Error);
}

}  // namespace
}  // namespace neuron::server
