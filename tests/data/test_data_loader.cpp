// The training loader (spec/configuration.md "train_dataset"; Megatron's pretraining sampler for
// data-parallel order; resume by consumed_samples, as MindFormers' trainer).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "data_test_util.h"
#include "loom/core/error.h"
#include "loom/data/data_loader.h"

using namespace loom::data;
using namespace loom::data::testing_util;
using Json = nlohmann::ordered_json;

namespace {

// Sample i = [100*i + 1, 100*i + 2, ...]; an optional EOD every `eod_every` tokens; throws at
// `fail_at`. Records the largest index read.
class CountingDataset : public TokenSampleDataset {
 public:
  CountingDataset(int64_t size, int64_t length, int64_t eod_every = 0, int64_t fail_at = -1)
      : size_(size), length_(length), eod_every_(eod_every), fail_at_(fail_at) {}
  int64_t size() const override { return size_; }
  int64_t sample_length() const override { return length_; }
  void read_sample(int64_t index, std::span<int64_t> out) const override {
    if (index == fail_at_) LOOM_THROW(DataError, "sample ", index, " is unreadable");
    int64_t seen = max_index_.load();
    while (index > seen && !max_index_.compare_exchange_weak(seen, index)) {
    }
    for (int64_t t = 0; t < length_; ++t) {
      out[static_cast<size_t>(t)] = (eod_every_ > 0 && t % eod_every_ == eod_every_ - 1) ? 0 : 100 * index + t + 1;
    }
  }
  int64_t max_index() const { return max_index_.load(); }

 private:
  int64_t size_, length_, eod_every_, fail_at_;
  mutable std::atomic<int64_t> max_index_{-1};
};

SampleOptions options_for(int64_t S) {
  SampleOptions o;
  o.sequence_length = S;
  o.create_attention_mask = false;
  o.eod = 0;
  return o;
}

LoaderSettings settings(int64_t mbs, int64_t workers = 0, ShardInfo shard = {}, bool drop = true) {
  LoaderSettings s;
  s.local_batch_size = mbs;
  s.num_workers = workers;
  s.prefetch_size = 2;
  s.shard = shard;
  s.drop_remainder = drop;
  return s;
}

std::vector<int32_t> ids(const Batch& b) {
  const int32_t* p = b.input_ids.data<int32_t>();
  return std::vector<int32_t>(p, p + b.input_ids.numel());
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.sample_indices == b.sample_indices && ids(a) == ids(b) &&
         std::memcmp(a.labels.raw_data(), b.labels.raw_data(), a.labels.nbytes()) == 0 &&
         std::memcmp(a.loss_mask.raw_data(), b.loss_mask.raw_data(), a.loss_mask.nbytes()) == 0 &&
         std::memcmp(a.position_ids.raw_data(), b.position_ids.raw_data(), a.position_ids.nbytes()) == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "<no error>";
}

// The options the configuration resolves for a small train_dataset section (the section's
// reading is tested in tests/config/test_dataset_section.cpp).
LoaderOptions minimal_options(const std::string& prefix) {
  LoaderOptions o;
  o.sizes = {40, 0, 0};
  o.column_names = {"input_ids", "labels", "loss_mask", "position_ids"};
  o.num_parallel_workers = 2;
  o.config.seq_length = 8;
  o.config.split = "1, 0, 0";
  o.config.eod = 0;
  o.config.pad = -1;
  o.config.create_attention_mask = false;
  o.config.data_path = {"1", prefix};
  return o;
}

}  // namespace

// spec rank formula: shard_id = rank % (world // pp) // tp // cp, num_shards = dp.
TEST(DataLoader, ShardFormula) {
  EXPECT_EQ(data_parallel_shard(0, 1).count, 1);
  const ShardInfo s5 = data_parallel_shard(5, 8, 2, 1, 2);
  EXPECT_EQ(s5.count, 2);
  EXPECT_EQ(s5.rank, 0);
  EXPECT_EQ(data_parallel_shard(6, 8, 2, 1, 2).rank, 1);
  EXPECT_EQ(data_parallel_shard(7, 8, 1, 2, 1).rank, 3);
  EXPECT_THROW(data_parallel_shard(0, 6, 4), loom::ValueError);
}

