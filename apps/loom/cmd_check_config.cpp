// `loom check-config`: the logic lives in the config layer (loom/config/check_config.h) so it is
// tested without the program.
#include <iostream>

#include "command.h"
#include "loom/config/check_config.h"
#include "loom/runtime/backend.h"
#include "loom/train/builtin_callbacks.h"

namespace {

int check_config_command(const std::vector<std::string>& args) {
  // The callbacks and the backend are built as `loom train` builds them, so their errors (a bad
  // callback entry, LOOM_MAX_CPU_ISA) are reported here too.
  return loom::config::run_check_config(args, std::cout, std::cerr, [](const loom::config::LoadedConfig& loaded) {
    (void)loom::train::make_configured_callbacks(loaded.config.callbacks);
    (void)loom::runtime::make_backend(loaded.resolved ? loaded.resolved->device : loom::Device::cpu());
  });
}

}  // namespace

LOOM_COMMAND("check-config", "validate a configuration and print its effective values and parallel layout",
             check_config_command);
