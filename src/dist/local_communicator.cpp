#include <cstring>

#include "dist/communicator.hpp"

namespace neuron::dist {

void LocalCommunicator::all_gather(const void* in, void* out, std::size_t count, DType dtype, void*) {
  if (in != out) std::memmove(out, in, count * dtype_size(dtype));
}

float sanity_check(Communicator& comm) {
  float one = 1.0f;
  comm.all_reduce_sum(&one, 1, DType::f32);
  return one;
}

}  // namespace neuron::dist
