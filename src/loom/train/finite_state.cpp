#include "loom/train/finite_state.h"

#include <cmath>

#include "loom/kernels/kernel_table.h"

namespace loom::train {

namespace {

// A sum of squares in double is non-finite exactly when an element is (fp32/bf16 squares fit).
bool finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !is_floating(t.dtype())) return true;
  return std::isfinite(kernels::for_tensor(t, "finite check").sum_squares(t));
}

}  // namespace

std::string first_non_finite(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  for (const auto& [name, t] : tensors)
    if (!finite(t)) return name;
  return "";
}

std::string first_non_finite(const std::map<std::string, Tensor>& tensors) {
  for (const auto& [name, t] : tensors)
    if (!finite(t)) return name;
  return "";
}

std::string agreed_non_finite(const std::string& local, dist::ProcessGroup& world) {
  // The lowest rank with a non-finite tensor names it; every rank learns that one exists.
  const int64_t mine = local.empty() ? world.size() : world.rank();
  const int64_t first = world.all_reduce_scalar(mine, dist::ReduceOp::min);
  if (first == world.size()) return "";
  if (first == world.rank()) return "'" + local + "' (rank " + std::to_string(first) + ")";
  return "a tensor of rank " + std::to_string(first);
}

}  // namespace loom::train
