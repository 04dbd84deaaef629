// `loom convert`: HF model folders ↔ Loom checkpoints (logic in loom/models/convert.cpp).
//
//   loom convert --from-hf HF_DIR --out DIR [--set key=value ...]
//   loom convert --to-hf CKPT --out HF_DIR [--config FILE] [--dtype float32|bfloat16]
//                [--max-shard-size 5GB]
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "loom/config/config_node.h"
#include "loom/config/diagnostics.h"
#include "loom/config/yaml_reader.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/text.h"
#include "loom/models/convert.h"

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage:\n"
    "  loom convert --from-hf HF_DIR --out DIR [--set key=value ...]\n"
    "      HF folder (config.json + model.safetensors[.index.json]) -> Loom model checkpoint in DIR\n"
    "      (checkpoint-model-0000000-0000001.safetensors + model_config.json), usable as\n"
    "      checkpoint.load_path. --set overrides model fields (e.g. --set params_dtype=float32).\n"
    "  loom convert --to-hf CKPT --out HF_DIR [--config FILE] [--dtype DTYPE] [--max-shard-size SIZE]\n"
    "      Loom checkpoint (save folder, iteration folder or model .safetensors file) -> HF folder.\n"
    "      --config: the training YAML (its model: section), a JSON model section or an HF\n"
    "      config.json; needed when the checkpoint does not record its model configuration.\n"
    "      --dtype: store weights as float32 or bfloat16 (default: as saved).\n"
    "      --max-shard-size: bytes per safetensors shard (default 5GB): bytes, K/M/G/T or\n"
    "      KiB/MiB/GiB/TiB (binary), KB/MB/GB/TB (decimal), e.g. 5GB, 500MB.\n";

Json read_model_section(const std::string& path) {
  const bool yaml = path.ends_with(".yaml") || path.ends_with(".yml");
  Json doc;
  if (yaml) {
    loom::config::Diagnostics diag(path);
    loom::config::ConfigNode node = loom::config::parse_config_text(loom::config::read_config_file(path), path, diag);
    diag.throw_if_errors();
    doc = loom::config::to_json(node);
  } else {
    std::ifstream in(path);
    LOOM_CHECK(in.good(), IOError, "cannot open --config file ", path);
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      doc = Json::parse(ss.str());
    } catch (const nlohmann::json::parse_error& e) {
      LOOM_THROW(ConfigError, path, ": not valid JSON (", loom::json_error_text(e.what()),
                 "); give a YAML file ending in .yaml");
    }
  }
  if (doc.is_object() && doc.contains("model") && doc["model"].is_object()) return doc["model"];
  LOOM_CHECK(doc.is_object() && (doc.contains("model_type") || doc.contains("architectures")), ConfigError,
             path, " has no model section: expected a training YAML with model:, a JSON model section or an HF "
             "config.json (with model_type)");
  return doc;
}

int64_t parse_shard_size(const std::string& text) {
  const std::optional<int64_t> bytes = loom::parse_byte_size(text);
  LOOM_CHECK(bytes.has_value(), ValueError, "--max-shard-size '", text, "' is not a size: write ",
             loom::kByteSizeUnits);
  return *bytes;
}

// key=value with value parsed as JSON when it is JSON (numbers, true/false, lists), else a string.
void apply_set(Json& overrides, const std::string& assignment) {
  const auto eq = assignment.find('=');
  LOOM_CHECK(eq != std::string::npos && eq > 0, ValueError, "--set expects key=value, got '", assignment, "'");
  const std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  Json v;
  try {
    v = Json::parse(value);
  } catch (const nlohmann::json::parse_error&) {
    v = value;
  }
  if (value == "True" || value == "False") v = value == "True";
  overrides[key] = v;
}

int run_convert(const std::vector<std::string>& args) {
  std::string from_hf, to_hf, out, config;
  loom::models::HfSaveOptions save;
  Json overrides = Json::object();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    auto value = [&]() -> std::string {
      LOOM_CHECK(i + 1 < args.size(), ValueError, a, " needs a value\n", kUsage);
      return args[++i];
    };
    if (a == "--from-hf") from_hf = value();
    else if (a == "--to-hf") to_hf = value();
    else if (a == "--out") out = value();
    else if (a == "--config") config = value();
    else if (a == "--dtype") save.dtype = loom::dtype_from_name(value());
    else if (a == "--max-shard-size") save.max_shard_bytes = parse_shard_size(value());
    else if (a == "--set") apply_set(overrides, value());
    else LOOM_THROW(ValueError, "unknown option '", a, "'\n", kUsage);
  }
  LOOM_CHECK(from_hf.empty() != to_hf.empty(), ValueError, "give exactly one of --from-hf and --to-hf\n", kUsage);
  LOOM_CHECK(!out.empty(), ValueError, "--out DIR is required\n", kUsage);
  if (!from_hf.empty()) {
    LOOM_CHECK(config.empty() && !save.dtype, ValueError,
               "--config and --dtype apply to --to-hf; use --set key=value to change model fields");
    const std::string file = loom::models::convert_from_hf(from_hf, out, overrides);
    loom::log::info("wrote ", file);
    return 0;
  }
  LOOM_CHECK(overrides.empty(), ValueError, "--set applies to --from-hf; edit the --config file instead");
  std::optional<Json> section;
  if (!config.empty()) section = read_model_section(config);
  loom::models::convert_to_hf(to_hf, out, section, save);
  loom::log::info("wrote HF model folder ", out);
  return 0;
}

}  // namespace

LOOM_COMMAND("convert", "convert HF model folders to Loom checkpoints and back", run_convert);
