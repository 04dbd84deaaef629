#include "loom/runtime/checkpoint_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/text.h"
#include "loom/core/regular_file.h"

namespace loom::runtime {

namespace fs = std::filesystem;

namespace {

nlohmann::ordered_json read_json_file(const fs::path& path) {
  require_regular_file(path.string(), "checkpoint file", "a checkpoint's metadata must be a regular file");
  std::ifstream in(path);
  LOOM_CHECK(in.good(), CheckpointError, "cannot read '", path.string(), "'");
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const std::exception& e) {
    LOOM_THROW(CheckpointError, "'", path.string(), "' is not valid JSON (", json_error_text(e.what()),
               "); the checkpoint is damaged: load an earlier iteration");
  }
}

bool is_hf_dir(const fs::path& dir) {
  return fs::exists(dir / "model.safetensors") || fs::exists(dir / "model.safetensors.index.json");
}

bool is_iteration_dir(const fs::path& dir) {
  if (fs::exists(dir / "common.json")) return true;
  if (!fs::is_directory(dir)) return false;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") return true;
  return false;
}

// Whether a save marked this iteration unhealthy (train/: the embedding health check).
bool marked_unhealthy(const fs::path& iteration) {
  if (!fs::exists(iteration / "common.json")) return false;
  const nlohmann::ordered_json common = read_json_file(iteration / "common.json");
  return common.is_object() && common.contains("loom") && common["loom"].is_object() &&
         common["loom"].value("healthy", true) == false;
}

// MindFormers' checkpoint health monitor: resuming from a save directory passes by the
// iterations saved after a step whose embedding grad norm exceeded the threshold, back to the
// latest healthy one. An iteration folder named directly is loaded whatever its health.
fs::path latest_healthy(const fs::path& save_dir, const fs::path& latest, const std::string& field) {
  if (!marked_unhealthy(latest)) return latest;
  std::vector<fs::path> earlier;
  for (const auto& e : fs::directory_iterator(save_dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("iteration_", 0) == 0 && name.size() == 18 && e.path() < latest)
      earlier.push_back(e.path());
  }
  std::sort(earlier.rbegin(), earlier.rend());
  for (const fs::path& candidate : earlier)
    if (!marked_unhealthy(candidate)) {
      log::warn(latest.string(), " is marked unhealthy (its embedding grad norm was above monitor.health_checkpoint."
                "embedding_local_norm_threshold): resuming from ", candidate.string(), ", the latest healthy one");
      return candidate;
    }
  LOOM_THROW(CheckpointError, "every checkpoint in '", save_dir.string(), "' is marked unhealthy (the embedding grad "
             "norm was above monitor.health_checkpoint.embedding_local_norm_threshold when it was saved); set ", field,
             " to one iteration_XXXXXXXX folder to load it anyway, or train from the start");
}

}  // namespace

nlohmann::ordered_json read_checkpoint_json(const std::string& path) { return read_json_file(path); }

std::string rank_suffix(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%07d-%07d", rank, world);
  return buf;
}

std::string model_file_name(const std::optional<std::string>& prefix, int rank, int world) {
  return (prefix ? *prefix + "-" : std::string()) + "model-" + rank_suffix(rank, world) + ".safetensors";
}

std::string optimizer_file_name(const std::optional<std::string>& prefix, int rank, int world) {
  return (prefix ? *prefix + "-" : std::string()) + "opt-" + rank_suffix(rank, world) + ".safetensors";
}

std::string iteration_dir_name(int64_t iteration) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "iteration_%08lld", static_cast<long long>(iteration));
  return buf;
}

int64_t LoadedCheckpoint::global_step() const { return common.value("global_step", int64_t{0}); }
int64_t LoadedCheckpoint::consumed_samples() const {
  // The reference: consumed_samples, else global_step * saved global batch size.
  if (common.contains("consumed_samples") && !common["consumed_samples"].is_null())
    return common["consumed_samples"].get<int64_t>();
  return global_step() * global_batch_size();
}
int64_t LoadedCheckpoint::global_batch_size() const { return common.value("global_batch_size", int64_t{1}); }

