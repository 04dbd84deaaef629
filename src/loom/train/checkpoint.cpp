#include "loom/train/checkpoint.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/log.h"
#include "loom/core/regular_file.h"
#include "loom/core/parallel.h"
#include "loom/core/trace.h"
#include "loom/models/safetensors.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLatestFile = "latest_checkpointed_iteration.txt";

std::string rank_suffix(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%07d-%07d", rank, world);
  return buf;
}

void fsync_path(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Writes text to path atomically (tmp, fsync, rename, fsync dir).
void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    LOOM_CHECK(out.good(), IOError, "cannot write '", tmp.string(), "': check that checkpoint.save_path is writable");
    out << text;
    out.flush();
    LOOM_CHECK(out.good(), IOError, "writing '", tmp.string(), "' failed (disk full?)");
  }
  fsync_path(tmp, false);
  fs::rename(tmp, path);
  fsync_path(path.parent_path(), true);
}

nlohmann::ordered_json read_json(const fs::path& path) {
  require_regular_file(path.string(), "checkpoint file", "a checkpoint's metadata must be a regular file");
  std::ifstream in(path);
  LOOM_CHECK(in.good(), CheckpointError, "cannot read '", path.string(), "'");
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const std::exception& e) {
    LOOM_THROW(CheckpointError, "'", path.string(), "' is not valid JSON (", e.what(),
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

// A copy of `t` made with every thread (the snapshot is on the training thread's critical path).
Tensor snapshot(const Tensor& t) {
  Tensor src = t.contiguous();
  Tensor out = Tensor::empty(src.shape(), src.dtype(), src.device());
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  const int64_t bytes = static_cast<int64_t>(src.nbytes());
  parallel_for(0, bytes, int64_t{1} << 20, [&](int64_t b, int64_t e) { std::memcpy(to + b, from + b, e - b); });
  return out;
}

}  // namespace

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

ResolvedLoadPath resolve_load_path(const std::string& load_path) {
  const fs::path p(load_path);
  LOOM_CHECK(fs::exists(p), CheckpointError, "checkpoint.load_path '", load_path,
             "' does not exist: point it at a save directory, an iteration_XXXXXXXX folder or an HF model folder");
  LOOM_CHECK(fs::is_directory(p), CheckpointError, "checkpoint.load_path '", load_path,
             "' is a file; point it at the folder that contains it");
  if (is_hf_dir(p)) return {p.string(), true};
  if (fs::exists(p / kLatestFile)) {
    require_regular_file((p / kLatestFile).string(), "checkpoint file", "it must be the text file a save wrote");
    std::ifstream in(p / kLatestFile);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    char* end = nullptr;
    long long it = std::strtoll(text.c_str(), &end, 10);
    LOOM_CHECK(!text.empty() && end && (*end == '\0' || *end == '\n') && it >= 0, CheckpointError, "'",
               (p / kLatestFile).string(), "' should hold an iteration number but holds '", text,
               "'; fix it or point checkpoint.load_path at an iteration_XXXXXXXX folder");
    fs::path dir = p / iteration_dir_name(it);
    if (!fs::exists(dir) && fs::exists(dir.string() + ".replaced")) dir = dir.string() + ".replaced";
    LOOM_CHECK(fs::exists(dir), CheckpointError, "'", (p / kLatestFile).string(), "' names iteration ", it,
               " but '", dir.string(), "' does not exist; point checkpoint.load_path at an existing iteration folder");
    return {dir.string(), false};
  }
  if (is_iteration_dir(p)) return {p.string(), false};
  LOOM_THROW(CheckpointError, "checkpoint.load_path '", load_path, "' holds no checkpoint: expected ", kLatestFile,
             ", an iteration folder with common.json and *.safetensors files, or an HF folder with model.safetensors");
}

CheckpointManager::CheckpointManager(CheckpointOptions options, int rank, int world_size,
                                     std::function<void()> barrier)
    : options_(std::move(options)), rank_(rank), world_(world_size), barrier_(std::move(barrier)) {}

CheckpointManager::~CheckpointManager() {
  if (writer_.joinable()) writer_.join();
}

bool CheckpointManager::should_save(int64_t global_step) const {
  return options_.enable_save && options_.save_interleaved_steps > 0 &&
         global_step % options_.save_interleaved_steps == 0;
}

void CheckpointManager::wait() {
  if (writer_.joinable()) writer_.join();
  if (writer_error_) {
    auto e = writer_error_;
    writer_error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void CheckpointManager::prepare_async(const CheckpointContents& like) {
  if (!options_.async_save || !options_.enable_save) return;
  LOOM_TRACE("io", "checkpoint snapshot buffers");
  std::vector<Tensor> buffers;
  for (const auto& [n, t] : like.model) buffers.push_back(snapshot(t));
  for (const auto& [n, t] : like.optimizer) buffers.push_back(snapshot(t));
}

void CheckpointManager::save(CheckpointContents contents) {
  LOOM_CHECK(!options_.save_path.empty(), ConfigError,
             "checkpoint.save_path is empty: set it to a directory, or set checkpoint.enable_save: False");
  wait();  // at most one save in flight
  if (!options_.async_save) {
    write(contents);
    return;
  }
  {
    LOOM_TRACE("io", "checkpoint snapshot");
    // Training goes on updating these tensors in place: the writer gets its own copies.
    for (auto& [n, t] : contents.model) t = snapshot(t);
    for (auto& [n, t] : contents.optimizer) t = snapshot(t);
  }
  writer_ = std::thread([this, c = std::move(contents)]() mutable {
    // The writer must not take cores from the compute threads: every OpenMP region of the step
    // waits for its slowest thread, so a writer at equal priority stalls training far more than
    // its own CPU time. As an idle-class thread it runs only when a core has nothing else to do.
    sched_param idle{};
    if (::sched_setscheduler(0, SCHED_IDLE, &idle) != 0)  // Linux: applies to this thread
      setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
    try {
      write(c);
    } catch (...) {
      writer_error_ = std::current_exception();
    }
  });
}

void CheckpointManager::write(const CheckpointContents& c) {
  LOOM_TRACE("io", "checkpoint write");
  const fs::path root(options_.save_path);
  const fs::path final_dir = root / iteration_dir_name(c.iteration);
  const fs::path partial = final_dir.string() + ".partial";
  if (rank_ == 0) {
    std::error_code ec;
    fs::create_directories(root, ec);
    LOOM_CHECK(!ec, IOError, "cannot create checkpoint.save_path '", root.string(), "': ", ec.message());
    fs::remove_all(partial);
    fs::create_directories(partial);
  }
  if (barrier_) barrier_();
  models::write_safetensors((partial / model_file_name(options_.prefix, rank_, world_)).string(), c.model,
                            {{"format", "loom"}, {"iteration", std::to_string(c.iteration)}});
  if (!options_.no_save_optim)
    models::write_safetensors((partial / optimizer_file_name(options_.prefix, rank_, world_)).string(), c.optimizer,
                              {{"format", "loom"}, {"iteration", std::to_string(c.iteration)}});
  if (barrier_) barrier_();
  if (rank_ == 0) {
    nlohmann::ordered_json common = {{"epoch_num", c.epoch_num},
                                     {"step_num", c.step_num},
                                     {"global_step", c.iteration},
                                     {"loss_scale", c.loss_scale},
                                     {"global_batch_size", c.global_batch_size},
                                     {"consumed_samples", c.consumed_samples},
                                     {"ckpt_status", "complete"},
                                     {"loom", c.extra}};
    write_text_atomic(partial / "common.json", common.dump(2));
    if (!c.metadata.is_null()) write_text_atomic(partial / "metadata.json", c.metadata.dump());
    if (!c.model_config.is_null()) write_text_atomic(partial / "model_config.json", c.model_config.dump(2));
    fsync_path(partial, true);
    const fs::path replaced = final_dir.string() + ".replaced";
    if (fs::exists(final_dir)) {
      fs::remove_all(replaced);
      fs::rename(final_dir, replaced);
    }
    fs::rename(partial, final_dir);
    fsync_path(root, true);
    write_text_atomic(root / kLatestFile, std::to_string(c.iteration));
    fs::remove_all(replaced);
  }
  if (barrier_) barrier_();
  last_saved_ = c.iteration;
  rotate(c.iteration);
  log::info("saved checkpoint ", final_dir.string());
}

void CheckpointManager::rotate(int64_t just_saved) {
  saved_this_run_.push_back(just_saved);
  if (options_.save_max <= 0) return;
  while (static_cast<int64_t>(saved_this_run_.size()) > options_.save_max) {
    const int64_t oldest = saved_this_run_.front();
    saved_this_run_.erase(saved_this_run_.begin());
    if (rank_ == 0 && oldest != just_saved) {
      std::error_code ec;
      fs::remove_all(fs::path(options_.save_path) / iteration_dir_name(oldest), ec);
    }
  }
}

LoadedCheckpoint CheckpointManager::load_state(const std::string& load_path, bool load_optimizer) const {
  ResolvedLoadPath where = resolve_load_path(load_path);
  LoadedCheckpoint out;
  out.dir = where.dir;
  out.is_hf = where.is_hf;
  if (where.is_hf) return out;
  const fs::path dir(where.dir);
  if (fs::exists(dir / "common.json")) {
    out.common = read_json(dir / "common.json");
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
    nlohmann::ordered_json meta = read_json(dir / "metadata.json");
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

LoadedCheckpoint CheckpointManager::load(
    const std::string& load_path, bool load_optimizer,
    const std::function<std::map<std::string, Tensor>(const std::string&)>& load_hf) const {
  ResolvedLoadPath where = resolve_load_path(load_path);
  LoadedCheckpoint out;
  out.dir = where.dir;
  out.is_hf = where.is_hf;
  if (where.is_hf) {
    LOOM_CHECK(!load_optimizer, ConfigError, "checkpoint.load_path '", load_path,
               "' is a Hugging Face model folder: it has weights but no optimizer state, so training "
               "cannot resume from it; set checkpoint.no_load_optim: True to start from these weights");
    LOOM_CHECK(static_cast<bool>(load_hf), CheckpointError, "loading HF folders is not available here");
    out.model = load_hf(where.dir);
    return out;
  }
  const fs::path dir(where.dir);
  {
    LoadedCheckpoint state = load_state(where.dir);
    out.common = std::move(state.common);
    out.extra = std::move(state.extra);
  }
  // The files of this rank; a checkpoint saved at another world size needs resharding (the
  // distributed layer does that from metadata.json).
  std::optional<std::string> prefix = options_.prefix;
  fs::path model_file = dir / model_file_name(prefix, rank_, world_);
  if (!fs::exists(model_file)) {
    // Accept any prefix: find "*-model-<rank>-<world>.safetensors".
    const std::string suffix = "model-" + rank_suffix(rank_, world_) + ".safetensors";
    for (auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        model_file = e.path();
        prefix = name.size() > suffix.size() ? std::optional<std::string>(name.substr(0, name.size() - suffix.size() - 1))
                                             : std::nullopt;
        break;
      }
    }
  }
  LOOM_CHECK(fs::exists(model_file), CheckpointError, "checkpoint '", dir.string(), "' has no model file for rank ",
             rank_, " of ", world_, " (expected '", model_file.filename().string(),
             "'); was it saved with a different number of processes or a different checkpoint.prefix?");
  out.model = models::read_safetensors(model_file.string(), nullptr, /*copy=*/true);
  if (load_optimizer) {
    const fs::path opt_file = dir / optimizer_file_name(prefix, rank_, world_);
    LOOM_CHECK(fs::exists(opt_file), CheckpointError, "checkpoint '", dir.string(), "' has no optimizer state ('",
               opt_file.filename().string(), "'); it was saved with no_save_optim. Set checkpoint.no_load_optim: True "
               "to load only the weights");
    out.optimizer = models::read_safetensors(opt_file.string(), nullptr, /*copy=*/true);
  }
  return out;
}

}  // namespace loom::train
