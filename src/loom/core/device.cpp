#include "loom/core/device.h"

#include "loom/core/error.h"

namespace loom {

std::string Device::str() const {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda:" + std::to_string(index);
    case DeviceType::meta: return "meta";
  }
  return "?";
}

void check_device_supported(const Device& device, const char* op) {
  LOOM_CHECK(device.type == DeviceType::cpu, DeviceError, op, ": no kernel for device ",
             device.str(), " in this build (only cpu is implemented; a meta tensor must be "
             "materialised before it is computed on)");
}

}  // namespace loom