// Batch n does not depend on how many threads build batches.
TEST(DataLoader, SameBatchesForAnyWorkerCount) {
  auto ds = std::make_shared<CountingDataset>(50, 9, 4);
  SampleOptions o = options_for(8);
  o.reset_position_ids = true;
  LoaderSettings s0 = settings(3, 0);
  s0.shuffle = true;
  std::vector<Batch> reference;
  {
    DataLoader loader(ds, o, s0);
    for (int i = 0; i < 20; ++i) reference.push_back(loader.next());  // crosses an epoch (16 per epoch)
  }
  for (int64_t workers : {1, 3}) {
    LoaderSettings s = s0;
    s.num_workers = workers;
    DataLoader loader(ds, o, s);
    for (int i = 0; i < 20; ++i) EXPECT_TRUE(same_batch(loader.next(), reference[static_cast<size_t>(i)])) << i;
  }
  EXPECT_EQ(reference[0].input_ids.shape(), (loom::Shape{3, 8}));
  EXPECT_EQ(reference[0].input_ids.dtype(), loom::DType::i32);
  EXPECT_EQ(reference[0].loss_mask.dtype(), loom::DType::f32);
  EXPECT_EQ(reference[16].epoch, 1);
}

// Megatron sampler: rank r takes rows [r*mbs, (r+1)*mbs) of each chunk of mbs*dp samples, so one
// process accumulating dp micro-batches sees the same global batch as dp processes.
TEST(DataLoader, DataParallelRanksSplitEachGlobalChunk) {
  auto ds = std::make_shared<CountingDataset>(40, 9);
  DataLoader single(ds, options_for(8), settings(2));
  DataLoader rank0(ds, options_for(8), settings(2, 1, {0, 2}));
  DataLoader rank1(ds, options_for(8), settings(2, 2, {1, 2}));
  EXPECT_EQ(single.batches_per_epoch(), 20);
  EXPECT_EQ(rank0.batches_per_epoch(), 10);
  for (int k = 0; k < 12; ++k) {
    const Batch a = single.next();
    const Batch b = single.next();
    EXPECT_TRUE(same_batch(a, rank0.next())) << k;
    EXPECT_TRUE(same_batch(b, rank1.next())) << k;
  }
  EXPECT_EQ(rank1.consumed_samples(), 48);  // global: 12 chunks of 4
}

