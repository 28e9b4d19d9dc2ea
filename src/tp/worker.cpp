#include "tp/worker.hpp"

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "dist/factory.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"
#include "tp/line_channel.hpp"
#include "quant/ggml_type.hpp"
#include "util/error.hpp"
#include "util/overloaded.hpp"

namespace neuron::tp {

namespace {

std::int64_t micros_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

FaultPlan FaultPlan::parse(const std::string& text) {
  FaultPlan f;
  if (text.empty() || text == "none") return f;
  const auto dash = text.find("-after=");
  if (dash == std::string::npos) fail(errc::invalid_argument, "--fault must be garbage|hang|exit-after=K, got " + text);
  const std::string kind = text.substr(0, dash);
  if (kind == "garbage")
    f.kind = Kind::garbage;
  else if (kind == "hang")
    f.kind = Kind::hang;
  else if (kind == "exit")
    f.kind = Kind::exit;
  else
    fail(errc::invalid_argument, "--fault kind must be garbage, hang or exit, got " + kind);
  try {
    f.after = std::stoi(text.substr(dash + 7));
  } catch (const std::exception&) {
    fail(errc::invalid_argument, "--fault count is not a number: " + text);
  }
  if (f.after < 0) fail(errc::invalid_argument, "--fault count must be >= 0");
  return f;
}

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {}

Response Worker::handle(const Request& request) noexcept {
  try {
    return dispatch(request);
  } catch (const Error& e) {
    spdlog::warn("worker rank {}: {} failed: {} ({})", options_.rank, op_name(request), e.what(), e.kind());
    return ErrorResponse{e.kind(), e.what()};
  } catch (const std::bad_alloc&) {
    return ErrorResponse{errc::out_of_memory, std::string(op_name(request)) + ": out of memory"};
  } catch (const std::exception& e) {
    return ErrorResponse{errc::internal, std::string(op_name(request)) + ": " + e.what()};
  }
}

Response Worker::dispatch(const Request& request) {
  auto need_comm = [&](std::string_view op) -> dist::TimedCommunicator& {
    if (!comm_) fail(errc::invalid_argument, std::string(op) + " before init: the worker has no communicator yet");
    return *comm_;
  };
  auto shard = [&](const std::string& model_id) -> backend::ModelRunner& {
    auto it = shards_.find(model_id);
    if (it == shards_.end()) fail(errc::not_found, "model \"" + model_id + "\" is not loaded on rank " +
                                                       std::to_string(options_.rank));
    return *it->second;
  };
  const std::optional<int> cuda_device =
      options_.device.is_cuda() ? std::optional<int>(options_.device.index) : std::nullopt;

  return std::visit(
      overloaded{
          [&](const PingRequest&) -> Response {
            return PongResponse{.rank = options_.rank, .world_size = options_.world, .cuda_device = cuda_device};
          },
          [&](const InitRequest& m) -> Response {
            dist::CommOptions co;
            co.timeout = m.timeout_ms ? std::chrono::milliseconds(*m.timeout_ms) : options_.collective_timeout;
            co.cuda_device = options_.device.index;
            // A re-init replaces the group; shards loaded earlier keep the communicator they were built with.
            comm_ = std::make_shared<dist::TimedCommunicator>(
                dist::make_communicator(m.comm_id, options_.rank, options_.world, co));
            spdlog::info("worker rank {}: joined {} group of {}", options_.rank, comm_->backend_name(), options_.world);
            return InitOkResponse{};
          },
          [&](const SanityCheckRequest&) -> Response {
            return SanityResultResponse{dist::sanity_check(need_comm("nccl_sanity_check"))};
          },
          [&](const LoadDenseShardRequest& m) -> Response {
            need_comm("load_dense_shard");
            if (shards_.contains(m.model_id))
              fail(errc::conflict, "model \"" + m.model_id + "\" is already loaded on rank " + std::to_string(options_.rank));
            std::optional<quant::GgmlType> quantize;
            if (m.quant && *m.quant != "none" && *m.quant != "bf16") {
              quantize = quant::parse_ggml_type(*m.quant);
              if (!quantize) fail(errc::invalid_argument, "quant \"" + *m.quant + "\" is not a weight type (q8_0, q4_k, q6_k, fp8)");
            }
            const auto cfg = model::ModelConfig::parse(m.config_json);
            const auto plan = model::ShardPlan::make(cfg, options_.rank, options_.world, m.expert_parallel);
            std::vector<std::filesystem::path> paths(m.safetensors_paths.begin(), m.safetensors_paths.end());
            const auto checkpoint = io::Checkpoint::open_files(paths);
            backend::RunnerOptions ro;
            ro.max_context = m.max_context;
            ro.kv_block_size = m.kv_block_size;
            ro.kv_blocks = m.kv_blocks;
            ro.quantize = quantize;
            ro.state_slots = m.state_slots;
            ro.state_snapshots = m.state_snapshots;
            shards_[m.model_id] = backend::make_runner(cfg, &checkpoint, plan, options_.device, comm_, ro);
            spdlog::info("worker rank {}: loaded shard of \"{}\"", options_.rank, m.model_id);
            return LoadDenseShardOkResponse{};
          },
          [&](const StepRequest& m) -> Response {
            backend::ModelRunner& runner = shard(m.model_id);
            const bool fault_now = options_.fault.kind != FaultPlan::Kind::none && steps_ == options_.fault.after;
            ++steps_;
            if (fault_now && options_.fault.kind == FaultPlan::Kind::hang) {
              spdlog::warn("worker rank {}: fault hook: hanging", options_.rank);
              for (;;) ::pause();
            }
            if (fault_now && options_.fault.kind == FaultPlan::Kind::exit) {
              spdlog::warn("worker rank {}: fault hook: exiting", options_.rank);
              ::_exit(3);
            }
            const auto t0 = std::chrono::steady_clock::now();
            const auto comm0 = comm_ ? comm_->busy_ns() : 0;
            runner.step(m.batch, {});  // workers compute no logits; check_batch refuses a bad batch before any collective
            StepOkResponse ok{.forward_us = micros_since(t0),
                                      .comm_us = static_cast<std::int64_t>(((comm_ ? comm_->busy_ns() : 0) - comm0) / 1000)};
            if (fault_now && options_.fault.kind == FaultPlan::Kind::garbage) {
              spdlog::warn("worker rank {}: fault hook: answering garbage", options_.rank);
              garble_next_answer_ = true;
            }
            return ok;
          },
          [&](const CopyStateRequest& m) -> Response {
            backend::ModelRunner& runner = shard(m.model_id);  // save_state / restore_state check the indices
            if (m.save)
              runner.save_state(m.slot, m.snapshot);
            else
              runner.restore_state(m.snapshot, m.slot);
            return CopyStateOkResponse{};
          },
          [&](const UnloadModelRequest& m) -> Response {
            shard(m.model_id);
            shards_.erase(m.model_id);
            return UnloadedResponse{};
          },
          [&](const ShutdownRequest&) -> Response {
            done_ = true;
            return ByeResponse{};
          },
      },
      request);
}

int serve(Worker& worker, int in_fd, int out_fd) {
  LineReader reader(in_fd, kMaxLineBytes);
  while (!worker.done()) {
    const auto got = reader.read_line(std::nullopt);
    if (got.status == LineReader::Status::eof) {
      spdlog::info("worker: input closed, exiting");
      return 0;
    }
    Response response;
    if (got.status == LineReader::Status::too_long) {
      response = ErrorResponse{errc::bad_request, "line longer than " + std::to_string(kMaxLineBytes) + " bytes"};
    } else {
      try {
        response = worker.handle(parse_request(got.line));
      } catch (const Error& e) {
        response = ErrorResponse{e.kind(), e.what()};
      }
    }
    const std::string line = worker.take_garble() ? std::string("\x01garbage{") : to_line(response);
    try {
      write_line(out_fd, line);
    } catch (const Error& e) {
      spdlog::warn("worker: cannot answer the leader ({}), exiting", e.what());
      return 1;
    }
  }
  return 0;
}

}  // namespace neuron::tp