ResolvedLoadPath resolve_load_path(const std::string& load_path, const std::string& field) {
  const fs::path p(load_path);
  LOOM_CHECK(fs::exists(p), CheckpointError, field, " '", load_path,
             "' does not exist: point it at a save directory, an iteration_XXXXXXXX folder or an HF model folder");
  LOOM_CHECK(fs::is_directory(p), CheckpointError, field, " '", load_path,
             "' is a file; point it at the folder that contains it");
  if (is_hf_dir(p)) return {p.string(), true};
  if (fs::exists(p / kLatestIterationFile)) {
    require_regular_file((p / kLatestIterationFile).string(), "checkpoint file", "it must be the text file a save wrote");
    std::ifstream in(p / kLatestIterationFile);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    char* end = nullptr;
    long long it = std::strtoll(text.c_str(), &end, 10);
    LOOM_CHECK(!text.empty() && end && (*end == '\0' || *end == '\n') && it >= 0, CheckpointError, "'",
               (p / kLatestIterationFile).string(), "' should hold an iteration number but holds '", text,
               "'; fix it or point ", field, " at an iteration_XXXXXXXX folder");
    fs::path dir = p / iteration_dir_name(it);
    if (!fs::exists(dir) && fs::exists(dir.string() + ".replaced")) dir = dir.string() + ".replaced";
    LOOM_CHECK(fs::exists(dir), CheckpointError, "'", (p / kLatestIterationFile).string(), "' names iteration ", it,
               " but '", dir.string(), "' does not exist; point ", field, " at an existing iteration folder");
    return {latest_healthy(p, dir, field).string(), false};
  }
  if (is_iteration_dir(p)) return {p.string(), false};
  LOOM_THROW(CheckpointError, field, " '", load_path, "' holds no checkpoint: expected ", kLatestIterationFile,
             ", an iteration folder with common.json and *.safetensors files, or an HF folder with model.safetensors");
}

LoadedCheckpoint read_checkpoint_state(const std::string& load_path, bool load_optimizer, const std::string& field) {
  ResolvedLoadPath where = resolve_load_path(load_path, field);
  LoadedCheckpoint out;
  out.dir = where.dir;
  out.is_hf = where.is_hf;
  if (where.is_hf) return out;
  const fs::path dir(where.dir);
  if (fs::exists(dir / "common.json")) {
    out.common = read_checkpoint_json(dir / "common.json");
    // The counters a resume reads must be what a save writes: a damaged file is named, not cast.
    LOOM_CHECK(out.common.is_object(), CheckpointError, "'", (dir / "common.json").string(),
               "' must hold a JSON object; the file is damaged");
    for (const char* key : {"global_step", "consumed_samples", "global_batch_size", "epoch_num", "step_num"})
      if (auto it = out.common.find(key); it != out.common.end() && !it->is_null())
        LOOM_CHECK(it->is_number_integer() && it->get<int64_t>() >= 0, CheckpointError, "'",
                   (dir / "common.json").string(), "': ", key, " must be a non-negative integer, got ", it->dump(),
                   "; the file is damaged");
    if (out.common.contains("global_batch_size") && !out.common["global_batch_size"].is_null())
      LOOM_CHECK(out.common["global_batch_size"].get<int64_t>() >= 1, CheckpointError, "'",
                 (dir / "common.json").string(), "': global_batch_size must be >= 1; the file is damaged");
    if (out.common.contains("loom")) out.extra = out.common["loom"];
  } else {
    log::warn("checkpoint '", dir.string(), "' has no common.json: step, consumed samples and data position start at 0");
  }
  if (fs::exists(dir / "metadata.json")) {
    // Every file the metadata names must exist (the reference's check).
    nlohmann::ordered_json meta = read_checkpoint_json(dir / "metadata.json");
    if (meta.contains("storage_data"))
      for (auto& [k, v] : meta["storage_data"].items())
        for (auto& f : v)
          if (f.contains("file_name"))
            LOOM_CHECK(fs::exists(dir / f["file_name"].get<std::string>()), CheckpointError, "checkpoint '", dir.string(),
                       "' is incomplete: metadata.json names '", f["file_name"].get<std::string>(), "' which is missing");
  }
  if (load_optimizer) {
    bool has_optimizer_file = false;
    for (auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      has_optimizer_file = has_optimizer_file || (name.find("opt-") != std::string::npos && e.path().extension() == ".safetensors");
    }
    LOOM_CHECK(has_optimizer_file, CheckpointError, "checkpoint '", dir.string(), "' has no optimizer state (no "
               "*-opt-*.safetensors file); it was saved with no_save_optim. Set checkpoint.no_load_optim: True to load "
               "only the weights");
  }
  return out;
}

}  // namespace loom::runtime
