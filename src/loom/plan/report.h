// How a plan is printed: a table per role for people, JSON for tools. The JSON keys are fixed
// (docs/plan.md "JSON"): new keys may be added, none renamed.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/plan/planner.h"

namespace loom::plan {

nlohmann::ordered_json plan_json(const Plan& plan, bool roles = true);
std::string plan_text(const Plan& plan);

// The sweep: one line per layout, fastest first.
nlohmann::ordered_json sweep_json(int world_size, const std::vector<Plan>& plans);
std::string sweep_text(int world_size, const std::vector<Plan>& plans, size_t considered);

}  // namespace loom::plan
