#pragma once
// The leader <-> worker RPC: one JSON object per line, tagged by "op"
// (DESIGN.md section 4). One struct per op; Request and Response are closed
// variants so a handler that forgets an op does not compile.
//
// Wire shapes (keys in this order, optional fields omitted when unset):
//   {"op":"ping"}                     -> {"op":"pong","rank":R,"world_size":N,"cuda_device":D|null}
//   {"op":"init","comm_id":"..."}     -> {"op":"init_ok"}
//   {"op":"nccl_sanity_check"}        -> {"op":"nccl_sanity_result","observed_sum":2.0}
//   {"op":"load_dense_shard","model_id":"...","config_json":"...","safetensors_paths":[...],"quant":null}
//                                     -> {"op":"load_dense_shard_ok"}
//   {"op":"step","model_id":"...","tokens":[...],"seqs":[[token_begin,num_tokens,position,block_begin,num_blocks,logits],...],
//    "block_ids":[...]}               -> {"op":"step_ok"}
//   {"op":"copy_state","model_id":"...","direction":"save"|"restore","slot":S,"snapshot":P}
//                                     -> {"op":"copy_state_ok"}
//   {"op":"unload_model","model_id":"..."}   -> {"op":"unloaded"}
//   {"op":"shutdown"}                 -> {"op":"bye"}
//   any failure                       -> {"op":"error","kind":"...","message":"..."}
// `step` carries a backend::Batch: each seqs entry is one SequenceStep as six
// integers, logits 0 / 1 / 2 for none / last / all, and a seventh, its
// state_slot, when it has one (a hybrid's sequences). `copy_state` is a
// hybrid's ModelRunner::save_state (slot -> snapshot) or restore_state
// (snapshot -> slot) on every rank.
// Extensions (optional, ignored by a peer that does not know them):
//   init.timeout_ms          the collectives' timeout the worker should use
//   load_dense_shard.max_context / kv_block_size / kv_blocks   (0 or absent: the runner's default)
//   load_dense_shard.state_slots / state_snapshots   (a hybrid's; absent: the runner's default)
//   load_dense_shard.expert_parallel   true: model::ShardPlan::expert_parallel (absent: false)
//   step_ok.forward_us / comm_us   the worker's step time and the part spent in collectives
// Removed: generate_step{model_id, tokens, offset} (one sequence; `step`
// replaces it) and clear_kv_cache (the leader's engine owns which blocks hold
// what, so there is nothing for a rank to clear); both now get unknown_op.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "backend/batch.hpp"

namespace neuron::tp {

// A line longer than this is refused (bad_request) without being buffered whole.
inline constexpr std::size_t kMaxLineBytes = 64u << 20;

// Bounds on a parsed `step`, far above any real scheduler's batch; past them a
// line is bad_request naming the array.
inline constexpr std::size_t kMaxStepTokens = 1u << 20;
inline constexpr std::size_t kMaxStepSeqs = 1u << 16;
inline constexpr std::size_t kMaxStepBlockIds = 1u << 24;

struct PingRequest {};
struct InitRequest {
  std::string comm_id;
  std::optional<std::int64_t> timeout_ms;
};
struct SanityCheckRequest {};
struct LoadDenseShardRequest {
  std::string model_id;
  std::string config_json;  // ModelConfig::to_json(), parsed again by the worker
  std::vector<std::string> safetensors_paths;
  std::optional<std::string> quant = std::nullopt;  // only null is implemented
  std::int32_t max_context = 0;      // 0: the runner's default
  std::int32_t kv_block_size = 0;    // 0: the runner's default (backend::RunnerOptions)
  std::int32_t kv_blocks = 0;        // 0: the runner's default
  std::int32_t state_slots = 0;      // 0: the runner's default (backend::RunnerOptions)
  std::optional<std::int32_t> state_snapshots = std::nullopt;  // nullopt: the runner's default
  bool expert_parallel = false;      // whole experts per rank (model::ShardPlan::expert_parallel)
};
// One batched step of the model's shard. The parser checks the wire shape
// (counts >= 0, every sequence's spans inside tokens and block_ids); the
// runner's check_batch checks the rest.
struct StepRequest {
  std::string model_id;
  backend::Batch batch;
};
// A hybrid's recurrent-state copy on the rank (backend::ModelRunner::save_state / restore_state).
struct CopyStateRequest {
  std::string model_id;
  bool save = true;  // slot -> snapshot; false: snapshot -> slot
  std::int32_t slot = 0;
  std::int32_t snapshot = 0;
};
struct UnloadModelRequest {
  std::string model_id;
};
struct ShutdownRequest {};

using Request = std::variant<PingRequest, InitRequest, SanityCheckRequest, LoadDenseShardRequest,
                             StepRequest, CopyStateRequest, UnloadModelRequest, ShutdownRequest>;

struct PongResponse {
  int rank = 0;
  int world_size = 1;
  std::optional<int> cuda_device;  // null on the CPU
};
struct InitOkResponse {};
struct SanityResultResponse {
  double observed_sum = 0;
};
struct LoadDenseShardOkResponse {};
struct StepOkResponse {
  std::optional<std::int64_t> forward_us;
  std::optional<std::int64_t> comm_us;
};
struct CopyStateOkResponse {};
struct UnloadedResponse {};
struct ByeResponse {};
struct ErrorResponse {
  std::string kind;  // an errc kind
  std::string message;
};

using Response = std::variant<PongResponse, InitOkResponse, SanityResultResponse, LoadDenseShardOkResponse,
                              StepOkResponse, CopyStateOkResponse, UnloadedResponse, ByeResponse, ErrorResponse>;

// The "op" string of a message.
std::string_view op_name(const Request& r) noexcept;
std::string_view op_name(const Response& r) noexcept;

// One line of JSON, without the trailing newline.
std::string to_line(const Request& r);
std::string to_line(const Response& r);

// Parse one line (a trailing "\n" or "\r\n" is allowed). Throws Error{unknown_op}
// for a well-formed object with an op this side does not know, and
// Error{bad_request} naming the field for anything else malformed.
Request parse_request(std::string_view line);
Response parse_response(std::string_view line);

}  // namespace neuron::tp
