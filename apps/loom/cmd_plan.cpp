// `loom plan`: the logic lives in the plan library (loom/plan/plan_command.h) so it is tested
// without the program.
#include <iostream>

#include "command.h"
#include "loom/plan/plan_command.h"

namespace {

int plan_command(const std::vector<std::string>& args) { return loom::plan::run_plan(args, std::cout, std::cerr); }

}  // namespace

LOOM_COMMAND("plan", "predict per-rank memory, traffic and step time of a layout on N devices (or sweep layouts)",
             plan_command);