TEST(DataLoader, DropRemainderAndPartialLastChunk) {
  auto ds = std::make_shared<CountingDataset>(10, 9);
  DataLoader drop(ds, options_for(8), settings(3));
  EXPECT_EQ(drop.batches_per_epoch(), 3);
  for (int i = 0; i < 3; ++i) drop.next();
  Batch wrapped = drop.next();
  EXPECT_EQ(wrapped.epoch, 1);
  EXPECT_EQ(wrapped.sample_indices, (std::vector<int64_t>{0, 1, 2}));

  DataLoader keep(ds, options_for(8), settings(3, 0, {}, false));
  EXPECT_EQ(keep.batches_per_epoch(), 4);
  for (int i = 0; i < 3; ++i) keep.next();
  EXPECT_EQ(keep.next().sample_indices, (std::vector<int64_t>{9}));

  // dp = 2, 11 samples: the last 3 split as 2 + 2, wrapping to sample 0 for rank 1.
  auto ds11 = std::make_shared<CountingDataset>(11, 9);
  DataLoader r0(ds11, options_for(8), settings(2, 0, {0, 2}, false));
  DataLoader r1(ds11, options_for(8), settings(2, 0, {1, 2}, false));
  for (int i = 0; i < 2; ++i) {
    r0.next();
    r1.next();
  }
  EXPECT_EQ(r0.next().sample_indices, (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(r1.next().sample_indices, (std::vector<int64_t>{10, 0}));
  EXPECT_EQ(r0.next().sample_indices, (std::vector<int64_t>{0, 1}));  // epoch 1

  const std::string e = error_of([&] { DataLoader tiny(ds, options_for(8), settings(11)); });
  EXPECT_NE(e.find("fewer than one global micro-batch"), std::string::npos) << e;
}

// shuffle: a seeded permutation per epoch, different across epochs.
TEST(DataLoader, ShuffleReordersEachEpoch) {
  auto ds = std::make_shared<CountingDataset>(20, 9);
  LoaderSettings s = settings(20);
  s.shuffle = true;
  DataLoader loader(ds, options_for(8), s);
  std::vector<int64_t> e0 = loader.next().sample_indices;
  std::vector<int64_t> e1 = loader.next().sample_indices;
  EXPECT_NE(e0, e1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  DataLoader again(ds, options_for(8), s);
  EXPECT_EQ(again.next().sample_indices, e0);
}

// Resume: take k batches, rebuild from state(), the next batch is identical.
TEST(DataLoader, ResumeFromStateGivesTheSameNextBatch) {
  auto ds = std::make_shared<CountingDataset>(30, 9, 3);
  LoaderSettings s = settings(2, 2, {1, 2});
  s.shuffle = true;
  SampleOptions o = options_for(8);
  o.eod_mask_loss = true;
  DataLoader original(ds, o, s);
  for (int i = 0; i < 9; ++i) original.next();  // 7 per epoch: crosses into epoch 1
  const Json state = original.state();
  EXPECT_EQ(state["consumed_samples"], 36);  // 7 chunks of 4 in epoch 0 (28 usable) + 2 chunks
  EXPECT_EQ(state["epoch"], 1);
  EXPECT_EQ(state["sample_in_epoch"], 8);
  const Batch expected = original.next();
  const Batch expected2 = original.next();

  DataLoader resumed(ds, o, s);
  resumed.load_state(Json::parse(state.dump()));  // through text, as a checkpoint stores it
  EXPECT_TRUE(same_batch(resumed.next(), expected));
  EXPECT_TRUE(same_batch(resumed.next(), expected2));

  DataLoader by_count(ds, o, s);
  by_count.set_consumed_samples(state["consumed_samples"].get<int64_t>());
  EXPECT_TRUE(same_batch(by_count.next(), expected));

  // Resuming reads no skipped sample: only the resumed batches' samples were requested.
  auto fresh = std::make_shared<CountingDataset>(1000, 9);
  DataLoader skipper(fresh, options_for(8), settings(1));
  skipper.set_consumed_samples(900);
  EXPECT_EQ(skipper.next().sample_indices, (std::vector<int64_t>{900}));
  EXPECT_EQ(fresh->max_index(), 900);
}

// A worker's exception reaches the consumer at the failing batch; earlier batches still arrive.
TEST(DataLoader, WorkerExceptionsAreRethrownInOrder) {
  for (int64_t workers : {0, 3}) {
    auto ds = std::make_shared<CountingDataset>(40, 9, 0, 9);
    DataLoader loader(ds, options_for(8), settings(2, workers));
    for (int i = 0; i < 4; ++i) EXPECT_NO_THROW(loader.next()) << i;
    const std::string e = error_of([&] { loader.next(); });
    EXPECT_NE(e.find("sample 9 is unreadable"), std::string::npos) << e;
    EXPECT_NE(error_of([&] { loader.next(); }).find("sample 9 is unreadable"), std::string::npos);
  }
}

// Bounded prefetch: with a stalled consumer at most prefetch_size + workers batches are built.
TEST(DataLoader, PrefetchIsBounded) {
  auto ds = std::make_shared<CountingDataset>(1000, 9);
  LoaderSettings s = settings(1, 2);
  s.prefetch_size = 1;
  DataLoader loader(ds, options_for(8), s);
  loader.next();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE(ds->max_index(), 3);  // batches 1..3 may be waiting (1 + prefetch 1 + 2 workers)
  EXPECT_GE(ds->max_index(), 1);
}

// MindFormers QUIRK (docs/data.md): a cached loss mask zeroed at one sample's pad labels leaks into
// later samples. Loom builds every mask afresh: a sample without pad has a full loss mask.
TEST(DataLoader, PadMaskDoesNotLeakIntoLaterSamples) {
  class PadThenClean : public TokenSampleDataset {
   public:
    int64_t size() const override { return 2; }
    int64_t sample_length() const override { return 5; }
    void read_sample(int64_t index, std::span<int64_t> out) const override {
      const std::vector<int64_t> padded = {5, 6, 7, -1, -1};
      const std::vector<int64_t> clean = {8, 9, 10, 11, 12};
      std::copy((index == 0 ? padded : clean).begin(), (index == 0 ? padded : clean).end(), out.begin());
    }
  };
  SampleOptions o = options_for(4);
  o.eod = 3;  // no reset_* / eod_mask_loss: the path MindFormers caches
  o.pad = -1;
  DataLoader loader(std::make_shared<PadThenClean>(), o, settings(1));
  const Batch first = loader.next();
  const Batch second = loader.next();
  const float* m0 = first.loss_mask.data<float>();
  const float* m1 = second.loss_mask.data<float>();
  EXPECT_EQ(std::vector<float>(m0, m0 + 4), (std::vector<float>{1, 1, 0, 0}));
  EXPECT_EQ(std::vector<float>(m1, m1 + 4), (std::vector<float>{1, 1, 1, 1}));  // MF would give 1,1,0,0
}

// Compressed EOD mask: per-sample document ends, and MindFormers' cumulative actual_seq_len.
TEST(DataLoader, CompressedEodMaskColumns) {
  auto ds = std::make_shared<CountingDataset>(8, 9, 3);  // EOD (0) at positions 2, 5, 8 of the text
  SampleOptions o = options_for(8);
  o.create_compressed_eod_mask = true;
  o.create_attention_mask = true;  // the compressed mask wins, as in MindFormers
  o.eod_pad_length = 4;
  DataLoader loader(ds, o, settings(2));
  const Batch b = loader.next();
  ASSERT_EQ(b.document_ends.shape(), (loom::Shape{2, 4}));
  const int32_t* ends = b.document_ends.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(ends, ends + 8), (std::vector<int32_t>{3, 6, 8, 8, 3, 6, 8, 8}));
  const int32_t* cum = b.actual_seq_len.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(cum, cum + 8), (std::vector<int32_t>{3, 6, 8, 8, 11, 14, 16, 16}));
}

// From the resolved train_dataset options to batches over a dataset on disk.
TEST(DataLoader, BuildFromLoaderOptions) {
  loom::testing::TempDir dir;
  const std::string prefix = dir.file("corpus_text_document");
  write_dataset(prefix, TokenDType::u16, numbered_documents(std::vector<int64_t>(30, 7), 0));
  LoaderOptions o = minimal_options(prefix);
  o.config.create_attention_mask = true;
  o.config.reset_attention_mask = true;
  o.config.path_to_cache = dir.file("cache");
  auto loader = build_data_loader(o, 2);
  EXPECT_GE(loader->dataset_size(), 40);
  const Batch b = loader->next();
  EXPECT_EQ(b.input_ids.shape(), (loom::Shape{2, 8}));
  const int32_t* in = b.input_ids.data<int32_t>();
  const int32_t* lab = b.labels.data<int32_t>();
  for (int i = 0; i < 7; ++i) EXPECT_EQ(lab[i], in[i + 1]);  // labels are the next tokens
  // The dense document mask comes as its compressed form: each row's document ends (EOD + 1, a
  // final EOD at S-1 omitted), padded with S, room for S documents.
  ASSERT_EQ(b.document_ends.shape(), (loom::Shape{2, 8}));
  for (int row = 0; row < 2; ++row) {
    std::vector<int32_t> expected;
    for (int i = 0; i < 7; ++i)
      if (in[row * 8 + i] == 0) expected.push_back(i + 1);
    expected.resize(8, 8);
    const int32_t* ends = b.document_ends.data<int32_t>() + row * 8;
    EXPECT_EQ(std::vector<int32_t>(ends, ends + 8), expected) << row;
  }
}

// create_attention_mask (the reference's default) without reset_attention_mask is the causal
// mask, which Loom's attention applies by itself: no mask column at all.
TEST(DataLoader, TheDenseCausalMaskNeedsNoColumn) {
  loom::testing::TempDir dir;
  const std::string prefix = dir.file("corpus_text_document");
  write_dataset(prefix, TokenDType::u16, numbered_documents(std::vector<int64_t>(30, 7), 0));
  LoaderOptions o = minimal_options(prefix);
  o.config.create_attention_mask = true;
  o.config.path_to_cache = dir.file("cache");
  const Batch b = build_data_loader(o, 2)->next();
  EXPECT_FALSE(b.document_ends.defined());
  EXPECT_FALSE(b.actual_seq_len.defined());
}

// The options come checked from the configuration; options it would never resolve are refused
// as a bug, not re-validated with messages of their own.
TEST(DataLoader, RefusesOptionsTheConfigurationWouldReject) {
  LoaderOptions no_length = minimal_options("/data/x");
  no_length.config.seq_length = 0;
  EXPECT_THROW(build_data_loader(no_length, 2), loom::Error);
  LoaderOptions no_split = minimal_options("/data/x");
  no_split.config.split.reset();
  EXPECT_THROW(build_data_loader(no_split, 2), loom::Error);
  LoaderOptions other = minimal_options("/data/x");
  other.type = "HFDataLoader";
  EXPECT_THROW(build_data_loader(other, 2), loom::Error);
}

// train_dataset.dataloader.column_names (spec configuration.md): without a loss_mask column the
// loss counts the positions whose input is not pad (MindFormers' CrossEntropyLoss: loss_mask =
// input_ids != pad_token_id); with it, the dataset's mask (eod_mask_loss, pad labels).
TEST(DataLoader, WithoutALossMaskColumnTheMaskIsInputsNotPad) {
  loom::testing::TempDir dir;
  const std::string prefix = dir.file("corpus_text_document");
  // Documents of 7 tokens ending in EOD 0: every 8-token sample holds an EOD, no other token is 0.
  write_dataset(prefix, TokenDType::u16, numbered_documents(std::vector<int64_t>(30, 7), 0));
  struct Masked {
    std::vector<float> mask, input_is_0, label_is_0;
  };
  auto batch = [&](std::vector<std::string> columns, int64_t pad, bool eod_mask_loss) {
    LoaderOptions o = minimal_options(prefix);
    o.column_names = std::move(columns);
    o.config.pad = pad;
    o.config.eod_mask_loss = eod_mask_loss;
    o.config.path_to_cache = dir.file("cache");
    o.num_parallel_workers = 0;
    const Batch b = build_data_loader(o, 1)->next();
    Masked r;
    for (int i = 0; i < 8; ++i) {
      r.mask.push_back(b.loss_mask.data<float>()[i]);
      r.input_is_0.push_back(b.input_ids.data<int32_t>()[i] == 0 ? 0.0f : 1.0f);
      r.label_is_0.push_back(b.labels.data<int32_t>()[i] == 0 ? 0.0f : 1.0f);
    }
    return r;
  };
  const std::vector<std::string> with_mask = {"input_ids", "labels", "loss_mask"}, without = {"input_ids", "labels"};
  const Masked eod_masked = batch(with_mask, -1, true);
  EXPECT_NE(eod_masked.input_is_0, std::vector<float>(8, 1.0f));  // the sample holds an EOD
  EXPECT_EQ(eod_masked.mask, eod_masked.input_is_0);               // eod_mask_loss: inputs that are EOD
  EXPECT_EQ(batch(without, -1, true).mask, std::vector<float>(8, 1.0f));  // no pad among the inputs
  const Masked pad_labels = batch(with_mask, 0, false);
  EXPECT_EQ(pad_labels.mask, pad_labels.label_is_0);               // the dataset's mask: labels that are pad
  const Masked pad_inputs = batch(without, 0, false);
  EXPECT_EQ(pad_inputs.mask, pad_inputs.input_is_0);               // input_ids != pad
  EXPECT_NE(pad_inputs.mask, pad_labels.mask);
}
