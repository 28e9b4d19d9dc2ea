#pragma once
// Subcommands register themselves (one file each under src/cli), so adding a
// tool touches no shared list. A setup function declares the subcommand's
// options and returns the function that runs it and yields the exit code.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace neuron::cli {

using Run = std::function<int()>;
using Setup = std::function<Run(CLI::App& sub)>;

struct Command {
  std::string name;
  std::string description;
  Setup setup;
};

bool register_command(Command command);
std::vector<Command>& commands();

}  // namespace neuron::cli

// In one .cpp per subcommand:  NEURON_COMMAND(generate, "Generate text", setup_fn);
#define NEURON_COMMAND(name, description, setup) \
  static const bool neuron_command_registered_##name = ::neuron::cli::register_command({#name, description, setup})
