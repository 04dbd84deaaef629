// Where a tensor's bytes live. `meta` tensors have shapes and dtypes but no storage: models are
// built on meta so parallelism and memory planning can act before any memory is spent.
#pragma once

#include <string>

namespace loom {

enum class DeviceType : uint8_t { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  static Device meta() { return {DeviceType::meta, 0}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_meta() const { return type == DeviceType::meta; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

// Throws DeviceError unless kernels for `device` exist in this build (today: cpu only), naming op.
void check_device_supported(const Device& device, const char* op);

}  // namespace loom
