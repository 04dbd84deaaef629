#include "loom/plan/report.h"

#include <cstdio>
#include <sstream>

#include "loom/config/memory_estimate.h"

namespace loom::plan {

namespace {

using Json = nlohmann::ordered_json;
using config::format_bytes;

Json layout_json(const Plan& p) {
  const auto& d = p.dims;
  return Json{{"dp_replicate", d.dp_replicate()}, {"dp_shard", d.dp_shard()}, {"tp", d.tp()},     {"cp", d.cp()},
              {"pp", d.pp()},                     {"virtual_pp", p.virtual_pp}, {"ep", d.ep()},   {"fsdp", d.fsdp()},
              {"efsdp", d.efsdp()}};
}

Json device_json(const DeviceProfile& dev) {
  Json flops = Json::object();
  for (const auto& [k, v] : dev.matrix_flops) flops[k] = v;
  return Json{{"name", dev.name},
              {"devices_per_node", dev.devices_per_node},
              {"matrix_flops", flops},
              {"memory_bandwidth", dev.memory_bandwidth},
              {"intra_node_bandwidth", dev.intra_node_bandwidth},
              {"inter_node_bandwidth", dev.inter_node_bandwidth},
              {"memory_bytes", dev.memory_bytes},
              {"source", dev.source}};
}

std::string layout_name(const Plan& p) {
  const auto& d = p.dims;
  std::ostringstream o;
  o << "dp_replicate " << d.dp_replicate() << " dp_shard " << d.dp_shard() << " tp " << d.tp() << " cp " << d.cp()
    << " pp " << d.pp() << " v " << p.virtual_pp << " ep " << d.ep();
  return o.str();
}

std::string seconds(double s) {
  char b[32];
  if (s >= 1) std::snprintf(b, sizeof b, "%.3f s", s);
  else std::snprintf(b, sizeof b, "%.3f ms", s * 1e3);
  return b;
}

}  // namespace

Json plan_json(const Plan& p, bool roles) {
  Json j;
  j["world_size"] = p.world_size;
  j["layout"] = layout_json(p);
  j["device"] = device_json(p.device);
  if (roles) {
    j["roles"] = Json::array();
    for (const RolePlan& r : p.roles) {
      Json sent = Json::object();
      for (const auto& [axis, bytes] : r.bytes_sent_per_step) sent[axis] = bytes;
      j["roles"].push_back(Json{{"name", r.name},
                                {"pp_stage", r.pp_stage},
                                {"ep_rank", r.ep_rank ? Json(*r.ep_rank) : Json(nullptr)},
                                {"ranks", r.ranks},
                                {"parameter_bytes", r.state.parameter_bytes},
                                {"gradient_bytes", r.state.gradient_bytes},
                                {"optimizer_bytes", r.state.optimizer_bytes},
                                {"activation_peak_bytes", r.activation_peak_bytes},
                                {"peak_bytes", r.peak_bytes},
                                {"flops_per_step", r.flops_per_step},
                                {"bytes_sent_per_step", sent},
                                {"step_time_s", r.step_time_s},
                                {"fsdp_gathered_bytes", r.fsdp_held_bytes},
                                {"activations_in_flight", r.activations_in_flight},
                                {"peak_moment", r.peak_moment},
                                {"compute_time_s", r.compute_time_s},
                                {"memory_time_s", r.memory_time_s},
                                {"overlapped_comm_time_s", r.overlapped_comm_s},
                                {"exposed_comm_time_s", r.exposed_comm_s}});
    }
  }
  j["step_time_s"] = p.step_time_s;
  j["mfu"] = p.mfu;
  j["fits"] = p.fits;
  j["device_memory_bytes"] = p.device_memory_bytes;
  j["peak_bytes"] = p.max_peak_bytes;
  j["seq_length"] = p.seq_length;
  j["tokens_per_step"] = p.tokens_per_step;
  j["model_flops_per_step"] = p.model_flops_per_step;
  j["pipeline_bubble"] = p.bubble;
  return j;
}

std::string plan_text(const Plan& p) {
  std::ostringstream o;
  o << "layout: " << layout_name(p) << " on " << p.world_size << " ranks (fsdp " << p.dims.fsdp() << ", efsdp "
    << p.dims.efsdp() << ")\n";
  o << "device: " << p.device.name << ", " << format_bytes(p.device_memory_bytes) << " per rank, "
    << p.device.devices_per_node << " per node (" << p.device.source << ")\n";
  o << "step: " << p.tokens_per_step << " tokens of " << p.seq_length << ", " << p.model_flops_per_step
    << " model FLOPs\n\n";
  for (const RolePlan& r : p.roles) {
    o << r.name << " (" << r.ranks.size() << " rank" << (r.ranks.size() == 1 ? "" : "s") << ", first " << r.ranks.front()
      << ")\n";
    o << "  parameters      " << format_bytes(r.state.parameter_bytes) << " (" << r.state.parameter_bytes << " B)\n";
    o << "  main grads      " << format_bytes(r.state.gradient_bytes) << " (" << r.state.gradient_bytes << " B)\n";
    o << "  optimizer       " << format_bytes(r.state.optimizer_bytes) << " (" << r.state.optimizer_bytes << " B)\n";
    if (r.fsdp_held_bytes)
      o << "  fsdp gathered   " << format_bytes(r.fsdp_held_bytes) << " at the peak\n";
    o << "  activations     " << format_bytes(r.activation_peak_bytes) << " (" << r.activations_in_flight
      << " in flight)\n";
    o << "  peak            " << format_bytes(r.peak_bytes) << " (at " << r.peak_moment << ")\n";
    char f[64];
    std::snprintf(f, sizeof f, "%.4g", r.flops_per_step);
    o << "  FLOPs/step      " << f << "\n";
    o << "  sent/step      ";
    if (r.bytes_sent_per_step.empty()) o << " nothing";
    for (const auto& [axis, bytes] : r.bytes_sent_per_step) o << " " << axis << " " << format_bytes(bytes);
    o << "\n  time            " << seconds(r.step_time_s) << " (matrix " << seconds(r.compute_time_s) << ", memory "
      << seconds(r.memory_time_s) << ", overlapped comm " << seconds(r.overlapped_comm_s) << ", exposed comm "
      << seconds(r.exposed_comm_s) << ")\n";
  }
  char m[64];
  std::snprintf(m, sizeof m, "%.1f%%", p.mfu * 100);
  o << "\nstep time " << seconds(p.step_time_s) << " (pipeline bubble x" << p.bubble << "), MFU " << m << "\n";
  o << (p.fits ? "fits" : "does NOT fit") << ": peak " << format_bytes(p.max_peak_bytes) << " per rank of "
    << format_bytes(p.device_memory_bytes) << "\n";
  return o.str();
}

Json sweep_json(int world_size, const std::vector<Plan>& plans) {
  Json j;
  j["world_size"] = world_size;
  j["layouts"] = Json::array();
  for (const Plan& p : plans) j["layouts"].push_back(plan_json(p, false));
  return j;
}

std::string sweep_text(int world_size, const std::vector<Plan>& plans, size_t considered) {
  std::ostringstream o;
  o << plans.size() << " layouts of " << world_size << " ranks fit (of " << considered
    << " valid), fastest first:\n";
  for (const Plan& p : plans) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-62s step %-12s MFU %5.1f%%  peak %s\n", layout_name(p).c_str(),
                  seconds(p.step_time_s).c_str(), p.mfu * 100, format_bytes(p.max_peak_bytes).c_str());
    o << line;
  }
  return o.str();
}

}  // namespace loom::plan
