#include "loom/data/data_loader.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/dataset_builder.h"
#include "loom/data/numpy_random.h"

namespace loom::data {

namespace {

// Batch tensors live in loader-owned host memory, outside the device allocator's statistics:
// prefetched batches are inputs waiting their turn, not model memory.
Tensor host_tensor(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  const size_t rounded = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  void* p = std::aligned_alloc(64, rounded);
  LOOM_CHECK(p != nullptr, Error, "data loader: out of memory allocating a ", bytes, "-byte batch column");
  return Tensor::from_blob(p, shape, dtype, [](void* q) { std::free(q); });
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

ShardInfo data_parallel_shard(int64_t global_rank, int64_t world_size, int64_t tensor_parallel,
                              int64_t context_parallel, int64_t pipeline_parallel) {
  LOOM_CHECK(tensor_parallel >= 1 && context_parallel >= 1 && pipeline_parallel >= 1, ValueError,
             "data_parallel_shard: parallel sizes must be >= 1");
  const int64_t model = tensor_parallel * context_parallel * pipeline_parallel;
  LOOM_CHECK(world_size % model == 0 && world_size >= model, ValueError, "world size ", world_size,
             " is not divisible by tensor_parallel*context_parallel*pipeline_parallel = ", model);
  ShardInfo s;
  s.count = world_size / model;
  s.rank = global_rank % (world_size / pipeline_parallel) / tensor_parallel / context_parallel;
  return s;
}

DataLoader::DataLoader(std::shared_ptr<const TokenSampleDataset> dataset, SampleOptions sample,
                       LoaderSettings settings)
    : dataset_(std::move(dataset)), sample_(sample), settings_(settings) {
  LOOM_CHECK(dataset_ != nullptr, ValueError, "DataLoader needs a dataset");
  LOOM_CHECK(settings_.local_batch_size >= 1, ConfigError, "training.local_batch_size must be >= 1, got ",
             settings_.local_batch_size);
  LOOM_CHECK(settings_.shard.count >= 1 && settings_.shard.rank >= 0 && settings_.shard.rank < settings_.shard.count,
             ValueError, "data-parallel shard ", settings_.shard.rank, " of ", settings_.shard.count, " is invalid");
  LOOM_CHECK(dataset_->sample_length() == sample_.text_length(), ValueError, "the dataset yields ",
             dataset_->sample_length(), " tokens per sample but seq_length ", sample_.sequence_length,
             " needs ", sample_.text_length());
  settings_.prefetch_size = std::max<int64_t>(settings_.prefetch_size, 1);
  dataset_size_ = dataset_->size();
  chunk_ = settings_.local_batch_size * settings_.shard.count;
  LOOM_CHECK(dataset_size_ > 0, DataError, "the training dataset has no samples of seq_length ",
             sample_.sequence_length, " (it holds fewer tokens than one sample; add data or lower "
             "train_dataset.dataloader.config.seq_length)");
  LOOM_CHECK(!settings_.drop_remainder || dataset_size_ >= chunk_, DataError, "the training dataset has ",
             dataset_size_, " samples, fewer than one global micro-batch of local_batch_size x data "
             "parallel = ", chunk_, "; with train_dataset.drop_remainder: True no batch can be formed "
             "(add data, raise sizes, or set drop_remainder: False)");
  start_workers();
}

DataLoader::~DataLoader() { stop_workers(); }

int64_t DataLoader::batches_per_epoch() const {
  return settings_.drop_remainder ? dataset_size_ / chunk_ : ceil_div(dataset_size_, chunk_);
}

int64_t DataLoader::samples_per_epoch() const {
  return settings_.drop_remainder ? dataset_size_ / chunk_ * chunk_ : dataset_size_;
}

int64_t DataLoader::consumed_samples() const {
  return position_.epoch * samples_per_epoch() + position_.offset;
}

DataLoader::Position DataLoader::position_after(const Position& start, int64_t batches) const {
  const int64_t usable = samples_per_epoch();
  const int64_t left = std::max<int64_t>(usable - start.offset, 0);
  const int64_t first = settings_.drop_remainder ? left / chunk_ : ceil_div(left, chunk_);
  if (batches < first) return {start.epoch, start.offset + batches * chunk_};
  const int64_t rest = batches - first;
  const int64_t per_epoch = batches_per_epoch();
  return {start.epoch + 1 + rest / per_epoch, (rest % per_epoch) * chunk_};
}

DataLoader::Position DataLoader::advance(const Position& p) const { return position_after(p, 1); }

std::shared_ptr<const std::vector<int64_t>> DataLoader::epoch_permutation(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(permutation_mutex_);
  auto it = permutations_.find(epoch);
  if (it != permutations_.end()) return it->second;
  auto perm = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(dataset_size_));
  for (int64_t i = 0; i < dataset_size_; ++i) (*perm)[static_cast<size_t>(i)] = i;
  NumpyRandomState rng(static_cast<uint32_t>(settings_.shuffle_seed + static_cast<uint64_t>(epoch)));
  rng.shuffle(std::span<int64_t>(*perm));
  permutations_[epoch] = perm;
  while (permutations_.size() > 3) permutations_.erase(permutations_.begin());
  return perm;
}

Batch DataLoader::build_batch(const Position& p) const {
  const int64_t remaining = dataset_size_ - p.offset;
  const bool partial = remaining < chunk_;
  const int64_t rows = partial ? ceil_div(remaining, settings_.shard.count) : settings_.local_batch_size;
  const int64_t first = p.offset + settings_.shard.rank * rows;
  const int64_t S = sample_.sequence_length;
  Batch b;
  b.epoch = p.epoch;
  b.input_ids = host_tensor({rows, S}, DType::i32);
  b.labels = host_tensor({rows, S}, DType::i32);
  b.loss_mask = host_tensor({rows, S}, DType::f32);
  b.position_ids = host_tensor({rows, S}, DType::i32);
  const int64_t K = sample_.document_ends_length();
  if (sample_.emits_document_ends()) {
    b.document_ends = host_tensor({rows, K}, DType::i32);
    b.actual_seq_len = host_tensor({rows, K}, DType::i32);
  }
  std::shared_ptr<const std::vector<int64_t>> perm;
  if (settings_.shuffle) perm = epoch_permutation(p.epoch);
  std::vector<int64_t> text(static_cast<size_t>(sample_.text_length()));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t position = (first + i) % dataset_size_;  // a partial last chunk wraps to the start
    const int64_t index = perm ? (*perm)[static_cast<size_t>(position)] : position;
    b.sample_indices.push_back(index);
    dataset_->read_sample(index, text);
    SampleColumns cols;
    cols.input_ids = {b.input_ids.data<int32_t>() + i * S, static_cast<size_t>(S)};
    cols.labels = {b.labels.data<int32_t>() + i * S, static_cast<size_t>(S)};
    cols.loss_mask = {b.loss_mask.data<float>() + i * S, static_cast<size_t>(S)};
    cols.position_ids = {b.position_ids.data<int32_t>() + i * S, static_cast<size_t>(S)};
    if (b.document_ends.defined()) {
      cols.document_ends = {b.document_ends.data<int32_t>() + i * K, static_cast<size_t>(K)};
    }
    build_sample(text, sample_, false, cols);
    if (b.actual_seq_len.defined()) {
      const int32_t* ends = b.document_ends.data<int32_t>() + i * K;
      int32_t* out = b.actual_seq_len.data<int32_t>() + i * K;
      for (int64_t k = 0; k < K; ++k) out[k] = ends[k] + static_cast<int32_t>(i * S);
    }
  }
  return b;
}

void DataLoader::start_workers() {
  pipeline_start_ = position_;
  next_claim_ = 0;
  next_deliver_ = 0;
  stop_ = false;
  failed_ = false;
  ready_.clear();
  for (int64_t i = 0; i < settings_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  workers_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  ready_.clear();
}

void DataLoader::worker_loop() {
  const int64_t window = settings_.prefetch_size + settings_.num_workers;
  while (true) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      workers_cv_.wait(lock, [&] { return stop_ || (!failed_ && next_claim_ < next_deliver_ + window); });
      if (stop_) return;
      k = next_claim_++;
    }
    Slot slot;
    try {
      slot.batch = build_batch(position_after(pipeline_start_, k));
    } catch (...) {
      slot.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (slot.error) failed_ = true;
      ready_.emplace(k, std::move(slot));
    }
    consumer_cv_.notify_all();
  }
}

