#include "loom/plan/device_profile.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <thread>

#include "loom/config/memory_estimate.h"
#include "loom/core/error.h"
#include "loom/runtime/cpu/cpu_backend.h"

namespace loom::plan {

namespace {

DeviceProfile hopper(const std::string& name, int64_t memory_bytes, double bandwidth, const std::string& source) {
  DeviceProfile d;
  d.name = name;
  d.devices_per_node = 8;
  d.memory_bytes = memory_bytes;
  d.matrix_flops = {{"float32", 67e12}, {"bfloat16", 989e12}, {"float16", 989e12}};
  d.memory_bandwidth = bandwidth;
  d.intra_node_bandwidth = 450e9;
  d.inter_node_bandwidth = 50e9;
  d.source = source;
  return d;
}

DeviceProfile cpu_profile() {
  // One rank per core, each at the peak the trainer's MFU uses (the CPU backend's: the unit the
  // products run on, from the CPU's flags and clock), so a plan and a run share one peak.
  const runtime::CpuBackend cpu;
  const runtime::PeakFlops fp32 = cpu.peak_flops(DType::f32, 1), bf16 = cpu.peak_flops(DType::bf16, 1);
  DeviceProfile d;
  d.name = "cpu";
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  d.devices_per_node = static_cast<int>(cores);
  // Each rank gets its share of the host.
  const int64_t host = cpu.memory_bytes();
  d.memory_bytes = host > 0 ? host / static_cast<int64_t>(cores) : int64_t{4} << 30;
  d.matrix_flops = {{"float32", fp32.gflops * 1e9}, {"bfloat16", bf16.gflops * 1e9},
                    {"float16", cpu.peak_flops(DType::f16, 1).gflops * 1e9}};
  d.memory_bandwidth = 20e9;
  d.intra_node_bandwidth = 20e9;
  d.inter_node_bandwidth = 1.25e9;
  std::string path;
  for (const auto& [key, value] : cpu.run_fields())
    if (key == "cpu_matrix_path") path = value;
  d.source = "this CPU (" + path + " matrix path, " + std::to_string(cores) +
             " cores; per core " + fp32.description + " and " + bf16.description +
             "; memory and links are documented defaults)";
  return d;
}

DeviceProfile profile_file(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    LOOM_THROW(ConfigError, "device profile ", path, ": not YAML or JSON (", e.what(), "); write the fields of "
               "docs/plan.md \"Device profiles\"");
  }
  LOOM_CHECK(root.IsMap(), ConfigError, "device profile ", path, ": expected a mapping of the profile fields "
             "(name, devices_per_node, memory_bytes, matrix_flops, memory_bandwidth, intra_node_bandwidth, "
             "inter_node_bandwidth)");
  auto number = [&](const YAML::Node& parent, const std::string& key, const std::string& where) {
    const YAML::Node n = parent[key];
    LOOM_CHECK(n && n.IsScalar(), ConfigError, "device profile ", path, ": ", where, key, " is missing; give it as a "
               "number (see docs/plan.md \"Device profiles\")");
    double v = 0;
    try {
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      LOOM_THROW(ConfigError, "device profile ", path, ":", n.Mark().line + 1, ": ", where, key, " is '", n.Scalar(),
                 "', not a number");
    }
    LOOM_CHECK(v > 0, ConfigError, "device profile ", path, ":", n.Mark().line + 1, ": ", where, key,
               " must be > 0, got ", n.Scalar());
    return v;
  };
  DeviceProfile d;
  if (const YAML::Node name = root["name"]) {
    LOOM_CHECK(name.IsScalar(), ConfigError, "device profile ", path, ":", name.Mark().line + 1,
               ": name must be a string, e.g. name: h800");
    d.name = name.Scalar();
  } else {
    d.name = std::filesystem::path(path).stem().string();
  }
  const double per_node = number(root, "devices_per_node", "");
  LOOM_CHECK(per_node == static_cast<double>(static_cast<int>(per_node)) && per_node <= 1 << 20, ConfigError,
             "device profile ", path, ": devices_per_node must be a whole number of devices (1 or more), got ",
             root["devices_per_node"].Scalar());
  d.devices_per_node = static_cast<int>(per_node);
  LOOM_CHECK(!(root["memory_gib"] && root["memory_bytes"]), ConfigError, "device profile ", path,
             ": memory_gib and memory_bytes are both given; keep one");
  d.memory_bytes = root["memory_gib"] ? static_cast<int64_t>(number(root, "memory_gib", "") * (1 << 30))
                                      : static_cast<int64_t>(number(root, "memory_bytes", ""));
  const YAML::Node flops = root["matrix_flops"];
  LOOM_CHECK(flops && flops.IsMap(), ConfigError, "device profile ", path, ": matrix_flops is missing; give a "
             "mapping of dtype to FLOP/s, e.g. matrix_flops: {float32: 6.7e13, bfloat16: 9.89e14}");
  for (const auto& kv : flops) {
    LOOM_CHECK(kv.first.IsScalar(), ConfigError, "device profile ", path, ":", kv.first.Mark().line + 1,
               ": matrix_flops keys must be dtype names (float32, bfloat16, float16)");
    const std::string dtype = kv.first.Scalar();
    LOOM_CHECK(dtype == "float32" || dtype == "bfloat16" || dtype == "float16", ConfigError, "device profile ", path,
               ":", kv.first.Mark().line + 1, ": matrix_flops.", dtype, " is not a dtype; use float32, bfloat16 "
               "or float16");
    d.matrix_flops[dtype] = number(flops, dtype, "matrix_flops.");
  }
  d.memory_bandwidth = number(root, "memory_bandwidth", "");
  d.intra_node_bandwidth = number(root, "intra_node_bandwidth", "");
  d.inter_node_bandwidth = number(root, "inter_node_bandwidth", "");
  d.source = "profile file " + path;
  return d;
}

}  // namespace

double DeviceProfile::flops_for(DType dtype) const {
  const std::string key = dtype_name(dtype);
  auto it = matrix_flops.find(key);
  LOOM_CHECK(it != matrix_flops.end(), ConfigError, "device profile '", name, "' has no matrix_flops.", key,
             " for the model's compute_dtype; add it to the profile");
  return it->second;
}

DeviceProfile device_profile(const std::string& name) {
  if (name == "cpu") return cpu_profile();
  if (name == "h100")
    return hopper("h100", int64_t{80} * 1000 * 1000 * 1000, 3.35e12, "NVIDIA H100 SXM5 datasheet (dense, no sparsity)");
  if (name == "h200")
    return hopper("h200", int64_t{141} * 1000 * 1000 * 1000, 4.8e12, "NVIDIA H200 SXM datasheet (dense, no sparsity)");
  LOOM_CHECK(std::filesystem::is_regular_file(name), ConfigError, "--device ", name, ": not a built-in profile "
             "(cpu, h100, h200) and no such file; give one of those or a YAML/JSON profile file");
  return profile_file(name);
}

}  // namespace loom::plan
