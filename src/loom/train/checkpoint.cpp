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
#include "loom/dist/sharded_checkpoint.h"
#include "loom/core/regular_file.h"
#include "loom/core/parallel.h"
#include "loom/core/trace.h"
#include "loom/models/safetensors.h"

namespace loom::train {

namespace fs = std::filesystem;

namespace {

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

void shard_checkpoint_contents(CheckpointContents& c, nn::Module& module, dist::ProcessGroup& world,
                               const std::optional<std::string>& prefix, bool remove_redundancy) {
  auto entries = dist::checkpoint_entries(module, c.model, c.optimizer);
  dist::ShardedSave s = dist::prepare_sharded_save(
      world, entries,
      [&prefix](bool optimizer, int rank, int world_size) {
        return optimizer ? runtime::optimizer_file_name(prefix, rank, world_size)
                         : runtime::model_file_name(prefix, rank, world_size);
      },
      remove_redundancy);
  c.model = std::move(s.model);
  c.optimizer = std::move(s.optimizer);
  // The reference writes metadata.json for multi-card checkpoints only; one process holds whole
  // tensors, which load_resharded reads without it.
  if (world.size() > 1) c.metadata = std::move(s.metadata);
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
  const fs::path final_dir = root / runtime::iteration_dir_name(c.iteration);
  const fs::path partial = final_dir.string() + ".partial";
  if (rank_ == 0) {
    std::error_code ec;
    fs::create_directories(root, ec);
    LOOM_CHECK(!ec, IOError, "cannot create checkpoint.save_path '", root.string(), "': ", ec.message());
    fs::remove_all(partial);
    fs::create_directories(partial);
  }
  if (barrier_) barrier_();
  models::write_safetensors((partial / runtime::model_file_name(options_.prefix, rank_, world_)).string(), c.model,
                            {{"format", "loom"}, {"iteration", std::to_string(c.iteration)}});
  if (!options_.no_save_optim)
    models::write_safetensors((partial / runtime::optimizer_file_name(options_.prefix, rank_, world_)).string(), c.optimizer,
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
    write_text_atomic(root / runtime::kLatestIterationFile, std::to_string(c.iteration));
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
      fs::remove_all(fs::path(options_.save_path) / runtime::iteration_dir_name(oldest), ec);
    }
  }
}

runtime::LoadedCheckpoint CheckpointManager::load(
    const std::string& load_path, bool load_optimizer,
    const std::function<std::map<std::string, Tensor>(const std::string&)>& load_hf) const {
  runtime::ResolvedLoadPath where = runtime::resolve_load_path(load_path);
  runtime::LoadedCheckpoint out;
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
    runtime::LoadedCheckpoint state = runtime::read_checkpoint_state(where.dir);
    out.common = std::move(state.common);
    out.extra = std::move(state.extra);
  }
  // The files of this rank; a checkpoint saved at another world size needs resharding (the
  // distributed layer does that from metadata.json).
  std::optional<std::string> prefix = options_.prefix;
  fs::path model_file = dir / runtime::model_file_name(prefix, rank_, world_);
  if (!fs::exists(model_file)) {
    // Accept any prefix: find "*-model-<rank>-<world>.safetensors".
    const std::string suffix = "model-" + runtime::rank_suffix(rank_, world_) + ".safetensors";
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
    const fs::path opt_file = dir / runtime::optimizer_file_name(prefix, rank_, world_);
    LOOM_CHECK(fs::exists(opt_file), CheckpointError, "checkpoint '", dir.string(), "' has no optimizer state ('",
               opt_file.filename().string(), "'); it was saved with no_save_optim. Set checkpoint.no_load_optim: True "
               "to load only the weights");
    out.optimizer = models::read_safetensors(opt_file.string(), nullptr, /*copy=*/true);
  }
  return out;
}

}  // namespace loom::train
