// The device a plan is for: what bounds a step's time. Matrix peak per dtype (FLOP/s a GEMM can
// reach), memory bandwidth (bytes/s the memory-bound work streams), the bandwidth one device gets
// to a peer in its node and across nodes (bytes/s one way, per device), how many devices share
// a node, and the memory each has.
//
// Built-in profiles (`--device`):
//   cpu    this machine, one rank per core: matrix peak per core = the CPU backend's peak for
//          one thread (runtime/cpu/cpu_peak.h: the matrix path's FLOP per cycle × the clock, the
//          peak a run's MFU divides by), memory the host's divided per core; 20 GB/s memory and
//          shared-memory links, 1.25 GB/s between nodes (10 GbE). Rough by design: a CPU run is
//          for checking, not speed.
//   h100   NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense bf16/fp16, 67 TFLOP/s fp32 (no tensor
//          cores), 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s bidirectional (450 GB/s each way),
//          8 per node, one 400 Gb/s NIC each (50 GB/s)
//   h200   NVIDIA H200 SXM datasheet: the H100's compute and links, 141 GB HBM3e at 4.8 TB/s
// A FILE (YAML or JSON) gives the same fields; every one is required except name:
//   name: h800
//   devices_per_node: 8
//   memory_bytes: 85899345920          # or memory_gib: 80
//   matrix_flops: {float32: 6.7e13, bfloat16: 9.89e14, float16: 9.89e14}
//   memory_bandwidth: 3.35e12          # bytes/s
//   intra_node_bandwidth: 2.0e11       # bytes/s one way, per device
//   inter_node_bandwidth: 5.0e10
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "loom/core/dtype.h"

namespace loom::plan {

struct DeviceProfile {
  std::string name;
  int devices_per_node = 1;
  int64_t memory_bytes = 0;
  std::map<std::string, double> matrix_flops;  // by dtype name: "float32", "bfloat16", "float16"
  double memory_bandwidth = 0;
  double intra_node_bandwidth = 0;
  double inter_node_bandwidth = 0;
  std::string source;  // where the numbers come from, for the report

  // The matrix peak for GEMMs in `dtype`; ConfigError naming the profile and dtype if absent.
  double flops_for(DType dtype) const;
};

// "cpu", "h100", "h200" or a profile file. ConfigError naming the field (and file) otherwise.
DeviceProfile device_profile(const std::string& name_or_file);

}  // namespace loom::plan
