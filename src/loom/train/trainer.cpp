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
#include "loom/ops/weight_cast.h"
#include "loom/optim/grad_norm.h"
#include "loom/optim/lr_scheduler.h"
#include "loom/optim/optimizer_factory.h"
#include "loom/optim/placement_muon_sharding.h"
#include "loom/runtime/checkpoint_reader.h"
#include "loom/runtime/evaluation.h"
#include "loom/runtime/generation.h"
#include "loom/runtime/schedule.h"
#include "loom/train/builtin_callbacks.h"
#include "loom/train/finite_state.h"

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

Trainer::Trainer(config::LoadedConfig loaded, TrainerOptions options)
    : config_(std::move(loaded.config)), options_(std::move(options)) {
  LOOM_CHECK(loaded.resolved.has_value() && loaded.resolved->layout.world_size == 1, ValueError,
             "Trainer: the one-process constructor needs a configuration resolved for one rank "
             "(LoadOptions::world_size = 1)");
  owned_backend_ = runtime::make_backend(loaded.resolved->device);
  owned_runtime_ = std::make_unique<runtime::ModelRuntime>(config_, *loaded.resolved, *owned_backend_);
  runtime_ = owned_runtime_.get();
  resolved_ = std::move(*loaded.resolved);
  resolved_.require_runnable();
  build();
}

Trainer::Trainer(config::LoadedConfig loaded, runtime::ModelRuntime& runtime, TrainerOptions options)
    : config_(std::move(loaded.config)), runtime_(&runtime), options_(std::move(options)) {
  LOOM_CHECK(loaded.resolved.has_value(), ValueError, "Trainer: the configuration was loaded without a world size; "
             "load it with LoadOptions::world_size = ", world_size());
  LOOM_CHECK(loaded.resolved->layout.world_size == world_size(), ValueError, "Trainer: the configuration was "
             "resolved for ", loaded.resolved->layout.world_size, " ranks but the runtime's world has ", world_size());
  resolved_ = std::move(*loaded.resolved);
  resolved_.require_runnable();
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
  prepare_run_directory();
  // Before anything is allocated: a bad callback entry stops the run as check-config reports it.
  configured_callbacks_ = make_configured_callbacks(config_.callbacks);
  apply_thread_env();
  // MFU's denominator: the peak of the unit the step's products run on, derived once.
  peak_ = runtime_->backend().peak_flops(resolved_.model_args().compute_dtype, num_threads());
  manual_seed(static_cast<uint64_t>(config_.training.seed));
  // Async saves barrier on their own communicator, off the training thread.
  std::vector<int> everyone(static_cast<size_t>(world_size()));
  for (int r = 0; r < world_size(); ++r) everyone[static_cast<size_t>(r)] = r;
  checkpoint_group_ = std::shared_ptr<dist::ProcessGroup>(runtime_->backend().world().split("checkpoint", everyone));

  build_model();
  build_data();
  build_validation();
  build_sampling();
  build_optimizer();
  build_checkpointing();
  build_monitoring();
  if (!config_.checkpoint.load_path.empty()) resume(config_.checkpoint.load_path);
  // Nothing to train would still save (and so rewrite) the checkpoint at the end: refuse instead.
  LOOM_CHECK(state_.global_step < config_.training.steps || config_.checkpoint.load_path.empty(), ConfigError,
             "checkpoint.load_path '", config_.checkpoint.load_path, "' resumes at step ", state_.global_step,
             ", at or beyond training.steps = ", config_.training.steps, ": there is nothing left to train and "
             "nothing was written; raise training.steps to train further");
  checkpoints_->prepare_async(checkpoint_contents());
  log::info("model: ", model().module().num_parameters(), " parameters", parallel_model().pipeline() ? " on this pipeline stage" : "", ", ", model().num_layers(), " layers; ",
            state_.num_accumulation_steps, " micro-batch", state_.num_accumulation_steps > 1 ? "es" : "",
            " of ", config_.training.local_batch_size, " × ", seq_length_, " tokens per step");
  if (const auto& ramp = resolved_.layout.rampup)
    log::info("training.rampup_batch_size: the global batch grows from ", ramp->start, " by ", ramp->increment,
              " samples to ", ramp->target, " over the first ", ramp->ramp_samples, " samples (",
              resolved_.layout.final_micro_batches(), " micro-batches per step then)");
  log::info("MFU peak", world_size() == 1 ? "" : " per process (MFU uses it × the process count)", ": ",
            peak_.description);
  log::info(runtime_->backend().description());
}

