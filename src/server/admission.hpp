#pragma once
// Admission per principal (the helexa gateway's fair share): in front of a
// model's engine, which runs max_num_seqs sequences and queues queue_depth
// more (its capacity, counted in sequences: a request of n choices is n).
//
// The gateway (cortex) stamps x-helexa-account-id and x-helexa-key-id on the
// requests it proxies; the two together are the principal. One principal may
// hold at most `per_principal` of a model's capacity, running and queued
// (default: a quarter, at least 1); over it the request gets 429
// rate_limit_exceeded with Retry-After. Requests without both headers are
// anonymous and share what is left once one principal's share is kept back
// for identified callers (capacity - per_principal, at least 1); over that
// they get 503 overloaded with Retry-After. The engine's own queue limit
// still applies to everyone (503 overloaded).
//
// A Ticket holds a request's place until the request ends (its stream
// included). Counts and refusals are kept per model name, since the daemon
// started.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace neuron::server {

struct AdmissionOptions {
  std::size_t per_principal = 0;  // sequences one principal may hold per model; 0: a quarter of the capacity
};

// What /health reports per model (the gateway's ModelLoad fields).
struct AdmissionCounts {
  std::size_t anon_in_flight = 0;       // anonymous sequences admitted now (running or queued)
  std::size_t anon_max_in_flight = 0;   // their ceiling at the model's capacity
  std::uint64_t rejected_per_principal = 0;
  std::uint64_t rejected_anon_yield = 0;
};

class Admission {
 public:
  explicit Admission(AdmissionOptions options = {});

  class Ticket;  // releases its sequences when destroyed

  // Admits `sequences` for `principal` (nullopt: anonymous) on `model`, whose
  // engine holds `capacity` sequences. Throws RetryLaterError: kind
  // rate_limit_exceeded (429) over the principal's share, overloaded (503)
  // when anonymous callers have nothing left.
  std::unique_ptr<Ticket> enter(const std::string& model, const std::optional<std::string>& principal, std::size_t sequences,
                                std::size_t capacity);

  AdmissionCounts counts(const std::string& model, std::size_t capacity) const;
  std::size_t per_principal(std::size_t capacity) const;
  std::size_t anon_ceiling(std::size_t capacity) const;

 private:
  struct Model {
    std::map<std::string, std::size_t> by_principal;  // sequences held now, per principal (zeros erased)
    std::size_t anonymous = 0;
    std::uint64_t rejected_per_principal = 0;
    std::uint64_t rejected_anon_yield = 0;
  };
  void release(const std::string& model, const std::optional<std::string>& principal, std::size_t sequences);

  AdmissionOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Model> models_;
};

class Admission::Ticket {
 public:
  Ticket(Admission& admission, std::string model, std::optional<std::string> principal, std::size_t sequences)
      : admission_(admission), model_(std::move(model)), principal_(std::move(principal)), sequences_(sequences) {}
  ~Ticket() { admission_.release(model_, principal_, sequences_); }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;

 private:
  Admission& admission_;
  std::string model_;
  std::optional<std::string> principal_;
  std::size_t sequences_;
};

// The principal of a request from the gateway's headers: "account/key", or
// nullopt when either is missing or empty (anonymous).
std::optional<std::string> principal_of(const std::string& account_id, const std::string& key_id);

}  // namespace neuron::server
