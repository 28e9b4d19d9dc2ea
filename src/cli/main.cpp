// neuron's one entry point: every subcommand's errors are caught here and
// turned into a message on stderr and a non-zero exit code.
#include <cstdio>
#include <exception>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/command.hpp"
#include "util/error.hpp"

namespace neuron::cli {

std::vector<Command>& commands() {
  static std::vector<Command> list;
  return list;
}

bool register_command(Command command) {
  commands().push_back(std::move(command));
  return true;
}

}  // namespace neuron::cli

int main(int argc, char** argv) {
  using namespace neuron;
  // stdout carries results (generated ids, JSON, the worker protocol); logs go to stderr.
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("neuron", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  CLI::App app{"neuron: an LLM node daemon for Qwen3-family models"};
  app.set_version_flag("--version", std::string("neuron ") + NEURON_VERSION);
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, cli::Run>> runs;
  for (auto& c : cli::commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    runs.emplace_back(sub, c.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every bad flag or value exits 2, as invalid settings do.
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "neuron: error (%s): %s\n", e.kind().c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "neuron: error: %s\n", e.what());
    return 1;
  }
  return 2;
}
