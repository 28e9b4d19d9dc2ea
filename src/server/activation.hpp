#pragma once
// The pre-warm of the models named at startup (`--model`), as /health's
// `activation` reports it: `pre_warming` while any of them has not finished
// loading, `ready` after; each is pending (queued behind another load),
// in_progress (building), completed or failed (with its error; a failure does
// not block readiness). The registry tells it when a load ends
// (RegistryOptions::on_load_end); the current state of the ones still loading
// is read from the registry when asked.
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/registry.hpp"

namespace neuron::server {

class Activation {
 public:
  // A startup model (the id Registry::load returned), in startup order.
  void expect(const std::string& model_id);
  // No more startup models: outcomes of other loads are not kept from here on.
  void close_startup();
  // RegistryOptions::on_load_end. Thread-safe.
  void load_ended(const engine::ModelInfo& info);
  // Blocks until the startup is closed and every startup model's load has
  // ended (loaded or failed) or `timeout` passed; true when it has: the
  // service is ready (systemd's READY=1).
  bool wait_ready(std::chrono::milliseconds timeout) const;
  // {state, pending, in_progress, completed, failed: [{model_id, error}]}; `models`
  // is Registry::list() now. Ids are shown as name_of gives them.
  nlohmann::json to_json(const std::vector<engine::ModelInfo>& models,
                         std::string (*name_of)(const engine::ModelInfo&)) const;

 private:
  struct Outcome {
    bool ok = false;
    std::string error;  // "kind: message" when !ok
  };
  bool ready() const;  // under mu_
  mutable std::mutex mu_;
  mutable std::condition_variable ended_;  // a startup load ended, or the startup closed
  std::vector<std::string> expected_;
  bool startup_open_ = true;
  std::map<std::string, Outcome> outcomes_;  // by model id
};

}  // namespace neuron::server