void Trainer::prepare_run_directory() {
  if (options_.run_dir.empty() || rank() != 0) return;
  std::error_code ec;
  fs::create_directories(options_.run_dir, ec);
  LOOM_CHECK(!ec, IOError, "cannot create the run directory '", options_.run_dir, "': ", ec.message(),
             " (pass --output with a writable path)");
  const fs::path existing = fs::path(options_.run_dir) / "metrics.jsonl";
  if (fs::exists(existing) && fs::file_size(existing, ec) > 0)
    log::warn("run directory ", options_.run_dir, " already has metrics.jsonl: this run's steps are appended to it "
              "(nothing is overwritten); pass a new --output to keep runs apart");
}

void Trainer::build_model() {
  // Every rank initialises its own pieces with the one-process values (a resume overwrites them).
  runtime_->initialize(static_cast<uint64_t>(config_.training.seed));
  hooks_ = std::make_unique<ModelHooks>(runtime_->model_args(), runtime_->causal_lm(), parallel_model());
  follow_batch_ramp();
}

void Trainer::follow_batch_ramp() {
  // Megatron's num-microbatches calculator, updated before every step from the samples consumed
  // so far (a resumed run continues the ramp where it stopped).
  state_.num_accumulation_steps = resolved_.layout.micro_batches_at(state_.consumed_samples);
  runtime_->schedule().set_micro_batches(state_.num_accumulation_steps);
  // Injected losses (MoE balance, MTP) get the backward factor of the main loss, s / A.
  hooks_->set_backward_scale(runtime::micro_batch_backward_scale(parallel_model(), state_.num_accumulation_steps));
}

void Trainer::build_data() {
  const dist::ParallelDims& dims = resolved_.layout.dims;
  data::ShardInfo shard = data::data_parallel_shard(rank(), world_size(), dims.tp(), dims.cp(), dims.pp());
  loader_ = data::build_data_loader(resolved_.loader_options(), config_.training.local_batch_size, shard);
  seq_length_ = loader_->sample_options().sequence_length;
}

void Trainer::build_validation() {
  if (config_.training.eval_interval <= 0) return;
  const dist::ParallelDims& dims = resolved_.layout.dims;
  data::ShardInfo shard = data::data_parallel_shard(rank(), world_size(), dims.tp(), dims.cp(), dims.pp());
  // Its batches are built on this thread when an evaluation reads them: no worker prefetches
  // beside the training steps in between.
  data::LoaderOptions options = resolved_.loader_options();
  options.num_parallel_workers = 0;
  valid_loader_ = data::build_data_loader(options, config_.training.local_batch_size, shard, data::Split::valid);
  // A global batch is one step's micro-batches on every data-parallel rank, at the full global
  // batch size also while training.rampup_batch_size ramps.
  const int64_t per_epoch = valid_loader_->batches_per_epoch() / resolved_.layout.final_micro_batches();
  eval_batches_ = config_.training.eval_iters == -1 ? per_epoch : config_.training.eval_iters;
  LOOM_CHECK(per_epoch >= 1, DataError, "the validation split holds ", valid_loader_->dataset_size(),
             " samples, fewer than one global batch of ", config_.training.global_batch_size, ": give it more "
             "data (train_dataset.dataloader.config.split or sizes) or lower training.global_batch_size");
  if (eval_batches_ > per_epoch)
    log::warn("training.eval_iters = ", eval_batches_, " global batches is more than the validation split's ",
              per_epoch, ": an evaluation reads some of them twice (-1 reads the split once)");
  log::info("validation every ", config_.training.eval_interval, " steps and after the last: ", eval_batches_,
            " global batch", eval_batches_ == 1 ? "" : "es", " of ", config_.training.global_batch_size, " samples");
}

bool Trainer::validates_after(int64_t step) const {
  const int64_t every = config_.training.eval_interval;
  return every > 0 && (step % every == 0 || step == config_.training.steps);
}

