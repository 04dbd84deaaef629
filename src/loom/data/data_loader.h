// The training data loader (spec/configuration.md "train_dataset"): micro-batches of
// local_batch_size samples for this data-parallel rank, built by background threads.
//
// Order. The sample stream is Megatron's MegatronPretrainingSampler: the epoch is cut into
// global chunks of local_batch_size x dp consecutive samples and rank r takes rows
// [r*mbs, (r+1)*mbs) of each chunk. One process accumulating k micro-batches and k processes
// therefore see the same global batch. (MindFormers shards through MindData's sampler, believed
// interleaved — rank r reads r, r+dp, ...; Loom chooses Megatron's contiguous blocks because they
// make resuming by consumed_samples exact under any dp.) With drop_remainder a trailing partial
// chunk is skipped; without it the last chunk's R samples are split into ceil(R/dp) per rank,
// wrapping to the epoch start to fill the last rank, so every rank gets the same batch size.
// After the last chunk the stream wraps to the next epoch (reshuffled when shuffle is on).
//
// Determinism. Batch n is a pure function of (dataset, options, n): workers build batches out of
// order and the consumer takes them in order, so the result is independent of
// num_parallel_workers. At most prefetch_size + num_parallel_workers batches exist at once. An
// exception in a worker is rethrown by next() when the consumer reaches that batch.
//
// Resume. state() records the position of the next batch; load_state() or
// set_consumed_samples() jump there by index arithmetic (no skipped sample is read).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/data/batch.h"
#include "loom/data/loader_options.h"
#include "loom/data/sample_builder.h"
#include "loom/data/token_sample_dataset.h"

namespace loom::data {

// This process's data-parallel shard (a single process is shard 0 of 1).
struct ShardInfo {
  int64_t rank = 0;
  int64_t count = 1;
};
// The spec's formula: dp = world / (tp*cp*pp), shard = rank % (world/pp) / tp / cp.
ShardInfo data_parallel_shard(int64_t global_rank, int64_t world_size, int64_t tensor_parallel = 1,
                              int64_t context_parallel = 1, int64_t pipeline_parallel = 1);

struct LoaderSettings {
  int64_t local_batch_size = 1;
  ShardInfo shard;
  bool drop_remainder = true;
  bool shuffle = false;          // per-epoch permutation of the dataset's samples
  uint32_t shuffle_seed = 1234;  // epoch e uses RandomState(seed + e)
  int64_t num_workers = 0;       // 0 = build on the calling thread
  int64_t prefetch_size = 1;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const TokenSampleDataset> dataset, SampleOptions sample, LoaderSettings settings);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next micro-batch; never runs out (wraps epochs).
  Batch next();

  int64_t dataset_size() const { return dataset_size_; }
  // Micro-batches per epoch for this rank (MindFormers' train_epoch_step).
  int64_t batches_per_epoch() const;
  // Global samples one epoch advances consumed_samples by.
  int64_t samples_per_epoch() const;
  // Global samples consumed before the next batch (all ranks together, as the trainer counts).
  int64_t consumed_samples() const;
  int64_t epoch() const { return position_.epoch; }

  // {"consumed_samples", "epoch", "sample_in_epoch", "dataset_size", "local_batch_size",
  //  "data_parallel_size", "shuffle", "drop_remainder"}: what a checkpoint stores.
  nlohmann::ordered_json state() const;
  void load_state(const nlohmann::ordered_json& state);
  // Resume from the trainer's consumed_samples (global): epoch = c / samples_per_epoch().
  void set_consumed_samples(int64_t consumed_samples);

  const SampleOptions& sample_options() const { return sample_; }
  const LoaderSettings& settings() const { return settings_; }

 private:
  struct Position {
    int64_t epoch = 0;
    int64_t offset = 0;  // global sample offset of the chunk start within the epoch
  };
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  Position position_after(const Position& start, int64_t batches) const;
  Position advance(const Position& p) const;
  Batch build_batch(const Position& p) const;
  std::shared_ptr<const std::vector<int64_t>> epoch_permutation(int64_t epoch) const;
  void start_workers();
  void stop_workers();
  void worker_loop();

  std::shared_ptr<const TokenSampleDataset> dataset_;
  SampleOptions sample_;
  LoaderSettings settings_;
  int64_t dataset_size_ = 0;
  int64_t chunk_ = 0;      // local_batch_size * dp
  Position position_;      // of the next batch next() returns

  // Prefetch pipeline: batch k (counted from pipeline_start_) is built by any worker.
  Position pipeline_start_;
  int64_t next_claim_ = 0;
  int64_t next_deliver_ = 0;
  bool stop_ = false;
  bool failed_ = false;
  std::map<int64_t, Slot> ready_;
  std::mutex mutex_;
  std::condition_variable workers_cv_;
  std::condition_variable consumer_cv_;
  std::vector<std::thread> workers_;

  mutable std::mutex permutation_mutex_;
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> permutations_;
};

// The loader for one split (training by default) from the train_dataset options the
// configuration resolved (config::ResolvedConfig::loader_options); the options are asserted, not
// re-validated. The validation and test splits are read in order, never shuffled, as Megatron
// reads them, so an evaluation sees the same samples whatever the training shuffle.
std::unique_ptr<DataLoader> build_data_loader(const LoaderOptions& options, int64_t local_batch_size,
                                              ShardInfo shard = {}, Split split = Split::train);
// The sample options a train_dataset section implies.
SampleOptions sample_options_from(const MegatronDataConfig& config);

}  // namespace loom::data
