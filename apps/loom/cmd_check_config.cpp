// `loom check-config`: the logic lives in the config layer (loom/config/check_config.h) so it is
// tested without the program.
#include <iostream>

#include "command.h"
#include "loom/config/check_config.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/train/builtin_callbacks.h"

namespace {

int check_config_command(const std::vector<std::string>& args) {
  // The callbacks are built, and LOOM_MAX_CPU_ISA read, as `loom train` does, so their errors are
  // reported here too.
  return loom::config::run_check_config(args, std::cout, std::cerr, [](const loom::config::LoadedConfig& loaded) {
    (void)loom::train::make_configured_callbacks(loaded.config.callbacks);
    (void)loom::kernels::cpu::matrix_dispatch();
  });
}

}  // namespace

LOOM_COMMAND("check-config", "validate a configuration and print its effective values and parallel layout",
             check_config_command);