EvalMetrics Trainer::validate() {
  LOOM_TRACE("step", "validation");
  // Every validation reads the split's first batches, so the curve compares point to point.
  valid_loader_->set_consumed_samples(0);
  reset_peak_memory();
  runtime::Schedule& schedule = runtime_->schedule();
  schedule.set_micro_batches(resolved_.layout.final_micro_batches());
  const runtime::LossEvaluation e = runtime::evaluate_loss(schedule, [this] { return valid_loader_->next(); },
                                                           eval_batches_, resolved_.layout.dims.num_dataset_shards());
  schedule.set_micro_batches(state_.num_accumulation_steps);
  EvalMetrics m;
  m.step = state_.global_step;
  m.loss = e.loss;
  m.perplexity = e.perplexity;
  m.tokens = e.loss_tokens;
  m.seconds = e.seconds;
  m.mem_peak_bytes = memory_stats().peak_bytes;
  return m;
}

void Trainer::build_sampling() {
  if (config_.training.sample_interval <= 0) return;
  sample_tokenizer_ = data::load_tokenizer(config_.training.sample_tokenizer);
  for (const std::string& prompt : config_.training.sample_prompts)
    sample_ids_.push_back(sample_tokenizer_->encode(prompt));
}

bool Trainer::samples_after(int64_t step) const {
  const int64_t every = config_.training.sample_interval;
  return every > 0 && (step % every == 0 || step == config_.training.steps);
}

std::vector<SampleMetrics> Trainer::sample() {
  LOOM_TRACE("step", "samples");
  runtime::GenerationOptions o;
  o.max_new_tokens = config_.training.sample_max_new_tokens;
  if (sample_tokenizer_->eos_id() >= 0) o.end_ids = {sample_tokenizer_->eos_id()};
  const int64_t positions = runtime_->model_args().max_position_embeddings;
  const dist::ParallelDims& d = resolved_.layout.dims;
  std::vector<runtime::Generation> out;
  if (d.tp() == 1 && d.cp() == 1 && d.pp() == 1 && d.ep() == 1) {
    // Every rank holds the whole model (FSDP gathers it per forward) and runs the same tokens.
    runtime::TokenGenerator generator(runtime_->causal_lm(), positions);
    out = generator.generate(sample_ids_, o);
    parallel_model().release_gathered();
  } else {
    // The layout splits the model: each token re-runs the layout's forward over the sequence.
    out = runtime::generate_without_cache(
        [this](const data::Batch& batch) { return runtime_->schedule().logits(batch); }, sample_ids_, o, positions,
        2 * d.cp() * d.tp());
  }
  std::vector<SampleMetrics> samples;
  for (size_t i = 0; i < out.size(); ++i)
    samples.push_back({state_.global_step, config_.training.sample_prompts[i],
                       sample_tokenizer_->decode_generated(out[i].ids, sample_ids_[i])});
  return samples;
}

void Trainer::build_optimizer() {
  scheduler_ = std::shared_ptr<optim::LrScheduler>(
      optim::build_lr_scheduler(config_.lr_scheduler.section, config_.training.steps));
  // The optimizer steps on what each rank owns: its local pieces of the trainable parameters.
  optim::NamedParams params;
  for (auto& [name, local] : model().module().local_parameters()) params.push_back({name, local});
  optim::OptimizerContext context;
  context.model = muon_model_info(runtime_->model_args());
  context.swap = config_.swap.enable;
  context.muon_sharding = optim::PlacementMuonSharding::of_module(model().module(), runtime_->mesh_ptr());
  optimizer_ = optim::build_optimizer(config_.optimizer.section, params, context);
  optimizer_->set_lr_scheduler(scheduler_);
  // Every rank writes its update or none does: the shards of one step never diverge.
  optimizer_->set_finite_agreement([this](const std::string& local) { return agreed_non_finite(local, mesh().world()); });
  // QK-clip takes the step's maxima as the layout gathered them, when an update is computed.
  optimizer_->set_pre_step_hook([this](optim::Optimizer& o) {
    if (o.uses_qk_clip()) o.set_qk_clip_inputs(hooks_->qk_clip_inputs());
  });
  // cpu_offload: the sharded optimizer state joins the sharded params and grads in the host pool.
  if (CachingAllocator* pool = parallel_model().optimizer_state_pool()) optimizer_->relocate_state(*pool);
}

