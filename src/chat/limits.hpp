#pragma once
// Bounds on one render. Chat templates ship inside model files, so a template
// is untrusted input: a runaway loop, recursion or string blow-up must end in
// a clear Error{template_error}, never in an exhausted process.
#include <cstddef>
#include <cstdint>

namespace neuron::chat {

struct Limits {
  // Output of the whole render, and of any single string a template builds.
  // A full 128k-token prompt is well under 1 MiB.
  std::size_t max_output_bytes = std::size_t{32} << 20;
  // Elements of any list a template builds (range(), list * n, ...).
  std::size_t max_list_items = 1'000'000;
  // Nested macro calls (a recursive macro without a base case).
  int max_call_depth = 64;
  // Statements and expressions being evaluated inside one another, across
  // macro calls: bounds the renderer's recursion, hence its stack use.
  int max_eval_depth = 1000;
  // Statements executed plus loop iterations plus items processed by filters.
  std::uint64_t max_steps = 5'000'000;
};

}  // namespace neuron::chat
