#pragma once
// Random-weight checkpoints of any supported family in the real Hugging Face layout (tensor
// names, shapes, config.json, single file or sharded index), for tests of
// shapes the fixtures lack and for benchmarks of full-size shapes.
//
// Values are chosen so a forward pass stays numerically tame at any depth:
// projections are uniform in +-1/sqrt(fan_in), embeddings are scaled so
// logits have a standard deviation of about 2 (clear argmaxes, no overflow),
// and RMSNorm weights are uniform in 1 +- 0.2 (never all ones, so a forward
// that skips a norm's weight gives different logits).
//
// Every tensor is drawn from its own stream, keyed by the seed and the
// tensor's name: the values do not depend on the shard count or dtype order.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "io/safetensors_writer.hpp"
#include "model/config.hpp"
#include "tensor/dtype.hpp"

namespace neuron::model {

struct RandomCheckpointOptions {
  std::uint64_t seed = 0;
  int shards = 1;  // 1: model.safetensors; N > 1: model.safetensors.index.json + model-0000i-of-0000N.safetensors
  DType dtype = DType::bf16;
};

// The tensors of a checkpoint of cfg's family (shard_specs of one rank), in
// the order transformers lists them: model.embed_tokens, each layer's tensors
// by name, model.norm, lm_head (absent when tie_word_embeddings).
std::vector<io::TensorSpec> checkpoint_tensor_specs(const ModelConfig& cfg, DType dtype);

// Writes config.json, generation_config.json and the weights into `dir`
// (created if needed; model files of an earlier write are replaced). Returns
// the safetensors files written. Throws invalid_argument for a config that
// ModelConfig::parse would refuse or a shard count outside [1, tensor count].
std::vector<std::filesystem::path> write_random_checkpoint(const std::filesystem::path& dir, const ModelConfig& cfg,
                                                           const RandomCheckpointOptions& opts = {});

// The values write_random_checkpoint stores for `spec` (before rounding to
// its dtype), so tests can check what was written without a reader.
std::vector<float> random_tensor_values(const io::TensorSpec& spec, const ModelConfig& cfg, std::uint64_t seed);

}  // namespace neuron::model
