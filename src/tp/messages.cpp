#include "tp/messages.hpp"

#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "util/error.hpp"
#include "util/json_parse.hpp"
#include "util/overloaded.hpp"

namespace neuron::tp {

namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(std::string_view op, std::string_view field, std::string_view why) {
  fail(errc::bad_request, std::string(op) + "." + std::string(field) + ": " + std::string(why));
}

const ojson& field(const ojson& j, std::string_view op, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) bad(op, name, "missing");
  return *it;
}

std::string get_string(const ojson& j, std::string_view op, const char* name) {
  const ojson& v = field(j, op, name);
  if (!v.is_string()) bad(op, name, "must be a string");
  return v.get<std::string>();
}

std::int64_t get_int(const ojson& v, std::string_view op, std::string_view name, std::int64_t lo, std::int64_t hi) {
  if (!v.is_number_integer()) bad(op, name, "must be an integer");
  std::int64_t x = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi)) bad(op, name, "out of range");
    x = static_cast<std::int64_t>(u);
  } else {
    x = v.get<std::int64_t>();
  }
  if (x < lo || x > hi) bad(op, name, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

std::int64_t get_int(const ojson& j, std::string_view op, const char* name, std::int64_t lo, std::int64_t hi,
                     std::nullptr_t) {
  return get_int(field(j, op, name), op, name, lo, hi);
}

constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();

// An array of at most max_size integers in [0, int32 max].
std::vector<std::int32_t> get_index_array(const ojson& j, std::string_view op, const char* name, std::size_t max_size) {
  const ojson& a = field(j, op, name);
  if (!a.is_array()) bad(op, name, "must be an array of integers");
  if (a.size() > max_size)
    bad(op, name, "has " + std::to_string(a.size()) + " entries, more than " + std::to_string(max_size));
  std::vector<std::int32_t> out;
  out.reserve(a.size());
  for (const auto& v : a) out.push_back(static_cast<std::int32_t>(get_int(v, op, name, 0, kI32Max)));
  return out;
}

// logits on the wire: 0 none, 1 last, 2 all, 3 argmax, 4 hidden_last, 5 hidden_all, LogitsWanted's own values.
static_assert(static_cast<int>(backend::LogitsWanted::none) == 0 && static_cast<int>(backend::LogitsWanted::last) == 1 &&
              static_cast<int>(backend::LogitsWanted::all) == 2 && static_cast<int>(backend::LogitsWanted::argmax) == 3 &&
              static_cast<int>(backend::LogitsWanted::hidden_last) == 4 &&
              static_cast<int>(backend::LogitsWanted::hidden_all) == 5);

// seqs: [[token_begin, num_tokens, position, block_begin, num_blocks, logits(, state_slot)], ...], each span inside
// the batch's arrays.
std::vector<backend::SequenceStep> get_seqs(const ojson& j, std::string_view op, std::size_t tokens,
                                            std::size_t block_ids) {
  const ojson& a = field(j, op, "seqs");
  static constexpr std::string_view shape =
      "[token_begin,num_tokens,position,block_begin,num_blocks,logits] or [...,logits,state_slot]";
  if (!a.is_array()) bad(op, "seqs", "must be an array of " + std::string(shape));
  if (a.size() > kMaxStepSeqs)
    bad(op, "seqs", "has " + std::to_string(a.size()) + " entries, more than " + std::to_string(kMaxStepSeqs));
  std::vector<backend::SequenceStep> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const ojson& e = a[i];
    const std::string name = "seqs[" + std::to_string(i) + "]";
    if (!e.is_array() || (e.size() != 6 && e.size() != 7)) bad(op, name, "must be " + std::string(shape));
    backend::SequenceStep s;
    s.token_begin = static_cast<std::int32_t>(get_int(e[0], op, name + ".token_begin", 0, kI32Max));
    s.num_tokens = static_cast<std::int32_t>(get_int(e[1], op, name + ".num_tokens", 1, kI32Max));
    s.position = static_cast<std::int32_t>(get_int(e[2], op, name + ".position", 0, kI32Max));
    s.block_begin = static_cast<std::int32_t>(get_int(e[3], op, name + ".block_begin", 0, kI32Max));
    s.num_blocks = static_cast<std::int32_t>(get_int(e[4], op, name + ".num_blocks", 0, kI32Max));
    s.logits = static_cast<backend::LogitsWanted>(get_int(e[5], op, name + ".logits", 0, 5));
    if (e.size() == 7) s.state_slot = static_cast<std::int32_t>(get_int(e[6], op, name + ".state_slot", 0, kI32Max));
    if (static_cast<std::size_t>(s.token_begin) + static_cast<std::size_t>(s.num_tokens) > tokens)
      bad(op, name, "tokens [" + std::to_string(s.token_begin) + ", " +
                        std::to_string(static_cast<std::int64_t>(s.token_begin) + s.num_tokens) + ") run past the " +
                        std::to_string(tokens) + " tokens");
    if (static_cast<std::size_t>(s.block_begin) + static_cast<std::size_t>(s.num_blocks) > block_ids)
      bad(op, name, "blocks [" + std::to_string(s.block_begin) + ", " +
                        std::to_string(static_cast<std::int64_t>(s.block_begin) + s.num_blocks) + ") run past the " +
                        std::to_string(block_ids) + " block_ids");
    out.push_back(s);
  }
  return out;
}

