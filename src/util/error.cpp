#include "util/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace neuron {

void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "neuron: internal invariant broken: %s (%s:%d)\n", expr, file, line);
  std::abort();
}

}  // namespace neuron
