#include "loom/models/convert.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/text.h"
#include "loom/models/registry.h"
#include "loom/models/safetensors.h"

namespace loom::models {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

constexpr const char* kModelFile = "checkpoint-model-0000000-0000001.safetensors";
constexpr const char* kConfigFile = "model_config.json";

// The model section as written into checkpoints: architecture plus the HF-named fields.
Json model_section_of(const ModelArgs& args, const Json& hf_config) {
  Json j{{"model_type", args.model_type}, {"architectures", args.architecture}};
  for (auto it = hf_config.begin(); it != hf_config.end(); ++it)
    if (it.key() != "model_type" && it.key() != "architectures") j[it.key()] = it.value();
  return j;
}

std::optional<Json> read_model_config_file(const fs::path& dir) {
  const fs::path p = dir / kConfigFile;
  if (!fs::is_regular_file(p)) return std::nullopt;
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return Json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    LOOM_THROW(CheckpointError, p.string(), ": invalid JSON: ", json_error_text(e.what()));
  }
}

// Model weights must have exactly the shapes of the model the section describes.
void check_against_model(const ModelArgs& args, const std::map<std::string, Tensor>& state, const std::string& source,
                         const std::string& fix = "Pass the configuration the checkpoint was trained with (--config).") {
  auto model = build_model(args);
  std::vector<std::string> problems;
  std::map<std::string, Shape> expected;
  for (auto& [n, p] : model->named_parameters()) expected[n] = p->global_shape;
  for (auto& [n, b] : model->named_buffers()) expected[n] = b->shape();
  for (const auto& [n, shape] : expected) {
    auto it = state.find(n);
    if (it == state.end()) problems.push_back("missing: " + n + " " + shape.str());
    else if (it->second.shape() != shape)
      problems.push_back("shape mismatch: " + n + " is " + it->second.shape().str() + " but the model needs " + shape.str());
  }
  for (const auto& [n, t] : state)
    if (!expected.count(n)) problems.push_back("unexpected: " + n + " " + t.shape().str());
  if (problems.empty()) return;
  std::ostringstream os;
  os << source << " does not match the " << args.model_type << " model of its configuration (" << problems.size()
     << " problem" << (problems.size() > 1 ? "s" : "") << "):";
  for (size_t i = 0; i < problems.size() && i < 40; ++i) os << "\n  " << problems[i];
  os << "\n" << fix;
  throw CheckpointError(os.str());
}

}  // namespace

std::string convert_from_hf(const std::string& hf_dir, const std::string& out_dir, const Json& overrides) {
  HfModel m = load_hf_model(hf_dir, overrides);
  // The weights must be the model config.json describes, or the checkpoint trains another model.
  check_against_model(m.args, m.state, hf_dir, "config.json and the weights disagree: fix config.json (or the "
                      "overrides), or use the folder the weights came from.");
  Json section = model_section_of(m.args, read_hf_config(hf_dir));
  for (auto it = overrides.begin(); it != overrides.end(); ++it) section[it.key()] = it.value();
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  LOOM_CHECK(!ec, IOError, "cannot create ", out_dir, ": ", ec.message());
  const std::string file = (fs::path(out_dir) / kModelFile).string();
  write_safetensors(file, m.state, {{"format", "loom"}, {"model_config", section.dump()}});
  std::ofstream(fs::path(out_dir) / kConfigFile) << section.dump(2) << "\n";
  return file;
}

LoomCheckpoint read_loom_checkpoint(const std::string& path) {
  fs::path p(path);
  LOOM_CHECK(fs::exists(p), CheckpointError, "checkpoint '", path, "' does not exist");
  std::vector<fs::path> files;
  if (fs::is_regular_file(p)) {
    files.push_back(p);
  } else {
    if (fs::is_regular_file(p / "latest_checkpointed_iteration.txt")) {
      std::ifstream in(p / "latest_checkpointed_iteration.txt");
      int64_t it = -1;
      in >> it;
      LOOM_CHECK(it >= 0, CheckpointError, (p / "latest_checkpointed_iteration.txt").string(),
                 " does not hold an iteration number");
      char name[32];
      std::snprintf(name, sizeof name, "iteration_%08lld", static_cast<long long>(it));
      p /= name;
    }
    const std::regex model_re(R"((.*-)?model-(\d{7})-(\d{7})\.safetensors)");
    for (const auto& e : fs::directory_iterator(p))
      if (std::regex_match(e.path().filename().string(), model_re)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    LOOM_CHECK(!files.empty(), CheckpointError, "checkpoint '", p.string(),
               "' has no <prefix>-model-<rank>-<world>.safetensors file");
  }
  LoomCheckpoint out;
  for (const fs::path& f : files) {
    SafetensorsFile file = SafetensorsFile::open(f.string());
    out.source += (out.source.empty() ? "" : ", ") + f.string();
    if (!out.model_section && file.metadata().count("model_config")) {
      try {
        out.model_section = Json::parse(file.metadata().at("model_config"));
      } catch (const nlohmann::json::parse_error& e) {
        LOOM_THROW(CheckpointError, f.string(), ": __metadata__ model_config is not JSON: ", json_error_text(e.what()));
      }
    }
    for (const auto& e : file.entries()) {
      auto it = out.state.find(e.name);
      if (it == out.state.end()) {
        out.state[e.name] = file.tensor(e.name);
        continue;
      }
      LOOM_CHECK(it->second.shape() == e.shape, CheckpointError, "tensor '", e.name, "' is ", it->second.shape().str(),
                 " in one file and ", e.shape.str(), " in ", f.string(),
                 ": the checkpoint is sharded; load it in a run with the same layout and save it from one "
                 "process (or consolidate the shards) before converting");
    }
  }
  if (!out.model_section)
    for (const fs::path& dir : {files.front().parent_path(), files.front().parent_path().parent_path()})
      if ((out.model_section = read_model_config_file(dir))) break;
  return out;
}

void convert_to_hf(const std::string& checkpoint, const std::string& out_dir, const std::optional<Json>& model_section,
                   const HfSaveOptions& options) {
  LoomCheckpoint ckpt = read_loom_checkpoint(checkpoint);
  std::optional<Json> section = model_section ? model_section : ckpt.model_section;
  LOOM_CHECK(section.has_value(), ConfigError, "checkpoint '", checkpoint,
             "' does not record its model configuration; pass --config with the training YAML (its model: "
             "section) or a JSON model section / HF config.json");
  ModelArgs args = ModelArgs::from_json(*section, "model");
  check_against_model(args, ckpt.state, ckpt.source);
  save_hf_model(out_dir, args, ckpt.state, options);
}

}  // namespace loom::models