// Optional fields: absent or null both mean unset.
const ojson* optional_field(const ojson& j, const char* name) {
  auto it = j.find(name);
  return (it == j.end() || it->is_null()) ? nullptr : &*it;
}

ojson parse_object(std::string_view line) {
  if (line.size() > kMaxLineBytes) fail(errc::bad_request, "line longer than " + std::to_string(kMaxLineBytes) + " bytes");
  if (line.ends_with('\n')) line.remove_suffix(1);
  if (line.ends_with('\r')) line.remove_suffix(1);
  ojson j = parse_json<ojson>(line, "line", errc::bad_request);
  if (!j.is_object()) fail(errc::bad_request, "line is not a JSON object");
  auto it = j.find("op");
  if (it == j.end()) fail(errc::bad_request, "op: missing");
  if (!it->is_string()) fail(errc::bad_request, "op: must be a string");
  return j;
}

ojson tagged(std::string_view op) {
  ojson j = ojson::object();
  j["op"] = op;
  return j;
}

}  // namespace

std::string_view op_name(const Request& r) noexcept {
  static constexpr std::string_view names[] = {"ping", "init",       "nccl_sanity_check", "load_dense_shard",
                                               "step", "copy_state", "unload_model",      "shutdown"};
  static_assert(std::size(names) == std::variant_size_v<Request>);
  return names[r.index()];
}

std::string_view op_name(const Response& r) noexcept {
  static constexpr std::string_view names[] = {"pong",          "init_ok",  "nccl_sanity_result", "load_dense_shard_ok",
                                               "step_ok",       "copy_state_ok", "unloaded", "bye", "error"};
  static_assert(std::size(names) == std::variant_size_v<Response>);
  return names[r.index()];
}

