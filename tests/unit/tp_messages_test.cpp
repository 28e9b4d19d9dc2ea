// The RPC's wire strings are a contract with other implementations of the
// protocol (the seed's workers): each op must serialise to exactly its shape
// and parse back to the same message.
#include <gtest/gtest.h>

#include "tp/messages.hpp"
#include "util/error.hpp"

namespace {

using namespace neuron;
using namespace neuron::tp;

void expect_request_wire(const Request& r, const std::string& wire) {
  EXPECT_EQ(to_line(r), wire);
  const Request back = parse_request(wire);
  EXPECT_EQ(back.index(), r.index());
  EXPECT_EQ(to_line(back), wire);
}

void expect_response_wire(const Response& r, const std::string& wire) {
  EXPECT_EQ(to_line(r), wire);
  const Response back = parse_response(wire);
  EXPECT_EQ(back.index(), r.index());
  EXPECT_EQ(to_line(back), wire);
}

std::string error_kind_of_request(const std::string& line) {
  try {
    parse_request(line);
  } catch (const Error& e) {
    return e.kind();
  }
  return "parsed";
}

std::string error_message_of_request(const std::string& line) {
  try {
    parse_request(line);
  } catch (const Error& e) {
    return e.what();
  }
  return "parsed";
}

TEST(TpMessages, RequestsHaveTheSeedsWireShapes) {
  expect_request_wire(PingRequest{}, R"({"op":"ping"})");
  expect_request_wire(InitRequest{.comm_id = "gloo:file:/tmp/x:ab", .timeout_ms = std::nullopt},
                      R"({"op":"init","comm_id":"gloo:file:/tmp/x:ab"})");
  expect_request_wire(SanityCheckRequest{}, R"({"op":"nccl_sanity_check"})");
  expect_request_wire(LoadDenseShardRequest{.model_id = "m", .config_json = "{\"a\":1}",
                                            .safetensors_paths = {"/a.safetensors", "/b.safetensors"}},
                      R"({"op":"load_dense_shard","model_id":"m","config_json":"{\"a\":1}",)"
                      R"("safetensors_paths":["/a.safetensors","/b.safetensors"],"quant":null})");
  StepRequest step{.model_id = "m", .batch = {}};
  const std::int32_t prompt[] = {1, 2, 151935}, next[] = {9}, prompt_blocks[] = {4}, next_blocks[] = {0, 2};
  step.batch.add(prompt, 0, prompt_blocks, backend::LogitsWanted::all);
  step.batch.add(next, 17, next_blocks, backend::LogitsWanted::last);
  step.batch.add(next, 3, prompt_blocks, backend::LogitsWanted::none);
  step.batch.add(next, 5, prompt_blocks, backend::LogitsWanted::hidden_last);
  step.batch.add(next, 6, prompt_blocks, backend::LogitsWanted::hidden_all);
  expect_request_wire(step, R"({"op":"step","model_id":"m","tokens":[1,2,151935,9,9,9,9],)"
                            R"("seqs":[[0,3,0,0,1,2],[3,1,17,1,2,1],[4,1,3,3,1,0],[5,1,5,4,1,4],[6,1,6,5,1,5]],)"
                            R"("block_ids":[4,0,2,4,4,4]})");
  expect_request_wire(UnloadModelRequest{"m"}, R"({"op":"unload_model","model_id":"m"})");
  expect_request_wire(ShutdownRequest{}, R"({"op":"shutdown"})");
}

// A hybrid's: each sequence's state slot as a seventh integer, the state pools' sizes, the state copies.
TEST(TpMessages, HybridStateFieldsAndCopiesRoundTrip) {
  StepRequest step{.model_id = "m", .batch = {}};
  const std::int32_t prompt[] = {1, 2}, next[] = {9}, blocks[] = {4};
  step.batch.add(prompt, 0, blocks, backend::LogitsWanted::none, 3);
  step.batch.add(next, 16, blocks, backend::LogitsWanted::last, 0);
  expect_request_wire(step, R"({"op":"step","model_id":"m","tokens":[1,2,9],)"
                            R"("seqs":[[0,2,0,0,1,0,3],[2,1,16,1,1,1,0]],"block_ids":[4,4]})");
  const Request back = parse_request(to_line(step));
  EXPECT_EQ(std::get<StepRequest>(back).batch.seqs.at(0).state_slot, 3);
  EXPECT_EQ(std::get<StepRequest>(back).batch.seqs.at(1).state_slot, 0);
  expect_request_wire(LoadDenseShardRequest{.model_id = "m", .config_json = "{}", .safetensors_paths = {},
                                            .quant = std::nullopt, .state_slots = 16, .state_snapshots = 0},
                      R"({"op":"load_dense_shard","model_id":"m","config_json":"{}","safetensors_paths":[],)"
                      R"("quant":null,"state_slots":16,"state_snapshots":0})");
  expect_request_wire(CopyStateRequest{.model_id = "m", .save = true, .slot = 2, .snapshot = 7},
                      R"({"op":"copy_state","model_id":"m","direction":"save","slot":2,"snapshot":7})");
  expect_request_wire(CopyStateRequest{.model_id = "m", .save = false, .slot = 0, .snapshot = 1},
                      R"({"op":"copy_state","model_id":"m","direction":"restore","slot":0,"snapshot":1})");
  expect_response_wire(CopyStateOkResponse{}, R"({"op":"copy_state_ok"})");
  const struct {
    std::string line, field;
  } bad[] = {
      {R"({"op":"copy_state","model_id":"m","direction":"swap","slot":0,"snapshot":0})", "copy_state.direction"},
      {R"({"op":"copy_state","model_id":"m","slot":0,"snapshot":0})", "copy_state.direction"},
      {R"({"op":"copy_state","model_id":"m","direction":"save","slot":-1,"snapshot":0})", "copy_state.slot"},
      {R"({"op":"copy_state","model_id":"m","direction":"save","slot":0})", "copy_state.snapshot"},
      {R"({"op":"copy_state","direction":"save","slot":0,"snapshot":0})", "copy_state.model_id"},
      {R"({"op":"load_dense_shard","model_id":"m","config_json":"{}","safetensors_paths":[],"state_slots":-2})",
       "load_dense_shard.state_slots"},
      {R"({"op":"load_dense_shard","model_id":"m","config_json":"{}","safetensors_paths":[],"state_snapshots":"2"})",
       "load_dense_shard.state_snapshots"},
  };
  for (const auto& c : bad) {
    EXPECT_EQ(error_kind_of_request(c.line), errc::bad_request) << c.line;
    EXPECT_EQ(error_message_of_request(c.line).rfind(c.field, 0), 0u) << c.line << " -> " << error_message_of_request(c.line);
  }
}

TEST(TpMessages, OptionalRequestFieldsRoundTrip) {
  expect_request_wire(InitRequest{.comm_id = "nccl:00", .timeout_ms = 2000},
                      R"({"op":"init","comm_id":"nccl:00","timeout_ms":2000})");
  expect_request_wire(LoadDenseShardRequest{.model_id = "m", .config_json = "{}", .safetensors_paths = {},
                                            .quant = "bf16", .max_context = 128},
                      R"({"op":"load_dense_shard","model_id":"m","config_json":"{}","safetensors_paths":[],)"
                      R"("quant":"bf16","max_context":128})");
  expect_request_wire(LoadDenseShardRequest{.model_id = "m", .config_json = "{}", .safetensors_paths = {},
                                            .quant = std::nullopt, .max_context = 64, .kv_block_size = 16,
                                            .kv_blocks = 300},
                      R"({"op":"load_dense_shard","model_id":"m","config_json":"{}","safetensors_paths":[],)"
                      R"("quant":null,"max_context":64,"kv_block_size":16,"kv_blocks":300})");
  expect_request_wire(LoadDenseShardRequest{.model_id = "m", .config_json = "{}", .safetensors_paths = {},
                                            .expert_parallel = true},
                      R"({"op":"load_dense_shard","model_id":"m","config_json":"{}","safetensors_paths":[],)"
                      R"("quant":null,"expert_parallel":true})");
  // false is the default, and what a peer that does not know the field means.
  const auto plain = parse_request(R"({"op":"load_dense_shard","model_id":"m","config_json":"{}",)"
                                   R"("safetensors_paths":[],"quant":null,"expert_parallel":false})");
  EXPECT_FALSE(std::get<LoadDenseShardRequest>(plain).expert_parallel);
  // Key order on input does not matter.
  auto r = parse_request(R"({"block_ids":[7,8],"seqs":[[0,2,16,0,2,1]],"tokens":[5,6],"model_id":"x","op":"step"})");
  ASSERT_TRUE(std::holds_alternative<StepRequest>(r));
  const backend::Batch& b = std::get<StepRequest>(r).batch;
  EXPECT_EQ(b.tokens, (std::vector<std::int32_t>{5, 6}));
  EXPECT_EQ(b.block_ids, (std::vector<std::int32_t>{7, 8}));
  ASSERT_EQ(b.seqs.size(), 1u);
  EXPECT_EQ(b.seqs[0].token_begin, 0);
  EXPECT_EQ(b.seqs[0].num_tokens, 2);
  EXPECT_EQ(b.seqs[0].position, 16);
  EXPECT_EQ(b.seqs[0].block_begin, 0);
  EXPECT_EQ(b.seqs[0].num_blocks, 2);
  EXPECT_EQ(b.seqs[0].logits, backend::LogitsWanted::last);
}

TEST(TpMessages, ResponsesHaveTheSeedsWireShapes) {
  expect_response_wire(PongResponse{.rank = 1, .world_size = 2, .cuda_device = std::nullopt},
                       R"({"op":"pong","rank":1,"world_size":2,"cuda_device":null})");
  expect_response_wire(PongResponse{.rank = 3, .world_size = 4, .cuda_device = 3},
                       R"({"op":"pong","rank":3,"world_size":4,"cuda_device":3})");
  expect_response_wire(InitOkResponse{}, R"({"op":"init_ok"})");
  expect_response_wire(SanityResultResponse{2.0}, R"({"op":"nccl_sanity_result","observed_sum":2.0})");
  expect_response_wire(LoadDenseShardOkResponse{}, R"({"op":"load_dense_shard_ok"})");
  expect_response_wire(StepOkResponse{}, R"({"op":"step_ok"})");
  expect_response_wire(StepOkResponse{.forward_us = 10, .comm_us = 4},
                       R"({"op":"step_ok","forward_us":10,"comm_us":4})");
  expect_response_wire(UnloadedResponse{}, R"({"op":"unloaded"})");
  expect_response_wire(ByeResponse{}, R"({"op":"bye"})");
  expect_response_wire(ErrorResponse{"unknown_op", "unknown op \"x\""},
                       R"({"op":"error","kind":"unknown_op","message":"unknown op \"x\""})");
}

