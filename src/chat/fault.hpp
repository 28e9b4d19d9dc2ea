#pragma once
// A runtime failure raised by code that does not know where in the template it
// runs (filters, methods, tojson). The renderer catches it at the expression
// being evaluated and rethrows Error{template_error} naming that template line,
// so every message a user sees points at the line to fix.
#include <stdexcept>
#include <string>

namespace neuron::chat {

class Fault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fault(const std::string& message) { throw Fault(message); }

}  // namespace neuron::chat