std::string to_line(const Request& r) {
  ojson j = tagged(op_name(r));
  std::visit(overloaded{
                 [](const PingRequest&) {}, [](const SanityCheckRequest&) {}, [](const ShutdownRequest&) {},
                 [&](const InitRequest& m) {
                   j["comm_id"] = m.comm_id;
                   if (m.timeout_ms) j["timeout_ms"] = *m.timeout_ms;
                 },
                 [&](const LoadDenseShardRequest& m) {
                   j["model_id"] = m.model_id;
                   j["config_json"] = m.config_json;
                   j["safetensors_paths"] = m.safetensors_paths;
                   j["quant"] = m.quant ? ojson(*m.quant) : ojson(nullptr);
                   if (m.max_context > 0) j["max_context"] = m.max_context;
                   if (m.kv_block_size > 0) j["kv_block_size"] = m.kv_block_size;
                   if (m.kv_blocks > 0) j["kv_blocks"] = m.kv_blocks;
                   if (m.state_slots > 0) j["state_slots"] = m.state_slots;
                   if (m.state_snapshots) j["state_snapshots"] = *m.state_snapshots;
                   if (m.expert_parallel) j["expert_parallel"] = true;
                 },
                 [&](const StepRequest& m) {
                   j["model_id"] = m.model_id;
                   j["tokens"] = m.batch.tokens;
                   ojson seqs = ojson::array();
                   for (const backend::SequenceStep& s : m.batch.seqs) {
                     ojson e = ojson::array({s.token_begin, s.num_tokens, s.position, s.block_begin, s.num_blocks,
                                             static_cast<int>(s.logits)});
                     if (s.state_slot >= 0) e.push_back(s.state_slot);
                     seqs.push_back(std::move(e));
                   }
                   j["seqs"] = std::move(seqs);
                   j["block_ids"] = m.batch.block_ids;
                 },
                 [&](const CopyStateRequest& m) {
                   j["model_id"] = m.model_id;
                   j["direction"] = m.save ? "save" : "restore";
                   j["slot"] = m.slot;
                   j["snapshot"] = m.snapshot;
                 },
                 [&](const UnloadModelRequest& m) { j["model_id"] = m.model_id; },
             },
             r);
  return j.dump();
}

