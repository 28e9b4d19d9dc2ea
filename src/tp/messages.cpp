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

std::int64_t get_int(const ojson& v, std::string_view op, const char* name, std::int64_t lo, std::int64_t hi) {
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
  static constexpr std::string_view names[] = {"ping",           "init",           "nccl_sanity_check",
                                               "load_dense_shard", "generate_step", "clear_kv_cache",
                                               "unload_model",   "shutdown"};
  static_assert(std::size(names) == std::variant_size_v<Request>);
  return names[r.index()];
}

std::string_view op_name(const Response& r) noexcept {
  static constexpr std::string_view names[] = {"pong",     "init_ok",          "nccl_sanity_result",
                                               "load_dense_shard_ok", "generate_step_ok", "kv_cache_cleared",
                                               "unloaded", "bye",              "error"};
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
                 },
                 [&](const GenerateStepRequest& m) {
                   j["model_id"] = m.model_id;
                   j["tokens"] = m.tokens;
                   j["offset"] = m.offset;
                 },
                 [&](const ClearKvCacheRequest& m) { j["model_id"] = m.model_id; },
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
                 [&](const GenerateStepOkResponse& m) {
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
    return m;
  }
  if (op == "generate_step") {
    GenerateStepRequest m;
    m.model_id = get_string(j, op, "model_id");
    const ojson& tokens = field(j, op, "tokens");
    if (!tokens.is_array()) bad(op, "tokens", "must be an array of integers");
    m.tokens.reserve(tokens.size());
    for (const auto& t : tokens) m.tokens.push_back(static_cast<std::int32_t>(get_int(t, op, "tokens", 0, kI32Max)));
    m.offset = static_cast<std::int32_t>(get_int(j, op, "offset", 0, kI32Max, nullptr));
    return m;
  }
  if (op == "clear_kv_cache") return ClearKvCacheRequest{get_string(j, op, "model_id")};
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
  if (op == "generate_step_ok") {
    GenerateStepOkResponse m;
    if (const ojson* f = optional_field(j, "forward_us")) m.forward_us = get_int(*f, op, "forward_us", 0, INT64_MAX);
    if (const ojson* c = optional_field(j, "comm_us")) m.comm_us = get_int(*c, op, "comm_us", 0, INT64_MAX);
    return m;
  }
  if (op == "kv_cache_cleared") return KvCacheClearedResponse{};
  if (op == "unloaded") return UnloadedResponse{};
  if (op == "bye") return ByeResponse{};
  if (op == "error") return ErrorResponse{get_string(j, op, "kind"), get_string(j, op, "message")};
  fail(errc::unknown_op, "unknown op \"" + op.substr(0, 100) + "\"");
}

}  // namespace neuron::tp
