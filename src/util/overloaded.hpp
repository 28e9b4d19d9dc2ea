#pragma once
// std::visit over several lambdas. The deduction guide is spelled out because
// clang 14 does not yet deduce aggregate bases (P1816) on its own.

namespace neuron {

template <class... Fs>
struct overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

}  // namespace neuron