std::string to_line(const Response& r) {
  ojson j = tagged(op_name(r));
  std::visit(overloaded{
                 [&](const PongResponse& m) {
                   j["rank"] = m.rank;
                   j["world_size"] = m.world_size;
                   j["cuda_device"] = m.cuda_device ? ojson(*m.cuda_device) : ojson(nullptr);
                 },
                 [&](const SanityResultResponse& m) { j["observed_sum"] = m.observed_sum; },
                 [&](const StepOkResponse& m) {
                   if (m.forward_us) j["forward_us"] = *m.forward_us;
                   if (m.comm_us) j["comm_us"] = *m.comm_us;
                 },
                 [&](const ErrorResponse& m) {
                   j["kind"] = m.kind;
                   j["message"] = m.message;
                 },
                 [](const auto&) {},
             },
             r);
  // Error messages may carry bytes from a bad line: never let them make dump() throw.
  return j.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

Request parse_request(std::string_view line) {
  const ojson j = parse_object(line);
  const std::string op = j["op"].get<std::string>();
  if (op == "ping") return PingRequest{};
  if (op == "nccl_sanity_check") return SanityCheckRequest{};
  if (op == "shutdown") return ShutdownRequest{};
  if (op == "init") {
    InitRequest m{.comm_id = get_string(j, op, "comm_id"), .timeout_ms = std::nullopt};
    if (const ojson* t = optional_field(j, "timeout_ms")) m.timeout_ms = get_int(*t, op, "timeout_ms", 1, 86'400'000);
    return m;
  }
  if (op == "load_dense_shard") {
    LoadDenseShardRequest m;
    m.model_id = get_string(j, op, "model_id");
    m.config_json = get_string(j, op, "config_json");
    const ojson& paths = field(j, op, "safetensors_paths");
    if (!paths.is_array()) bad(op, "safetensors_paths", "must be an array of strings");
    for (const auto& p : paths) {
      if (!p.is_string()) bad(op, "safetensors_paths", "must be an array of strings");
      m.safetensors_paths.push_back(p.get<std::string>());
    }
    auto q = j.find("quant");
    if (q != j.end() && !q->is_null()) {
      if (!q->is_string()) bad(op, "quant", "must be null or a string");
      m.quant = q->get<std::string>();
    }
    if (const ojson* mc = optional_field(j, "max_context"))
      m.max_context = static_cast<std::int32_t>(get_int(*mc, op, "max_context", 0, kI32Max));
    if (const ojson* bs = optional_field(j, "kv_block_size"))
      m.kv_block_size = static_cast<std::int32_t>(get_int(*bs, op, "kv_block_size", 0, kI32Max));
    if (const ojson* kb = optional_field(j, "kv_blocks"))
      m.kv_blocks = static_cast<std::int32_t>(get_int(*kb, op, "kv_blocks", 0, kI32Max));
    if (const ojson* ss = optional_field(j, "state_slots"))
      m.state_slots = static_cast<std::int32_t>(get_int(*ss, op, "state_slots", 0, kI32Max));
    if (const ojson* sn = optional_field(j, "state_snapshots"))
      m.state_snapshots = static_cast<std::int32_t>(get_int(*sn, op, "state_snapshots", 0, kI32Max));
    if (const ojson* ep = optional_field(j, "expert_parallel")) {
      if (!ep->is_boolean()) bad(op, "expert_parallel", "must be a boolean");
      m.expert_parallel = ep->get<bool>();
    }
    return m;
  }
  if (op == "step") {
    StepRequest m;
    m.model_id = get_string(j, op, "model_id");
    m.batch.tokens = get_index_array(j, op, "tokens", kMaxStepTokens);
    m.batch.block_ids = get_index_array(j, op, "block_ids", kMaxStepBlockIds);
    m.batch.seqs = get_seqs(j, op, m.batch.tokens.size(), m.batch.block_ids.size());
    return m;
  }
  if (op == "copy_state") {
    CopyStateRequest m;
    m.model_id = get_string(j, op, "model_id");
    const std::string direction = get_string(j, op, "direction");
    if (direction != "save" && direction != "restore") bad(op, "direction", "must be \"save\" or \"restore\"");
    m.save = direction == "save";
    m.slot = static_cast<std::int32_t>(get_int(j, op, "slot", 0, kI32Max, nullptr));
    m.snapshot = static_cast<std::int32_t>(get_int(j, op, "snapshot", 0, kI32Max, nullptr));
    return m;
  }
  if (op == "unload_model") return UnloadModelRequest{get_string(j, op, "model_id")};
  fail(errc::unknown_op, "unknown op \"" + op.substr(0, 100) + "\"");
}

Response parse_response(std::string_view line) {
  const ojson j = parse_object(line);
  const std::string op = j["op"].get<std::string>();
  if (op == "pong") {
    PongResponse m;
    m.rank = static_cast<int>(get_int(j, op, "rank", 0, kI32Max, nullptr));
    m.world_size = static_cast<int>(get_int(j, op, "world_size", 1, kI32Max, nullptr));
    if (field(j, op, "cuda_device").is_null())
      m.cuda_device = std::nullopt;
    else
      m.cuda_device = static_cast<int>(get_int(j, op, "cuda_device", 0, kI32Max, nullptr));
    return m;
  }
  if (op == "init_ok") return InitOkResponse{};
  if (op == "nccl_sanity_result") {
    const ojson& v = field(j, op, "observed_sum");
    if (!v.is_number()) bad(op, "observed_sum", "must be a number");
    return SanityResultResponse{v.get<double>()};
  }
  if (op == "load_dense_shard_ok") return LoadDenseShardOkResponse{};
  if (op == "step_ok") {
    StepOkResponse m;
    if (const ojson* f = optional_field(j, "forward_us")) m.forward_us = get_int(*f, op, "forward_us", 0, INT64_MAX);
    if (const ojson* c = optional_field(j, "comm_us")) m.comm_us = get_int(*c, op, "comm_us", 0, INT64_MAX);
    return m;
  }
  if (op == "copy_state_ok") return CopyStateOkResponse{};
  if (op == "unloaded") return UnloadedResponse{};
  if (op == "bye") return ByeResponse{};
  if (op == "error") return ErrorResponse{get_string(j, op, "kind"), get_string(j, op, "message")};
  fail(errc::unknown_op, "unknown op \"" + op.substr(0, 100) + "\"");
}

}  // namespace neuron::tp