Batch DataLoader::next() {
  if (settings_.num_workers == 0) {
    Batch b = build_batch(position_);
    position_ = advance(position_);
    return b;
  }
  Batch b;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    consumer_cv_.wait(lock, [&] { return ready_.count(next_deliver_) == 1; });
    auto it = ready_.find(next_deliver_);
    // A failed batch stays in place: every later next() reports the same error.
    if (it->second.error) std::rethrow_exception(it->second.error);
    b = std::move(it->second.batch);
    ready_.erase(it);
    ++next_deliver_;
  }
  workers_cv_.notify_all();
  position_ = advance(position_);
  return b;
}

nlohmann::ordered_json DataLoader::state() const {
  nlohmann::ordered_json s;
  s["consumed_samples"] = consumed_samples();
  s["epoch"] = position_.epoch;
  s["sample_in_epoch"] = position_.offset;
  s["dataset_size"] = dataset_size_;
  s["local_batch_size"] = settings_.local_batch_size;
  s["data_parallel_size"] = settings_.shard.count;
  s["shuffle"] = settings_.shuffle;
  s["drop_remainder"] = settings_.drop_remainder;
  return s;
}

void DataLoader::load_state(const nlohmann::ordered_json& state) {
  LOOM_CHECK(state.is_object(), CheckpointError, "data loader state: expected a map, got ", state.dump());
  auto int_field = [&](const char* key) -> std::optional<int64_t> {
    if (!state.contains(key)) return std::nullopt;
    LOOM_CHECK(state[key].is_number_integer(), CheckpointError, "data loader state.", key,
               ": expected an integer, got ", state[key].dump());
    return state[key].get<int64_t>();
  };
  const auto consumed = int_field("consumed_samples");
  const auto epoch = int_field("epoch");
  const auto offset = int_field("sample_in_epoch");
  const auto size = int_field("dataset_size");
  const auto mbs = int_field("local_batch_size");
  const auto dp = int_field("data_parallel_size");
  const bool same_layout = size == dataset_size_ && mbs == settings_.local_batch_size &&
                           dp == settings_.shard.count &&
                           state.value("drop_remainder", settings_.drop_remainder) == settings_.drop_remainder;
  if (epoch && offset && same_layout) {
    LOOM_CHECK(*epoch >= 0 && *offset >= 0 && *offset < std::max<int64_t>(samples_per_epoch(), 1),
               CheckpointError, "data loader state: position (epoch ", *epoch, ", sample ", *offset,
               ") is outside an epoch of ", samples_per_epoch(), " samples");
    stop_workers();
    position_ = {*epoch, *offset};
    start_workers();
    return;
  }
  LOOM_CHECK(consumed.has_value(), CheckpointError,
             "data loader state has neither a matching position nor consumed_samples: ", state.dump());
  if (size && *size != dataset_size_) {
    log::warn("the training dataset now has ", dataset_size_, " samples (the checkpoint saw ", *size,
              "); resuming at consumed_samples = ", *consumed);
  }
  set_consumed_samples(*consumed);
}

