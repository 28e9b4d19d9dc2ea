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
  expect_request_wire(GenerateStepRequest{.model_id = "m", .tokens = {1, 2, 151935}, .offset = 7},
                      R"({"op":"generate_step","model_id":"m","tokens":[1,2,151935],"offset":7})");
  expect_request_wire(ClearKvCacheRequest{"m"}, R"({"op":"clear_kv_cache","model_id":"m"})");
  expect_request_wire(UnloadModelRequest{"m"}, R"({"op":"unload_model","model_id":"m"})");
  expect_request_wire(ShutdownRequest{}, R"({"op":"shutdown"})");
}

TEST(TpMessages, OptionalRequestFieldsRoundTrip) {
  expect_request_wire(InitRequest{.comm_id = "nccl:00", .timeout_ms = 2000},
                      R"({"op":"init","comm_id":"nccl:00","timeout_ms":2000})");
  expect_request_wire(LoadDenseShardRequest{.model_id = "m", .config_json = "{}", .safetensors_paths = {},
                                            .quant = "bf16", .max_context = 128},
                      R"({"op":"load_dense_shard","model_id":"m","config_json":"{}","safetensors_paths":[],)"
                      R"("quant":"bf16","max_context":128})");
  // Key order on input does not matter.
  auto r = parse_request(R"({"offset":3,"tokens":[5],"model_id":"x","op":"generate_step"})");
  ASSERT_TRUE(std::holds_alternative<GenerateStepRequest>(r));
  EXPECT_EQ(std::get<GenerateStepRequest>(r).offset, 3);
  EXPECT_EQ(std::get<GenerateStepRequest>(r).tokens, std::vector<std::int32_t>{5});
}

TEST(TpMessages, ResponsesHaveTheSeedsWireShapes) {
  expect_response_wire(PongResponse{.rank = 1, .world_size = 2, .cuda_device = std::nullopt},
                       R"({"op":"pong","rank":1,"world_size":2,"cuda_device":null})");
  expect_response_wire(PongResponse{.rank = 3, .world_size = 4, .cuda_device = 3},
                       R"({"op":"pong","rank":3,"world_size":4,"cuda_device":3})");
  expect_response_wire(InitOkResponse{}, R"({"op":"init_ok"})");
  expect_response_wire(SanityResultResponse{2.0}, R"({"op":"nccl_sanity_result","observed_sum":2.0})");
  expect_response_wire(LoadDenseShardOkResponse{}, R"({"op":"load_dense_shard_ok"})");
  expect_response_wire(GenerateStepOkResponse{}, R"({"op":"generate_step_ok"})");
  expect_response_wire(GenerateStepOkResponse{.forward_us = 10, .comm_us = 4},
                       R"({"op":"generate_step_ok","forward_us":10,"comm_us":4})");
  expect_response_wire(KvCacheClearedResponse{}, R"({"op":"kv_cache_cleared"})");
  expect_response_wire(UnloadedResponse{}, R"({"op":"unloaded"})");
  expect_response_wire(ByeResponse{}, R"({"op":"bye"})");
  expect_response_wire(ErrorResponse{"unknown_op", "unknown op \"x\""},
                       R"({"op":"error","kind":"unknown_op","message":"unknown op \"x\""})");
}

TEST(TpMessages, UnknownOpIsUnknownOpNotBadRequest) {
  EXPECT_EQ(error_kind_of_request(R"({"op":"frobnicate"})"), errc::unknown_op);
  EXPECT_EQ(error_kind_of_request(R"({"op":"pong","rank":0,"world_size":1,"cuda_device":null})"), errc::unknown_op);
}

TEST(TpMessages, MalformedLinesAreBadRequestsNamingTheField) {
  EXPECT_EQ(error_kind_of_request("not json"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request("[1,2]"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request("{}"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request(R"({"op":7})"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request(R"({"op":"init"})"), errc::bad_request);
  EXPECT_NE(error_message_of_request(R"({"op":"init"})").find("comm_id"), std::string::npos);
  EXPECT_NE(error_message_of_request(R"({"op":"generate_step","model_id":"m","tokens":[1,"x"],"offset":0})")
                .find("tokens"),
            std::string::npos);
  EXPECT_NE(error_message_of_request(R"({"op":"generate_step","model_id":"m","tokens":[1],"offset":-1})")
                .find("offset"),
            std::string::npos);
  EXPECT_EQ(error_kind_of_request(R"({"op":"generate_step","model_id":"m","tokens":[4294967296],"offset":0})"),
            errc::bad_request);
  EXPECT_EQ(error_kind_of_request(R"({"op":"load_dense_shard","model_id":"m","config_json":"{}",)"
                                  R"("safetensors_paths":"a","quant":null})"),
            errc::bad_request);
  EXPECT_EQ(error_kind_of_request(R"({"op":"unload_model","model_id":3})"), errc::bad_request);
  EXPECT_EQ(error_kind_of_request(std::string(kMaxLineBytes + 1, ' ')), errc::bad_request);
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
