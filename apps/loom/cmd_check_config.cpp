// `loom check-config`: the logic lives in the config layer (loom/config/check_config.h) so it is
// tested without the program.
#include <iostream>

#include "command.h"
#include "loom/config/check_config.h"
#include "loom/train/builtin_callbacks.h"

namespace {

int check_config_command(const std::vector<std::string>& args) {
  // The callbacks are built as `loom train` builds them, so their errors are reported here too.
  return loom::config::run_check_config(args, std::cout, std::cerr, [](const loom::config::LoadedConfig& loaded) {
    (void)loom::train::make_configured_callbacks(loaded.config.callbacks);
  });
}

}  // namespace

LOOM_COMMAND("check-config", "validate a configuration and print its effective values and parallel layout",
             check_config_command);