void Trainer::build_checkpointing() {
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
  checkpoints_ = std::make_unique<CheckpointManager>(ck, rank(), world_size(),
                                                     [g = checkpoint_group_] { g->barrier(); });
}

void Trainer::build_monitoring() {
  const bool writes = rank() == 0;
  std::string tb_dir = config_.monitor.tensorboard.output_dir;
  metrics_ = std::make_unique<MetricsWriter>(
      writes && !options_.run_dir.empty() ? (fs::path(options_.run_dir) / "metrics.jsonl").string() : "",
      writes ? tb_dir : "", config_.monitor.tensorboard.log_interval);
  for (const auto& [key, value] : runtime_->backend().run_fields()) metrics_->set_run_field(key, value);
  metrics_->set_run_field("mfu_peak", peak_.description);

  ProfilerOptions po;
  po.enable = config_.profiler.enable_profiling;
  po.start_step = config_.profiler.start_step;
  po.end_step = config_.profiler.end_step;
  po.output_path = config_.profiler.output_path.value_or("");
  po.ranks = config_.profiler.profiler_rank;
  po.level = config_.profiler.profiler_level;
  po.profile_memory = config_.profiler.profile_memory;
  profiler_ = std::make_unique<Profiler>(po, rank(),
                                         options_.run_dir.empty() ? std::string("profile") : (fs::path(options_.run_dir) / "profile").string());
  profiler_->instrument(model().module());

  callbacks_ = make_builtin_callbacks(*this);
  for (auto& cb : configured_callbacks_) callbacks_.push_back(std::move(cb));
  configured_callbacks_.clear();
  // The reference's configure_max_logits_tracking: the attention layers track their max logits
  // for Muon's QK-clip or a MaxLogitsMonitor, which QK-clip brings along when none is listed.
  bool monitor_listed = false;
  for (const auto& cb : callbacks_) monitor_listed = monitor_listed || cb->name() == "MaxLogitsMonitor";
  if (optimizer_->uses_qk_clip() && !monitor_listed) callbacks_.push_back(make_max_logits_monitor());
  hooks_->set_track_max_logits(optimizer_->uses_qk_clip() || monitor_listed);
}

// ---- Resume ----------------------------------------------------------------------------------

void Trainer::resume(const std::string& load_path) {
  const bool load_optim = !config_.checkpoint.no_load_optim;
  const runtime::ResolvedLoadPath where = runtime::resolve_load_path(load_path);
  if (where.is_hf) {
    LOOM_CHECK(!load_optim, ConfigError, "checkpoint.load_path '", load_path,
               "' is a Hugging Face model folder: it has weights but no optimizer state, so training cannot resume "
               "from it; set checkpoint.no_load_optim: True to start from these weights");
    runtime_->load_weights(where.dir);
    optimizer_->refresh_masters_from_params();
    log::info("initialised the model from Hugging Face weights in ", where.dir);
    return;
  }
  // Whatever layout saved it (one process included): each rank reads the pieces it holds now.
  const runtime::LoadedCheckpoint ck = runtime::read_checkpoint_state(load_path, load_optim);
  load_sharded(ck.dir, load_optim);
  require_finite_state("checkpoint " + ck.dir + " cannot be resumed:", "it holds a diverged state; resume from an "
                       "earlier iteration_* folder (set checkpoint.load_path to it)");

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
  follow_batch_ramp();
  if (ck.extra.contains("rng")) {
    const auto& r = ck.extra["rng"];
    default_generator().set_state({r.at("seed").get<uint64_t>(), r.at("stream").get<uint64_t>(), r.at("offset").get<uint64_t>()});
  }
  if (ck.extra.contains("lr_scheduler"))
    for (const auto& w : scheduler_->load_state(ck.extra["lr_scheduler"])) log::warn(w);
  log::info("resumed from ", ck.dir, " at step ", state_.global_step, " (", state_.consumed_samples, " samples consumed)");
}

