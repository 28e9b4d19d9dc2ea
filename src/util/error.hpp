#pragma once
// Library errors. Everything below an entry point throws neuron::Error; each
// entry point (HTTP handler, RPC loop, CLI) catches it once and maps `kind` to
// its own vocabulary (HTTP status + OpenAI type, RPC error kind, exit code).
// Fatal aborts are reserved for broken invariants (NEURON_ASSERT), never input.
#include <stdexcept>
#include <string>

namespace neuron {

// Stable, machine-readable kinds. Boundaries switch on these strings, so they
// are part of the wire contract (RPC `error.kind`, HTTP `error.code`).
namespace errc {
inline constexpr const char* invalid_argument = "invalid_argument";  // bad caller input
inline constexpr const char* not_found = "not_found";                // model, tensor, file missing
inline constexpr const char* bad_model = "bad_model";                // malformed checkpoint / config / tokenizer
inline constexpr const char* unsupported_arch = "unsupported_arch";  // valid but not implemented
inline constexpr const char* bad_tensor_parallel = "bad_tensor_parallel";
inline constexpr const char* load_failed = "load_failed";
inline constexpr const char* io = "io";
inline constexpr const char* comm = "comm";                    // collective failed
inline constexpr const char* worker_failed = "worker_failed";  // TP worker died / garbage
inline constexpr const char* timeout = "timeout";
inline constexpr const char* cuda = "cuda";
inline constexpr const char* out_of_memory = "out_of_memory";
inline constexpr const char* bad_request = "bad_request";  // malformed RPC line
inline constexpr const char* unknown_op = "unknown_op";
inline constexpr const char* template_error = "template_error";
inline constexpr const char* context_length_exceeded = "context_length_exceeded";
inline constexpr const char* cancelled = "cancelled";
inline constexpr const char* overloaded = "overloaded";      // queue full: retry later
inline constexpr const char* conflict = "conflict";          // e.g. model id already loaded
inline constexpr const char* busy = "busy";                  // e.g. unload with requests in flight
inline constexpr const char* loading = "loading";            // model not ready yet
inline constexpr const char* model_failed = "model_failed";  // runner state unknown after a failure
inline constexpr const char* shutting_down = "shutting_down";
inline constexpr const char* unavailable = "unavailable";              // a remote service (the Hugging Face hub) could not be reached
inline constexpr const char* unauthorized = "unauthorized";            // the hub refused the credentials (401/403)
inline constexpr const char* gated = "gated";                          // a gated hub repository whose terms were not accepted
inline constexpr const char* checksum_mismatch = "checksum_mismatch";  // a download's size or sha256 is not what the hub announced
inline constexpr const char* internal = "internal";
}  // namespace errc

class Error : public std::runtime_error {
 public:
  Error(std::string kind, const std::string& message) : std::runtime_error(message), kind_(std::move(kind)) {}
  const std::string& kind() const noexcept { return kind_; }

 private:
  std::string kind_;
};

[[noreturn]] inline void fail(std::string kind, const std::string& message) { throw Error(std::move(kind), message); }

// Broken invariant: a bug in neuron, not bad input.
[[noreturn]] void assert_fail(const char* expr, const char* file, int line);

}  // namespace neuron

#define NEURON_ASSERT(expr) ((expr) ? (void)0 : ::neuron::assert_fail(#expr, __FILE__, __LINE__))