void DataLoader::set_consumed_samples(int64_t consumed_samples) {
  LOOM_CHECK(consumed_samples >= 0, ValueError, "consumed_samples must be >= 0, got ", consumed_samples);
  const int64_t usable = samples_per_epoch();
  stop_workers();
  position_ = {consumed_samples / usable, consumed_samples % usable};
  start_workers();
}

SampleOptions sample_options_from(const MegatronDataConfig& c) {
  SampleOptions s;
  s.sequence_length = c.seq_length;
  s.add_extra_token_to_sequence = c.add_extra_token_to_sequence;
  s.eod = c.eod;
  s.pad = c.pad;
  s.reset_position_ids = c.reset_position_ids;
  s.reset_attention_mask = c.reset_attention_mask;
  s.eod_mask_loss = c.eod_mask_loss;
  s.create_attention_mask = c.create_attention_mask;
  s.create_compressed_eod_mask = c.create_compressed_eod_mask;
  s.eod_pad_length = c.eod_pad_length;
  return s;
}

std::unique_ptr<DataLoader> build_data_loader(const LoaderOptions& options, int64_t local_batch_size,
                                              ShardInfo shard, Split split) {
  const MegatronDataConfig& c = options.config;
  LOOM_ASSERT(options.type == "BlendedMegatronDatasetDataLoader" && options.datasets_type == "GPTDataset",
              "unsupported loader '", options.type, "' / '", options.datasets_type, "'");
  LOOM_ASSERT(c.seq_length > 1, "train_dataset.dataloader.config.seq_length ", c.seq_length);
  LOOM_ASSERT(!c.data_path.empty() != (!c.train_data_path.empty() || !c.valid_data_path.empty() ||
                                       !c.test_data_path.empty()),
              "exactly one of data_path and train/valid/test_data_path");
  LOOM_ASSERT(c.data_path.empty() || c.split.has_value(), "data_path without split");
  SampleOptions sample = sample_options_from(options.config);
  sample.loss_mask_from_inputs = std::find(options.column_names.begin(), options.column_names.end(), "loss_mask") ==
                                 options.column_names.end();
  for (const auto& name : split == Split::train ? options.column_names : std::vector<std::string>{}) {
    if (name == "attention_mask" && !sample.dense_mask_requested()) {
      log::warn("train_dataset.dataloader.column_names lists attention_mask but the loader builds none "
                "(create_attention_mask is off or create_compressed_eod_mask is on)");
    }
    if (name == "actual_seq_len" && !sample.emits_document_ends()) {
      log::warn("train_dataset.dataloader.column_names lists actual_seq_len but "
                "train_dataset.dataloader.config.create_compressed_eod_mask is off");
    }
  }
  auto dataset = build_megatron_dataset(options.config, options.sizes, split);
  LoaderSettings settings;
  settings.local_batch_size = local_batch_size;
  settings.shard = shard;
  settings.drop_remainder = options.drop_remainder;
  settings.shuffle = options.shuffle && split == Split::train;
  settings.shuffle_seed = static_cast<uint32_t>(options.shuffle_seed);
  settings.num_workers = options.num_parallel_workers;
  settings.prefetch_size = options.prefetch_size;
  auto loader = std::make_unique<DataLoader>(std::move(dataset), sample, settings);
  log::info(split_name(split), " data: ", loader->dataset_size(), " samples of ", sample.sequence_length, " tokens, ",
            loader->batches_per_epoch(), " micro-batches of ", local_batch_size, " per epoch on data-parallel rank ",
            shard.rank, " of ", shard.count);
  return loader;
}

}  // namespace loom::data