void Trainer::load_sharded(const std::string& dir, bool load_optim) {
  // Fill this rank's live local tensors in place (parameters and optimizer state).
  nn::Module& module = model().module();
  auto entries = dist::checkpoint_entries(module, module.state_dict(), optimizer_->state_dict());
  dist::load_resharded(dir, entries, load_optim, &mesh().group("dp_replicate"), config_.checkpoint.load_balanced);
  if (!load_optim) {
    optimizer_->refresh_masters_from_params();
    return;
  }
  std::map<std::string, Tensor> opt;
  for (auto& e : entries)
    if (e.optimizer) opt[e.name] = e.local;
  optimizer_->load_state_dict(opt);
}

void Trainer::require_finite_state(const std::string& what, const std::string& fix) {
  std::string local = first_non_finite(model().module().local_parameters());
  if (local.empty()) {
    local = first_non_finite(optimizer_->state_dict());
    if (!local.empty()) local = "optimizer state " + local;
  }
  const std::string where = agreed_non_finite(local, mesh().world());
  LOOM_CHECK(where.empty(), Error, what, " ", where, " holds inf or nan; ", fix);
}

CheckpointContents Trainer::checkpoint_contents() {
  CheckpointContents c;
  c.iteration = state_.global_step;
  c.epoch_num = state_.epoch;
  c.step_num = config_.training.steps;
  c.global_batch_size = config_.training.global_batch_size;
  c.consumed_samples = state_.consumed_samples;
  c.model = model().module().state_dict();
  c.model_config = config::model_section_json(config_.model);
  if (!config_.checkpoint.no_save_optim) c.optimizer = optimizer_->state_dict();
  shard_checkpoint_contents(c, model().module(), mesh().world(), config_.checkpoint.prefix,
                            config_.checkpoint.remove_redundancy);
  const RngState rng = default_generator().state();
  c.extra = {{"data", loader_->state()},
             {"rng", {{"seed", rng.seed}, {"stream", rng.stream}, {"offset", rng.offset}}},
             {"lr_scheduler", scheduler_->state()},
             {"num_accumulation_steps", state_.num_accumulation_steps},
             {"healthy", state_.healthy}};
  return c;
}

void Trainer::save_checkpoint() {
  if (!config_.checkpoint.enable_save) return;
  // Never saved, so never `latest`: a resume from it would train on nan.
  require_finite_state("the checkpoint of step " + std::to_string(state_.global_step) + " was not saved:",
                       "the previous checkpoint stays latest");
  checkpoints_->save(checkpoint_contents());
}

// ---- The loop --------------------------------------------------------------------------------

void Trainer::fire(void (Callback::*event)(CallbackContext&), StepMetrics* metrics) {
  CallbackContext ctx{this, metrics};
  for (auto& cb : callbacks_) (cb.get()->*event)(ctx);
}

int64_t Trainer::train_step(StepMetrics& m) {
  // Mixed precision: every micro-batch of the step multiplies by the same bf16 copies of the
  // weights, made at their first use and dropped before the optimizer writes the fp32 weights.
  const runtime::StepResult r = [this] {
    ops::WeightCastScope weight_casts;
    return runtime_->schedule().run([this] { return loader_->next(); }, runtime::Mode::train);
  }();
  state_.epoch = r.epoch;
  double grad_norm;
  {
    LOOM_TRACE("step", "grad norm");
    grad_norm = clip_gradients();
  }
  m.lr = optimizer_->lr_at(optimizer_->global_step());
  std::string skip = update_skip_reason(r.loss, grad_norm);
  if (skip.empty()) {
    LOOM_TRACE("step", "optimizer");
    m.lr = optimizer_->step();  // writes nothing when any rank's update would overflow
    if (!optimizer_->last_skip().empty()) skip = "the update would make " + optimizer_->last_skip() + " inf or nan";
  } else {
    optimizer_->set_global_step(optimizer_->global_step() + 1);  // the schedule still advances
  }
  count_skip(skip, r.loss, grad_norm);
  hooks_->after_optimizer_step();
  m.skipped = !skip.empty();
  m.skip_reason = skip;
  if (m.skipped) ++skipped_updates_;
  m.loss = r.loss;
  m.local_loss = r.local_loss;
  m.holds_loss = r.holds_loss;
  m.grad_norm = grad_norm;
  m.extra = r.extras;
  return r.tokens * loader_->settings().shard.count;  // every data-parallel rank's tokens
}

