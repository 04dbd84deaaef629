#include "loom/plan/plan_command.h"

#include <charconv>
#include <chrono>

#include "loom/config/config.h"
#include "loom/config/memory_estimate.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/plan/report.h"
#include "loom/plan/sweep.h"

namespace loom::plan {

std::string plan_usage() {
  return "usage: loom plan --config FILE --world-size N [--device cpu|h100|h200|FILE]\n"
         "                 [--device-memory BYTES|auto] [--sweep] [--json] [--set key=value ...]\n"
         "\n"
         "Predicts, without a device, what each rank of the configuration's layout on N ranks holds\n"
         "(parameters, main grads, optimizer state, activations, the peak), its FLOPs and the bytes it\n"
         "sends per optimizer step on each mesh axis, and the step time and MFU on a device profile.\n"
         "The layout is resolved exactly as `loom check-config --world-size N` resolves it.\n"
         "\n"
         "  --config FILE          the training configuration (YAML)\n"
         "  --world-size N         number of ranks (devices)\n"
         "  --device D             cpu (this machine, one rank per core; default), h100, h200, or a\n"
         "                         YAML/JSON profile file (docs/plan.md \"Device profiles\")\n"
         "  --device-memory M      bytes per rank the plan must fit, or auto (the profile's memory;\n"
         "                         default): bytes, K/M/G/T or KiB/MiB/GiB/TiB (binary), KB/MB/GB/TB\n"
         "                         (decimal), e.g. 80G, 141GiB\n"
         "  --sweep                list every valid layout of N ranks that fits, fastest first\n"
         "  --json                 print JSON (docs/plan.md \"JSON\") instead of tables\n"
         "  --set key=value        override a configuration value, as for check-config; repeatable\n"
         "\n"
         "exit status: 0 planned, 1 invalid configuration, 2 bad arguments or unreadable file\n";
}

int run_plan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string file, device_name = "cpu", memory_text = "auto";
  int world_size = 0;
  bool sweep_all = false, json = false;
  config::LoadOptions options;
  auto usage_error = [&](const std::string& why) {
    err << "error: " << why << "\n\n" << plan_usage();
    return 2;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // "--flag value" or "--flag=value".
    auto value = [&](const std::string& flag, std::string& v) -> int {
      if (a == flag) {
        if (i + 1 >= args.size()) return -1;
        v = args[++i];
        return 1;
      }
      if (a.rfind(flag + "=", 0) == 0) {
        v = a.substr(flag.size() + 1);
        return 1;
      }
      return 0;
    };
    std::string v;
    int got = 0;
    if (a == "--help" || a == "-h") {
      out << plan_usage();
      return 0;
    } else if (a == "--sweep") {
      sweep_all = true;
    } else if (a == "--json") {
      json = true;
    } else if ((got = value("--config", v)) != 0) {
      if (got < 0) return usage_error("--config needs a file: --config path/to/config.yaml");
      file = v;
    } else if ((got = value("--world-size", v)) != 0) {
      int n = 0;
      const auto [end, ec] = got > 0 ? std::from_chars(v.data(), v.data() + v.size(), n)
                                     : std::from_chars_result{v.data(), std::errc::invalid_argument};
      if (got < 0 || ec != std::errc() || end != v.data() + v.size() || n < 1)
        return usage_error("--world-size needs a whole number >= 1 (the ranks to plan for), got '" + v + "'");
      world_size = n;
    } else if ((got = value("--device", v)) != 0) {
      if (got < 0) return usage_error("--device needs cpu, h100, h200 or a profile file");
      device_name = v;
    } else if ((got = value("--device-memory", v)) != 0) {
      if (got < 0) return usage_error("--device-memory needs bytes (e.g. 80G) or auto");
      memory_text = v;
    } else if ((got = value("--set", v)) != 0) {
      if (got < 0 || v.find('=') == std::string::npos)
        return usage_error("--set needs key=value, e.g. --set training.local_batch_size=2");
      options.overrides.push_back(v);
    } else {
      return usage_error("unknown argument '" + a + "'");
    }
  }
  if (file.empty()) return usage_error("--config FILE is required");
  if (world_size < 1) return usage_error("--world-size N is required");

  DeviceProfile device;
  try {
    device = device_profile(device_name);
  } catch (const ConfigError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  int64_t device_memory = device.memory_bytes;
  if (memory_text != "auto") {
    const auto bytes = parse_byte_size(memory_text);
    if (!bytes) return usage_error("--device-memory '" + memory_text + "' is not a size: write " + kByteSizeUnits +
                                   ", or auto");
    device_memory = *bytes;
  }

  try {
    if (sweep_all) {
      const config::LoadedConfig loaded = config::load_config_checked(file, options);
      const auto start = std::chrono::steady_clock::now();
      const SweepResult r = sweep(loaded.config, world_size, device, device_memory);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (json) out << sweep_json(world_size, r.fitting).dump(2) << "\n";
      else out << sweep_text(world_size, r.fitting, r.valid);
      err << "swept " << r.candidates << " candidate layouts (" << r.valid << " valid, " << r.fitting.size()
          << " fit) in " << seconds << " s\n";
      return 0;
    }
    options.world_size = world_size;
    const config::LoadedConfig loaded = config::load_config_checked(file, options);
    for (const auto& w : loaded.warnings) err << "warning: " << w << "\n";
    const Plan plan = make_plan(loaded.config, *loaded.resolved, device, device_memory);
    if (json) out << plan_json(plan).dump(2) << "\n";
    else out << plan_text(plan);
    return 0;
  } catch (const ConfigReadError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const ConfigError& e) {
    err << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace loom::plan
