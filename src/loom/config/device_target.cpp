// context.device_target: the device a run computes on. The reference's field (its default,
// "Ascend", is MindSpore's); Loom runs on the devices it has backends for, so a configuration
// that does not write the field runs on the CPU, and one that names another device is refused at
// start-up, by check-config and train alike. `--device` sets the same field.
#include <algorithm>
#include <cctype>

#include "loom/config/checks.h"

namespace loom::config::detail {

Device read_device(const TrainConfig& c, Diagnostics& diag) {
  if (!c.context || !c.is_explicit("context.device_target")) return Device::cpu();
  const std::string& written = c.context->device_target;
  std::string name = written;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (name == "cpu") return Device::cpu();
  const std::string path = "context.device_target";
  if (name == "ascend" || name == "npu")
    diag.error(path, "'" + written + "': Loom has no Ascend backend; set context.device_target: CPU (or remove the "
                                     "field, which means CPU)");
  else if (name == "gpu" || name.rfind("cuda", 0) == 0)
    diag.error(path, "'" + written + "': this build of Loom has no CUDA backend; set context.device_target: CPU (or "
                                     "remove the field, which means CPU)");
  else
    diag.error(path, "unknown device '" + written + "'" + did_you_mean(written, {"CPU"}) + " (accepted: CPU)");
  return Device::cpu();
}

}  // namespace loom::config::detail
