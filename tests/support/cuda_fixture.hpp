#pragma once
// The base of the CUDA kernel tests: a device and a stream (skipping without
// a GPU), random host inputs, and device buffers up and down. Outputs start
// poisoned (0xff bytes: NaN in f32 and bf16), so an element a kernel skipped
// fails. Only with NEURON_HAVE_CUDA.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_runner.hpp"
#include "backend/cuda/device_buffer.hpp"
#include "tensor/dtype.hpp"

namespace neuron::test_support {

class CudaFixture : public ::testing::Test {
 protected:
  using DeviceBuffer = backend::cuda::DeviceBuffer;

  void SetUp() override {
    if (backend::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    NEURON_CUDA_CHECK(cudaSetDevice(0));
    stream_ = std::make_unique<backend::cuda::Stream>();
  }
  cudaStream_t s() const { return stream_->get(); }
  void sync() const { stream_->synchronize(); }

  std::vector<std::uint16_t> random_bf16(std::size_t n, float scale = 1.f) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<std::uint16_t> v(n);
    for (auto& e : v) e = f32_to_bf16(d(rng_));
    return v;
  }
  std::vector<float> random_f32(std::size_t n, float scale = 1.f) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (auto& e : v) e = d(rng_);
    return v;
  }
  template <class T>
  DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer b(sizeof(T) * v.size());
    NEURON_CUDA_CHECK(cudaMemcpy(b.data(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
    return b;
  }
  DeviceBuffer poisoned(std::size_t bytes) {
    DeviceBuffer b(bytes);
    NEURON_CUDA_CHECK(cudaMemset(b.data(), 0xff, bytes));
    return b;
  }
  template <class T>
  std::vector<T> download(const DeviceBuffer& b, std::size_t n) {
    sync();
    std::vector<T> v(n);
    NEURON_CUDA_CHECK(cudaMemcpy(v.data(), b.data(), sizeof(T) * n, cudaMemcpyDeviceToHost));
    return v;
  }

  std::mt19937 rng_{1234};
  std::unique_ptr<backend::cuda::Stream> stream_;
};

}  // namespace neuron::test_support
