#include "loom/train/trainer.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>

#include "loom/autograd/engine.h"
#include "loom/autograd/grad_mode.h"
#include "loom/config/config.h"
#include "loom/config/model_section.h"
#include "loom/core/allocator.h"
#include "loom/core/log.h"
#include "loom/core/parallel.h"
#include "loom/core/rng.h"
#include "loom/core/trace.h"
#include "loom/dist/sharded_checkpoint.h"
#include "loom/ops/elementwise.h"
#include "loom/optim/grad_norm.h"
#include "loom/optim/lr_scheduler.h"
#include "loom/optim/optimizer_factory.h"
#include "loom/train/builtin_callbacks.h"
#include "loom/train/config_json.h"
#include "loom/train/distributed.h"
#include "loom/train/hardware.h"

namespace loom::train {

namespace fs = std::filesystem;

// ---- Signals ---------------------------------------------------------------------------------

namespace {
std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(true)) {  // second Ctrl-C: give up immediately
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

bool stop_requested() { return g_stop.load(); }
void request_stop() { g_stop.store(true); }
void clear_stop_request() { g_stop.store(false); }

// ---- Construction ----------------------------------------------------------------------------

Trainer::Trainer(config::LoadedConfig loaded, const ModelFactory& model_factory, TrainerOptions options)
    : config_(std::move(loaded.config)), model_factory_(model_factory), options_(std::move(options)) {
  LOOM_CHECK(loaded.resolved.has_value(), ValueError, "Trainer: the configuration was loaded without a world size; "
             "load it with LoadOptions::world_size = ", options_.world_size);
  LOOM_CHECK(loaded.resolved->layout.world_size == options_.world_size, ValueError, "Trainer: the configuration was "
             "resolved for ", loaded.resolved->layout.world_size, " ranks but TrainerOptions::world_size is ",
             options_.world_size);
  resolved_ = std::move(*loaded.resolved);
  build();
}

Trainer::~Trainer() {
  if (checkpoints_) {
    try {
      checkpoints_->wait();
    } catch (const std::exception& e) {
      log::error("asynchronous checkpoint save failed: ", e.what());
    }
  }
}

void Trainer::build() {
  if (!options_.run_dir.empty() && options_.rank == 0) {
    std::error_code ec;
    fs::create_directories(options_.run_dir, ec);
    LOOM_CHECK(!ec, IOError, "cannot create the run directory '", options_.run_dir, "': ", ec.message(),
               " (pass --output with a writable path)");
  }
  LOOM_CHECK(!config_.lora_config, ConfigError,
             "lora_config: LoRA fine-tuning is not supported by Loom yet; remove the section to train all "
             "parameters");
  apply_thread_env();
  peak_gflops_ = peak_flops(num_threads()).gflops * options_.world_size;
  const auto& training = config_.training;
  manual_seed(static_cast<uint64_t>(training.seed));

  // Parallel layout and gradient accumulation, resolved with the configuration (check-config's too).
  const config::ParallelLayout& layout = resolved_.layout;
  state_.num_accumulation_steps = layout.num_accumulation_steps;

  // Several processes: the mesh of the layout (every limitation was checked above).
  if (options_.world_size > 1) {
    LOOM_CHECK(options_.world != nullptr && options_.world->size() == options_.world_size, DistError,
               "TrainerOptions: world_size is ", options_.world_size, " but no matching world process group was given");
    check_distributed_support(config_, layout);
    mesh_ = std::make_shared<dist::DeviceMesh>(options_.world, layout.dims);
    std::vector<int> everyone(static_cast<size_t>(options_.world_size));
    for (int r = 0; r < options_.world_size; ++r) everyone[static_cast<size_t>(r)] = r;
    checkpoint_group_ = std::shared_ptr<dist::ProcessGroup>(options_.world->split("checkpoint", everyone));
  }

  // Model on the meta device → memory policy → (FSDP shards, initialised slice by slice) or weights.
  // Strategy order (DESIGN.md): TP/SP → CP → EP → PP → recompute/swap → FSDP.
  model_ = model_factory_(resolved_.model_args());
  LOOM_CHECK(model_ != nullptr, ConfigError, "model: no model was built");
  // Injected losses (MoE balance, MTP) get the backward factor of the main loss: sense / A.
  model_->set_backward_scale(loss_sense() / static_cast<double>(state_.num_accumulation_steps));
  if (!mesh_) model_->module().materialize(static_cast<uint64_t>(training.seed));
  const int64_t total_layers = model_->num_layers() + model_->num_mtp_layers();
  auto layers = model_->layers();
  memory::MemoryPlan plan = memory::plan_memory(layers, total_layers, resolved_.recompute, resolved_.swap);
  memory_state_ = memory::apply_memory_plan(model_->module(), layers, plan, resolved_.recompute);
  if (mesh_) {
    fsdp_ = dist::apply_fsdp(model_->module(), mesh_, fsdp_options(config_.parallelism, layout));
    fsdp_->materialize(static_cast<uint64_t>(training.seed));
  }

  // Data.
  const auto& dims = layout.dims;
  data::ShardInfo shard = data::data_parallel_shard(options_.rank, options_.world_size, dims.tp(), dims.cp(), dims.pp());
  loader_ = data::build_data_loader(resolved_.loader_options(), training.local_batch_size, shard);
  seq_length_ = loader_->sample_options().sequence_length;

  // Schedule and optimizer.
  scheduler_ = std::shared_ptr<optim::LrScheduler>(optim::build_lr_scheduler(lr_scheduler_json(config_.lr_scheduler), training.steps));
  optim::NamedParams params;
  if (fsdp_) {
    for (auto& [name, shard] : fsdp_->sharded_parameters()) params.push_back({name, shard});  // steps on shards
  } else {
    for (auto& [name, p] : model_->module().named_parameters())
      if (p->trainable) params.push_back({name, p->tensor});
  }
  optim::OptimizerContext context;
  context.model = model_->muon_info();
  context.swap = config_.swap.enable;
  context.model_no_decay = model_->no_weight_decay();
  optimizer_ = optim::build_optimizer(optimizer_json(config_.optimizer), params, context);
  optimizer_->set_lr_scheduler(scheduler_);
  // cpu_offload: the sharded optimizer state joins the sharded params and grads in the host pool.
  if (fsdp_ && config_.parallelism.cpu_offload) optimizer_->relocate_state(host_pool());
  if (auto* muon = dynamic_cast<optim::Muon*>(optimizer_.get())) model_->set_track_max_logits(muon->options().qk_clip_enabled);

  // Checkpoints, metrics, profiler, callbacks.
  CheckpointOptions ck;
  const auto& c = config_.checkpoint;
  ck.enable_save = c.enable_save;
  ck.save_path = c.save_path.empty() && !options_.run_dir.empty() ? (fs::path(options_.run_dir) / "checkpoints").string() : c.save_path;
  ck.save_max = c.save_max;
  ck.save_interleaved_steps = c.save_interleaved_steps;
  ck.no_save_optim = c.no_save_optim;
  ck.async_save = c.async_save;
  ck.prefix = c.prefix;
  ck.load_path = c.load_path;
  ck.no_load_optim = c.no_load_optim;
  ck.remove_redundancy = c.remove_redundancy;
  ck.load_balanced = c.load_balanced;
  std::function<void()> barrier;
  if (checkpoint_group_) barrier = [g = checkpoint_group_] { g->barrier(); };
  checkpoints_ = std::make_unique<CheckpointManager>(ck, options_.rank, options_.world_size, barrier);

  const bool writes = options_.rank == 0;
  if (writes && !options_.run_dir.empty()) {
    const fs::path existing = fs::path(options_.run_dir) / "metrics.jsonl";
    std::error_code ec;
    if (fs::exists(existing) && fs::file_size(existing, ec) > 0)
      log::warn("run directory ", options_.run_dir, " already has metrics.jsonl: this run's steps are appended to it "
                "(nothing is overwritten); pass a new --output to keep runs apart");
  }
  std::string tb_dir = config_.monitor.tensorboard.output_dir;
  metrics_ = std::make_unique<MetricsWriter>(
      writes && !options_.run_dir.empty() ? (fs::path(options_.run_dir) / "metrics.jsonl").string() : "",
      writes ? tb_dir : "", config_.monitor.tensorboard.log_interval);

  ProfilerOptions po;
  po.enable = config_.profiler.enable_profiling;
  po.start_step = config_.profiler.start_step;
  po.end_step = config_.profiler.end_step;
  po.output_path = config_.profiler.output_path.value_or("");
  po.ranks = config_.profiler.profiler_rank;
  po.level = config_.profiler.profiler_level;
  po.profile_memory = config_.profiler.profile_memory;
  profiler_ = std::make_unique<Profiler>(po, options_.rank,
                                         options_.run_dir.empty() ? std::string("profile") : (fs::path(options_.run_dir) / "profile").string());
  profiler_->instrument(model_->module());

  callbacks_ = make_builtin_callbacks(*this);
  register_builtin_callbacks();
  for (size_t i = 0; i < config_.callbacks.size(); ++i) {
    const auto& cb = config_.callbacks[i];
    callbacks_.push_back(CallbackRegistry::instance().create(cb.type, cb.extras, "callbacks[" + std::to_string(i) + "]"));
  }

  if (!c.load_path.empty()) resume(c.load_path);
  checkpoints_->prepare_async(checkpoint_contents());
  log::info("model: ", model_->module().num_parameters(), " parameters, ", model_->num_layers(), " layers; ",
            state_.num_accumulation_steps, " micro-batch", state_.num_accumulation_steps > 1 ? "es" : "",
            " of ", training.local_batch_size, " × ", seq_length_, " tokens per step; peak ",
            peak_flops(num_threads()).description);
}

// ---- Resume ----------------------------------------------------------------------------------

void Trainer::resume(const std::string& load_path) {
  const bool load_optim = !config_.checkpoint.no_load_optim;
  const ResolvedLoadPath where = resolve_load_path(load_path);
  // Sharded runs, and checkpoints saved by several processes, load through the resharding path.
  const bool resharded = !where.is_hf && (mesh_ || std::filesystem::exists(fs::path(where.dir) / "metadata.json"));
  LoadedCheckpoint ck;
  if (resharded) {
    ck = checkpoints_->load_state(load_path);
    load_resharded(ck.dir, load_optim);
  } else if (where.is_hf && fsdp_) {
    LOOM_CHECK(!load_optim, ConfigError, "checkpoint.load_path '", load_path,
               "' is a Hugging Face model folder: it has weights but no optimizer state, so training cannot resume "
               "from it; set checkpoint.no_load_optim: True to start from these weights");
    fsdp_->load_full_state_dict(model_->load_hf(where.dir));
    optimizer_->refresh_masters_from_params();
    log::info("initialised the model from Hugging Face weights in ", where.dir);
    return;
  } else {
    ck = checkpoints_->load(load_path, load_optim, [this](const std::string& dir) { return model_->load_hf(dir); });
    model_->module().load_state_dict(ck.model, true, ck.dir);
    if (ck.is_hf) {
      optimizer_->refresh_masters_from_params();
      log::info("initialised the model from Hugging Face weights in ", ck.dir);
      return;
    }
    if (load_optim) optimizer_->load_state_dict(ck.optimizer);
    else optimizer_->refresh_masters_from_params();
  }

  // The reference: a changed global batch size rescales the step so the schedule position
  // follows the samples seen.
  int64_t step = ck.global_step();
  const int64_t saved_gbs = ck.global_batch_size(), gbs = config_.training.global_batch_size;
  if (saved_gbs != gbs && saved_gbs > 0) {
    step = static_cast<int64_t>(static_cast<double>(step) * saved_gbs / gbs);
    log::warn("the checkpoint was saved with global_batch_size ", saved_gbs, " and this run uses ", gbs,
              ": resuming at step ", step, " so the learning-rate schedule follows the samples seen");
  }
  state_.global_step = step;
  state_.consumed_samples = ck.consumed_samples();
  optimizer_->set_global_step(step);
  loader_->set_consumed_samples(state_.consumed_samples);
  state_.epoch = loader_->epoch();
  if (ck.extra.contains("rng")) {
    const auto& r = ck.extra["rng"];
    default_generator().set_state({r.at("seed").get<uint64_t>(), r.at("stream").get<uint64_t>(), r.at("offset").get<uint64_t>()});
  }
  if (ck.extra.contains("lr_scheduler"))
    for (const auto& w : scheduler_->load_state(ck.extra["lr_scheduler"])) log::warn(w);
  log::info("resumed from ", ck.dir, " at step ", state_.global_step, " (", state_.consumed_samples, " samples consumed)");
}

void Trainer::load_resharded(const std::string& dir, bool load_optim) {
  // Fill this rank's live shards (or whole tensors) in place, whatever layout saved them.
  std::map<std::string, Tensor> model = fsdp_ ? fsdp_->sharded_state_dict() : model_->module().state_dict();
  std::unique_ptr<dist::ProcessGroup> alone;
  dist::ProcessGroup* group = mesh_ ? &mesh_->world() : nullptr;
  if (!group) {
    alone = dist::make_single_rank_group("world");
    group = alone.get();
  }
  auto entries = dist::checkpoint_entries(fsdp_.get(), *group, model, optimizer_->state_dict());
  dist::load_resharded(dir, entries, load_optim, mesh_ ? &mesh_->group("dp_replicate") : nullptr,
                       config_.checkpoint.load_balanced);
  if (!load_optim) {
    optimizer_->refresh_masters_from_params();
    return;
  }
  std::map<std::string, Tensor> opt;
  for (auto& e : entries)
    if (e.optimizer) opt[e.name] = e.local;
  optimizer_->load_state_dict(opt);
}

double Trainer::loss_sense() const {
  if (options_.world_size <= 1 || !config_.parallelism.disable_gradient_division) return 1.0;
  return 1.0 / static_cast<double>(options_.world_size / std::max(1, config_.parallelism.pipeline_parallel));
}

CheckpointContents Trainer::checkpoint_contents() {
  CheckpointContents c;
  c.iteration = state_.global_step;
  c.epoch_num = state_.epoch;
  c.step_num = config_.training.steps;
  c.global_batch_size = config_.training.global_batch_size;
  c.consumed_samples = state_.consumed_samples;
  c.model = model_->module().state_dict();
  c.model_config = config::model_section_json(config_.model);
  if (!config_.checkpoint.no_save_optim) c.optimizer = optimizer_->state_dict();
  if (mesh_) shard_checkpoint_contents(c, fsdp_.get(), mesh_->world(), config_.checkpoint.prefix,
                                       config_.checkpoint.remove_redundancy);
  const RngState rng = default_generator().state();
  c.extra = {{"data", loader_->state()},
             {"rng", {{"seed", rng.seed}, {"stream", rng.stream}, {"offset", rng.offset}}},
             {"lr_scheduler", scheduler_->state()},
             {"num_accumulation_steps", state_.num_accumulation_steps}};
  return c;
}

void Trainer::save_checkpoint() {
  if (!config_.checkpoint.enable_save) return;
  checkpoints_->save(checkpoint_contents());
}

// ---- The loop --------------------------------------------------------------------------------

void Trainer::fire(void (Callback::*event)(CallbackContext&), StepMetrics* metrics) {
  CallbackContext ctx{this, metrics};
  for (auto& cb : callbacks_) (cb.get()->*event)(ctx);
}

void Trainer::train_step(StepMetrics& m) {
  const int64_t A = state_.num_accumulation_steps;
  optim::NamedParams params = optimizer_->named_params();
  for (auto& p : params) p.param.set_grad(Tensor());
  if (fsdp_) fsdp_->zero_grad();
  const double sense = loss_sense();
  double loss_sum = 0;
  std::map<std::string, double> extras;
  for (int64_t micro = 0; micro < A; ++micro) {
    data::Batch batch;
    {
      LOOM_TRACE("step", "next batch");
      batch = loader_->next();
    }
    state_.epoch = batch.epoch;
    ForwardResult r;
    {
      LOOM_TRACE("step", "forward");
      r = model_->forward(batch);
    }
    // loss / A, backward with sense 1/(world/pp) (1 on one process) — the reference's
    // _forward_backward; FSDP then sums the grads over the data-parallel ranks.
    Tensor scaled = A > 1 ? ops::scale(r.loss, 1.0 / static_cast<double>(A)) : r.loss;
    {
      LOOM_TRACE("step", "backward");
      if (sense == 1.0) autograd::backward(scaled);
      else autograd::backward(scaled, Tensor::full(scaled.shape(), sense, scaled.dtype()));
    }
    loss_sum += r.loss.item() / static_cast<double>(A);
    for (const auto& [k, v] : r.extras) extras[k] += v / static_cast<double>(A);
  }
  optim::ReplicaFactorFn replica_factor;
  optim::AllReduceSumFn all_reduce_sum;
  if (mesh_) {
    fsdp_->finish_backward();
    // The logged loss is the mean over all ranks (the reference's all_reduce(SUM) / world).
    loss_sum = mean_over_ranks(mesh_->world(), loss_sum);
    for (auto& [k, v] : extras) v = mean_over_ranks(mesh_->world(), v);
    replica_factor = [f = fsdp_.get()](const optim::NamedParam& p) { return static_cast<double>(f->replica_factor(p.name)); };
    all_reduce_sum = [m = mesh_.get()](double v) { return m->world().all_reduce_scalar(v); };
  }
  const double max_norm = config_.training.max_norm;
  double grad_norm;
  {
    LOOM_TRACE("step", "grad norm");
    grad_norm = optim::clip_grad_norm(params, max_norm, replica_factor, all_reduce_sum);
  }
  // Health check: non-finite norms are never applied; with monitor.health_checkpoint set,
  // norms above global_norm_skip_threshold are skipped too, at most global_norm_skip_time in a row.
  const auto& health = config_.monitor.health_checkpoint;
  const bool health_on = config_.is_explicit("monitor.health_checkpoint") ||
                         config_.is_explicit("monitor.health_checkpoint.global_norm_skip_threshold");
  bool skip = !std::isfinite(grad_norm) || !std::isfinite(loss_sum);
  if (!skip && health_on && grad_norm > health.global_norm_skip_threshold) skip = true;
  m.lr = optimizer_->lr_at(optimizer_->global_step());
  if (skip) {
    ++state_.consecutive_skips;
    log::warn("step ", state_.global_step + 1, ": ",
              !std::isfinite(loss_sum) ? "loss is " + std::to_string(loss_sum)
                                       : "grad norm " + std::to_string(grad_norm) + (std::isfinite(grad_norm) ? " is above monitor.health_checkpoint.global_norm_skip_threshold " + std::to_string(health.global_norm_skip_threshold) : ""),
              "; the update is skipped (", state_.consecutive_skips, " in a row)");
    LOOM_CHECK(state_.consecutive_skips <= health.global_norm_skip_time, Error, "training stopped at step ",
               state_.global_step + 1, ": ", state_.consecutive_skips, " updates in a row were skipped (grad norm ",
               grad_norm, ", loss ", loss_sum, "), more than monitor.health_checkpoint.global_norm_skip_time = ",
               health.global_norm_skip_time, ". The run is diverging: lower lr_scheduler.learning_rate, check the "
               "data, or resume from an earlier checkpoint");
    optimizer_->set_global_step(optimizer_->global_step() + 1);  // the schedule still advances
  } else {
    state_.consecutive_skips = 0;
    if (auto* muon = dynamic_cast<optim::Muon*>(optimizer_.get())) {
      auto qk = model_->take_qk_clip_inputs();
      if (mesh_) max_over_ranks(mesh_->world(), qk);
      muon->set_qk_clip_inputs(std::move(qk));
    }
    LOOM_TRACE("step", "optimizer");
    m.lr = optimizer_->step();
  }
  if (mesh_)  // routing counts of every data-parallel rank (the same expert-bias update everywhere)
    for (Tensor& t : model_->data_parallel_sums()) mesh_->group("batch").all_reduce(t);
  model_->after_optimizer_step();
  m.skipped = skip;
  m.loss = loss_sum;
  m.grad_norm = grad_norm;
  m.extra = extras;
}

TrainSummary Trainer::train() {
  if (options_.install_signal_handlers) {
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }
  TrainSummary summary;
  summary.run_dir = options_.run_dir;
  summary.first_step = state_.global_step;
  const int64_t max_steps = config_.training.steps;
  const int64_t samples_per_step = state_.num_accumulation_steps * config_.training.local_batch_size *
                                   loader_->settings().shard.count;
  const double flops_per_token = model_->flops_per_token(seq_length_);
  fire(&Callback::on_begin);
  fire(&Callback::on_train_begin);
  double tokens_per_s_sum = 0, mfu_sum = 0;
  int64_t timed_steps = 0;
  const auto run_start = std::chrono::steady_clock::now();
  int64_t steps_this_run = 0;
  while (state_.global_step < max_steps && !stop_requested()) {
    const int64_t epoch_before = state_.epoch;
    StepMetrics m;
    m.max_steps = max_steps;
    profiler_->on_step_begin(state_.global_step + 1);
    fire(&Callback::on_step_begin);
    reset_peak_memory();
    const auto t0 = std::chrono::steady_clock::now();
    train_step(m);
    m.step_time_s = seconds_since(t0);
    state_.global_step += 1;
    state_.consumed_samples += samples_per_step;
    ++steps_this_run;
    m.step = state_.global_step;
    m.consumed_samples = state_.consumed_samples;
    m.global_batch_size = samples_per_step;
    const double tokens = static_cast<double>(samples_per_step) * static_cast<double>(seq_length_);
    m.tokens_per_s = tokens / m.step_time_s;
    m.mfu = flops_per_token * m.tokens_per_s / (peak_gflops_ * 1e9);
    m.tflops_per_device = flops_per_token * m.tokens_per_s / options_.world_size / 1e12;
    const MemoryStats mem = memory_stats();
    m.mem_current_bytes = mem.current_bytes;
    m.mem_peak_bytes = mem.peak_bytes;
    const double elapsed = seconds_since(run_start);
    m.time_s = elapsed;
    m.eta_s = elapsed / static_cast<double>(steps_this_run) * static_cast<double>(max_steps - state_.global_step);
    if (steps_this_run == 1) summary.first_loss = m.loss;
    summary.last_loss = m.loss;
    if (steps_this_run > 1) {  // the first step pays for warm-up (allocations, page faults)
      tokens_per_s_sum += m.tokens_per_s;
      mfu_sum += m.mfu;
      ++timed_steps;
    }
    if (state_.epoch != epoch_before) fire(&Callback::on_epoch_end);
    fire(&Callback::on_step_end, &m);
    if (state_.epoch != epoch_before) fire(&Callback::on_epoch_begin);
    profiler_->on_step_end(state_.global_step);
  }
  summary.interrupted = stop_requested() && state_.global_step < max_steps;
  if (summary.interrupted) log::warn("stopping at step ", state_.global_step, " on request (Ctrl-C / SIGTERM)");
  fire(&Callback::on_train_end);
  fire(&Callback::on_end);
  checkpoints_->wait();
  metrics_->flush();
  summary.last_step = state_.global_step;
  summary.mean_tokens_per_s = timed_steps ? tokens_per_s_sum / timed_steps : 0;
  summary.mean_mfu = timed_steps ? mfu_sum / timed_steps : 0;
  return summary;
}

}  // namespace loom::train
