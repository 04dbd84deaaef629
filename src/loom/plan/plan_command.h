// `loom plan --config FILE --world-size N [--device cpu|h100|h200|FILE]
//            [--device-memory BYTES|auto] [--sweep] [--json] [--set key=value ...]`
// The command's logic, in the library so tests run it without the program (apps/loom/cmd_plan.cpp
// only registers it). Exit codes: 0 planned (whether or not it fits), 1 invalid configuration,
// 2 bad command line or unreadable file.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace loom::plan {

int run_plan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
std::string plan_usage();

}  // namespace loom::plan