double Trainer::clip_gradients() {
  const dist::ParallelModel& parallel = runtime_->parallel();
  dist::ProcessGroup& world = mesh().world();
  return optim::clip_grad_norm(
      optimizer_->named_params(), config_.training.max_norm,
      [&parallel](const optim::NamedParam& p) { return parallel.replica_factor(p.name); },
      [&world](double v) { return world.all_reduce_scalar(v); });
}

std::string Trainer::update_skip_reason(double loss, double grad_norm) const {
  // Non-finite norms are never applied; with monitor.health_checkpoint set, norms above
  // global_norm_skip_threshold are skipped too.
  const auto& health = config_.monitor.health_checkpoint;
  const bool health_on = config_.is_explicit("monitor.health_checkpoint") ||
                         config_.is_explicit("monitor.health_checkpoint.global_norm_skip_threshold");
  if (!std::isfinite(loss)) return "loss is " + std::to_string(loss);
  if (!std::isfinite(grad_norm)) return "grad norm is " + std::to_string(grad_norm);
  if (health_on && grad_norm > health.global_norm_skip_threshold)
    return "grad norm " + std::to_string(grad_norm) + " is above monitor.health_checkpoint.global_norm_skip_threshold " +
           std::to_string(health.global_norm_skip_threshold);
  return "";
}

void Trainer::count_skip(const std::string& reason, double loss, double grad_norm) {
  // At most global_norm_skip_time skipped updates in a row, whatever skipped them.
  if (reason.empty()) {
    state_.consecutive_skips = 0;
    return;
  }
  const auto& health = config_.monitor.health_checkpoint;
  ++state_.consecutive_skips;
  log::warn("step ", state_.global_step + 1, ": ", reason, "; the update is skipped (", state_.consecutive_skips,
            " in a row)");
  LOOM_CHECK(state_.consecutive_skips <= health.global_norm_skip_time, Error, "training stopped at step ",
             state_.global_step + 1, ": ", state_.consecutive_skips, " updates in a row were skipped (", reason,
             "; grad norm ", grad_norm, ", loss ", loss, "), more than monitor.health_checkpoint.global_norm_skip_time = ",
             health.global_norm_skip_time, ". The run is diverging: lower lr_scheduler.learning_rate, check the "
             "data, or resume from an earlier checkpoint");
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
  const double flops_per_token = model().flops_per_token(seq_length_);
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
    follow_batch_ramp();
    hooks_->begin_step();
    const int64_t samples_per_step = state_.num_accumulation_steps * resolved_.layout.samples_per_micro_step;
    fire(&Callback::on_step_begin);
    reset_peak_memory();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t tokens = train_step(m);
    m.step_time_s = seconds_since(t0);
    state_.global_step += 1;
    state_.consumed_samples += samples_per_step;
    ++steps_this_run;
    m.step = state_.global_step;
    m.consumed_samples = state_.consumed_samples;
    m.global_batch_size = samples_per_step;
    m.tokens_per_s = static_cast<double>(tokens) / m.step_time_s;
    m.mfu = flops_per_token * m.tokens_per_s / (peak_.gflops * world_size() * 1e9);
    m.tflops_per_device = flops_per_token * m.tokens_per_s / world_size() / 1e12;
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
    metrics_->write(m);  // with what every callback added to the step
    if (validates_after(state_.global_step)) {
      const EvalMetrics e = validate();
      metrics_->write(e);
      if (!options_.quiet) log::info(format_eval_line(e));
      summary.last_val_loss = e.loss;
    }
    if (samples_after(state_.global_step)) {
      const std::vector<SampleMetrics> samples = sample();
      metrics_->write(samples);
      if (!options_.quiet)
        for (const SampleMetrics& s : samples) log::info("sample at step ", s.step, ": ", s.prompt, s.completion);
    }
    const std::string log_error = log::file_error();
    LOOM_CHECK(log_error.empty(), IOError, log_error, " (at step ", state_.global_step, "); free space or pass --output "
               "on another disk, then resume from the last checkpoint");
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
  summary.steps_run = steps_this_run;
  summary.skipped_updates = skipped_updates_;
  summary.mean_tokens_per_s = timed_steps ? tokens_per_s_sum / timed_steps : 0;
  summary.mean_mfu = timed_steps ? mfu_sum / timed_steps : 0;
  return summary;
}

}  // namespace loom::train
