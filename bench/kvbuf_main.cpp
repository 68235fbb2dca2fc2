// kvbuf: the command-line front end. Exit status: 0 success, 1 a failed check or runtime error,
// 2 bad input (usage errors, including every CLI11 parse error).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>

#include "bench/cmd_common.h"

int main(int argc, char** argv) {
  using namespace kvbuf::cli;
  CLI::App app{"kvbuf: memory traffic, latency and capacity of KV-buffered linear attention"};
  app.require_subcommand(1);
  std::vector<Command> commands = {add_models_command(app), add_bytes_command(app),
                                   add_check_command(app), add_export_command(app),
                                   add_capacity_command(app), add_simulate_command(app),
                                   add_step_command(app), add_calibrate_step_command(app), add_validate_step_command(app), add_sweep_command(app),
                                   add_accuracy_command(app)};
#ifdef KVBUF_WITH_CUDA
  commands.push_back(add_calibrate_command(app));
#else
  for (const char* name : {"calibrate"}) {
    CLI::App* gpu_only = app.add_subcommand(name, std::string("kvbuf ") + name + " (CUDA builds only)");
    gpu_only->allow_extras();
    commands.push_back({gpu_only, [name]() -> int {
                          throw UsageError(std::string("kvbuf ") + name + " requires a CUDA build");
                        }});
  }
#endif
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      known |= sub->check_name(argv[1]);
    if (!known) {
      fmt::print(stderr, "kvbuf: error: unknown command '{}' (run kvbuf --help)\n", argv[1]);
      return 2;
    }
  }
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int status = app.exit(e);  // prints help (status 0) or the parse error
      return status == 0 ? 0 : 2;
    }
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
    return 0;
  } catch (const std::invalid_argument& e) {  // UsageError and the models' own argument checks
    fmt::print(stderr, "kvbuf: error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "kvbuf: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvbuf: error: {}\n", e.what());
    return 1;
  }
}
