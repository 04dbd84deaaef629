#include "loom/train/rank_report.h"

#include <filesystem>
#include <set>

#include "loom/core/allocator.h"
#include "loom/core/log.h"
#include "loom/data/atomic_file.h"
#include "loom/dist/functional.h"
#include "loom/train/trainer.h"

namespace loom::train {

namespace {

// Adds the bytes of t's storage once per storage.
void add_storage(const Tensor& t, std::set<const Storage*>& seen, int64_t& bytes) {
  if (!t.defined() || !t.storage()) return;
  if (!seen.insert(t.storage().get()).second) return;
  bytes += static_cast<int64_t>(t.storage()->nbytes());
}

class RankReportCallback : public Callback {
 public:
  explicit RankReportCallback(int64_t step) : step_(step) {}
  std::string name() const override { return "RankReport"; }

  void on_step_begin(CallbackContext& ctx) override {
    Trainer& t = *ctx.trainer;
    const int64_t target = step_ > 0 ? step_ : t.config().training.steps;
    measuring_ = t.state().global_step + 1 == target;
    if (!measuring_) return;
    // Everything sent from here to this step's end is this step's traffic.
    t.mesh().reset_stats();
    dist::reset_differentiable_comm_stats();
    mem_start_bytes_ = memory_stats().current_bytes;
  }

  void on_step_end(CallbackContext& ctx) override {
    if (!measuring_) return;
    measuring_ = false;
    Trainer& t = *ctx.trainer;
    dist::DeviceMesh& mesh = t.mesh();
    const HeldBytes held = measure_held_bytes(t);
    nlohmann::ordered_json sent = nlohmann::ordered_json::object(), received = nlohmann::ordered_json::object(),
                           collectives = nlohmann::ordered_json::object();
    for (const auto& [group, s] : mesh.stats_by_group()) {
      sent[group] = s.bytes_sent;
      received[group] = s.bytes_received;
      collectives[group] = s.num_collectives;
    }
    nlohmann::ordered_json groups = nlohmann::ordered_json::object();
    for (const std::string& axis : dist::DeviceMesh::axis_names()) groups[axis] = mesh.group(axis).axis();
    const dist::ParallelDims& d = mesh.dims();
    const dist::RankCoordinates c = mesh.coordinates();
    nlohmann::ordered_json j;
    j["rank"] = mesh.rank();
    j["world_size"] = mesh.world_size();
    j["step"] = ctx.metrics ? ctx.metrics->step : t.state().global_step;
    j["layout"] = {{"dp_replicate", d.dp_replicate()}, {"dp_shard", d.dp_shard()}, {"tp", d.tp()}, {"cp", d.cp()},
                   {"pp", d.pp()}, {"ep", d.ep()}, {"fsdp", d.fsdp()}, {"efsdp", d.efsdp()}};
    j["coordinates"] = {{"pp", c.pp}, {"dp_replicate", c.dp_replicate}, {"dp_shard", c.dp_shard}, {"cp", c.cp},
                        {"tp", c.tp}, {"ep", mesh.group("ep").rank()}};
    j["parameter_bytes"] = held.parameter_bytes;
    j["gradient_bytes"] = held.gradient_bytes;
    j["optimizer_bytes"] = held.optimizer_bytes;
    j["mem_start_bytes"] = mem_start_bytes_;
    j["mem_peak_bytes"] = ctx.metrics ? ctx.metrics->mem_peak_bytes : memory_stats().peak_bytes;
    j["bytes_sent_per_step"] = sent;
    j["bytes_received_per_step"] = received;
    j["collectives_per_step"] = collectives;
    // The layers' differentiable collectives (TP, CP, EP), in forward and in backward (their duals
    // and what a recompute re-issues): recompute.exclude_op's effect shows here.
    const dist::DifferentiableCommStats layer_comm = dist::differentiable_comm_stats();
    j["layer_collectives_per_step"] = {
        {"forward", {{"calls", layer_comm.forward.calls}, {"bytes_sent", layer_comm.forward.bytes_sent}}},
        {"backward", {{"calls", layer_comm.backward.calls}, {"bytes_sent", layer_comm.backward.bytes_sent}}}};
    // Which communicator each mesh axis uses: an axis spanning the whole world is "world".
    j["mesh_groups"] = groups;
    const std::string path = rank_report_path(t.options().run_dir, mesh.rank());
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    data::write_file_atomic(path, j.dump(2) + "\n");
    written_ = true;
    if (mesh.rank() == 0) log::info("rank report of step ", j["step"].get<int64_t>(), " written to ",
                                    std::filesystem::path(path).parent_path().string());
  }

  void on_train_end(CallbackContext& ctx) override {
    Trainer& t = *ctx.trainer;
    if (written_ || t.rank() != 0) return;
    log::warn("--rank-report: no report was written, step ", step_ > 0 ? step_ : t.config().training.steps,
              " was not trained in this run (it ended at step ", t.state().global_step,
              "); pass a step this run reaches");
  }

 private:
  int64_t step_;
  bool written_ = false;
  bool measuring_ = false;
  int64_t mem_start_bytes_ = 0;
};

}  // namespace

HeldBytes measure_held_bytes(Trainer& trainer) {
  HeldBytes h;
  std::set<const Storage*> params, grads;
  for (auto& [name, local] : trainer.model().module().local_parameters()) add_storage(local, params, h.parameter_bytes);
  for (const optim::NamedParam& p : trainer.optimizer().named_params()) add_storage(p.param.grad(), grads, h.gradient_bytes);
  h.optimizer_bytes = trainer.optimizer().state_bytes();
  return h;
}

std::unique_ptr<Callback> make_rank_report_callback(int64_t step) { return std::make_unique<RankReportCallback>(step); }

std::string rank_report_path(const std::string& run_dir, int rank) {
  return (std::filesystem::path(run_dir) / "rank_report" / ("rank-" + std::to_string(rank) + ".json")).string();
}

}  // namespace loom::train