TEST(TpMessages, UnknownOpIsUnknownOpNotBadRequest) {
  EXPECT_EQ(error_kind_of_request(R"({"op":"frobnicate"})"), errc::unknown_op);
  EXPECT_EQ(error_kind_of_request(R"({"op":"pong","rank":0,"world_size":1,"cuda_device":null})"), errc::unknown_op);
  // Removed with the batched step.
  EXPECT_EQ(error_kind_of_request(R"({"op":"generate_step","model_id":"m","tokens":[1],"offset":0})"), errc::unknown_op);
  EXPECT_EQ(error_kind_of_request(R"({"op":"clear_kv_cache","model_id":"m"})"), errc::unknown_op);
  EXPECT_THROW(parse_response(R"({"op":"kv_cache_cleared"})"), Error);
}

TEST(TpMessages, MalformedLinesAreBadRequestsNamingTheField) {
  EXPECT_EQ(error_kind_of_request("not json"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request("[1,2]"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request("{}"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request(R"({"op":7})"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request(R"({"op":"init"})"), errc::bad_request);
  EXPECT_NE(error_message_of_request(R"({"op":"init"})").find("comm_id"), std::string::npos);
  EXPECT_EQ(error_kind_of_request(R"({"op":"load_dense_shard","model_id":"m","config_json":"{}",)"
                                  R"("safetensors_paths":"a","quant":null})"),
            errc::bad_request);
  EXPECT_EQ(error_kind_of_request(R"({"op":"unload_model","model_id":3})"), errc::bad_request);
  for (const char* ep : {"1", "\"true\"", "[true]"}) {
    const std::string line = std::string(R"({"op":"load_dense_shard","model_id":"m","config_json":"{}",)") +
                             R"("safetensors_paths":[],"quant":null,"expert_parallel":)" + ep + "}";
    EXPECT_EQ(error_kind_of_request(line), errc::bad_request) << line;
    EXPECT_NE(error_message_of_request(line).find("load_dense_shard.expert_parallel"), std::string::npos) << line;
  }
  EXPECT_EQ(error_kind_of_request(std::string(kMaxLineBytes + 1, ' ')), errc::bad_request);
}

// A malformed step names what is wrong; check_batch on the worker checks the
// rest (vocabulary, pool, overlaps), which needs the model.
TEST(TpMessages, MalformedStepsAreBadRequestsNamingTheField) {
  const auto step = [](const std::string& tokens, const std::string& seqs, const std::string& block_ids) {
    return R"({"op":"step","model_id":"m","tokens":)" + tokens + R"(,"seqs":)" + seqs + R"(,"block_ids":)" + block_ids +
           "}";
  };
  EXPECT_EQ(error_message_of_request(step("[1,2]", "[[0,2,0,0,1,1]]", "[0]")), "parsed");
  const struct {
    std::string line, field;
  } cases[] = {
      {step(R"([1,"x"])", "[[0,2,0,0,1,1]]", "[0]"), "step.tokens"},
      {step("[4294967296]", "[[0,1,0,0,1,1]]", "[0]"), "step.tokens"},
      {step("[-1]", "[[0,1,0,0,1,1]]", "[0]"), "step.tokens"},
      {step("{}", "[[0,1,0,0,1,1]]", "[0]"), "step.tokens"},
      {step("[1]", "[[0,1,0,0,1,1]]", "[-3]"), "step.block_ids"},
      {step("[1]", "[[0,1,0,0,1,1]]", "7"), "step.block_ids"},
      {step("[1]", "[0,1,0,0,1,1]", "[0]"), "step.seqs[0]"},
      {step("[1]", "[[0,1,0,0,1]]", "[0]"), "step.seqs[0]"},
      {step("[1]", "[[0,1,0,0,1,1,0,0]]", "[0]"), "step.seqs[0]"},
      {step("[1]", "[[0,1,0,0,1,1,-1]]", "[0]"), "step.seqs[0].state_slot"},
      {step("[1]", R"([[0,1,0,0,1,1,"0"]])", "[0]"), "step.seqs[0].state_slot"},
      {step("[1]", "{}", "[0]"), "step.seqs"},
      {step("[1]", "[[-1,1,0,0,1,1]]", "[0]"), "step.seqs[0].token_begin"},
      {step("[1]", "[[0,0,0,0,1,1]]", "[0]"), "step.seqs[0].num_tokens"},
      {step("[1]", "[[0,-5,0,0,1,1]]", "[0]"), "step.seqs[0].num_tokens"},
      {step("[1]", "[[0,1,-1,0,1,1]]", "[0]"), "step.seqs[0].position"},
      {step("[1]", "[[0,1,0,-1,1,1]]", "[0]"), "step.seqs[0].block_begin"},
      {step("[1]", "[[0,1,0,0,-1,1]]", "[0]"), "step.seqs[0].num_blocks"},
      {step("[1]", "[[0,1,0,0,1,6]]", "[0]"), "step.seqs[0].logits"},
      {step("[1]", "[[0,1,0,0,1,1.5]]", "[0]"), "step.seqs[0].logits"},
      {step("[1]", R"([[0,1,0,0,1,"last"]])", "[0]"), "step.seqs[0].logits"},
      {step("[1]", "[[0,1,2147483648,0,1,1]]", "[0]"), "step.seqs[0].position"},
      // Spans past the arrays, including ones whose end overflows 32 bits.
      {step("[1,2]", "[[0,1,0,0,1,1],[1,2,0,0,1,1]]", "[0]"), "step.seqs[1]"},
      {step("[1]", "[[2147483647,2147483647,0,0,1,1]]", "[0]"), "step.seqs[0]"},
      {step("[1]", "[[0,1,0,0,2,1]]", "[0]"), "step.seqs[0]"},
      {step("[1]", "[[0,1,0,2147483647,2147483647,1]]", "[0]"), "step.seqs[0]"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(error_kind_of_request(c.line), errc::bad_request) << c.line;
    EXPECT_EQ(error_message_of_request(c.line).rfind(c.field, 0), 0u) << c.line << " -> " << error_message_of_request(c.line);
  }
  // Arrays past the step's bounds are refused by size, not held.
  std::string many = "[0";
  for (std::size_t i = 0; i < kMaxStepTokens; ++i) many += ",0";
  many += "]";
  EXPECT_NE(error_message_of_request(step(many, "[[0,1,0,0,1,1]]", "[0]")).find("step.tokens: has"), std::string::npos);
  std::string seqs = "[[0,1,0,0,1,1]";
  for (std::size_t i = 0; i < kMaxStepSeqs; ++i) seqs += ",[0,1,0,0,1,1]";
  seqs += "]";
  EXPECT_NE(error_message_of_request(step("[1]", seqs, "[0]")).find("step.seqs: has"), std::string::npos);
}

TEST(TpMessages, MalformedResponsesAreRejected) {
  EXPECT_THROW(parse_response("garbage"), Error);
  EXPECT_THROW(parse_response(R"({"op":"pong","rank":"0","world_size":1,"cuda_device":null})"), Error);
  EXPECT_THROW(parse_response(R"({"op":"nccl_sanity_result"})"), Error);
  EXPECT_THROW(parse_response(R"({"op":"error","kind":1,"message":"m"})"), Error);
}

TEST(TpMessages, ErrorMessagesWithInvalidUtf8StillSerialise) {
  const std::string line = to_line(Response{ErrorResponse{"bad_request", std::string("bad \xff byte")}});
  EXPECT_NO_THROW(parse_response(line));
}

}  // namespace
