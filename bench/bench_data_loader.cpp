// Data loader throughput at seq_length 4096 with 2 workers over a synthetic Megatron dataset
// written to a temporary directory: samples/s and tokens/s for the plain columns, the EOD-reset
// columns with the compressed mask, and the dense S x S attention mask.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>

#include "loom/data/data_loader.h"
#include "loom/data/gpt_dataset.h"
#include "loom/data/indexed_dataset_builder.h"
#include "cpu_path.h"

namespace {

using namespace loom::data;

constexpr int64_t kSeqLength = 4096;
constexpr int64_t kEod = 2;

// ~16M tokens in documents of 64..8000 tokens (log-uniform), vocabulary 32000, EOD-terminated.
class SyntheticCorpus {
 public:
  SyntheticCorpus() {
    dir_ = std::filesystem::temp_directory_path() / ("loom-bench-data-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    prefix_ = (dir_ / "synthetic_text_document").string();
    IndexedDatasetBuilder builder(data_file_path(prefix_), TokenDType::u16);
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> log_len(std::log(64.0), std::log(8000.0));
    std::uniform_int_distribution<int64_t> token(3, 31999);
    std::vector<int64_t> doc;
    int64_t total = 0;
    while (total < (int64_t{16} << 20)) {
      const auto n = static_cast<int64_t>(std::exp(log_len(rng)));
      doc.resize(static_cast<size_t>(n));
      for (auto& t : doc) t = token(rng);
      doc.back() = kEod;
      builder.add_document(doc, std::vector<int32_t>{static_cast<int32_t>(n)});
      total += n;
    }
    builder.finalize(index_file_path(prefix_));
    dataset_ = std::make_shared<const IndexedDataset>(prefix_);
    std::vector<int32_t> all(static_cast<size_t>(dataset_->num_sequences()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
    GptDatasetOptions o;
    o.sequence_length = kSeqLength;
    o.use_cache = false;
    gpt_ = std::make_shared<const GptDataset>(dataset_, all, 20000, Split::train, o);
  }
  ~SyntheticCorpus() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::shared_ptr<const GptDataset> gpt() const { return gpt_; }

 private:
  std::filesystem::path dir_;
  std::string prefix_;
  std::shared_ptr<const IndexedDataset> dataset_;
  std::shared_ptr<const GptDataset> gpt_;
};

SyntheticCorpus& corpus() {
  static SyntheticCorpus c;
  return c;
}

void run(benchmark::State& state, SampleOptions sample) {
  LoaderSettings settings;
  settings.local_batch_size = state.range(0);
  settings.num_workers = 2;
  settings.prefetch_size = 2;
  settings.shuffle = false;
  DataLoader loader(corpus().gpt(), sample, settings);
  loader.next();  // warm the pipeline and the page cache
  int64_t samples = 0;
  for (auto _ : state) {
    Batch b = loader.next();
    benchmark::DoNotOptimize(b.input_ids.raw_data());
    samples += b.batch_size();
  }
  state.SetItemsProcessed(samples);
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(samples * kSeqLength), benchmark::Counter::kIsRate);
}

SampleOptions base_options() {
  SampleOptions o;
  o.sequence_length = kSeqLength;
  o.eod = kEod;
  o.pad = -1;
  o.create_attention_mask = false;
  return o;
}

void BM_LoaderPlain(benchmark::State& state) { run(state, base_options()); }

void BM_LoaderEodResetCompressedMask(benchmark::State& state) {
  SampleOptions o = base_options();
  o.reset_position_ids = true;
  o.reset_attention_mask = true;
  o.eod_mask_loss = true;
  o.create_compressed_eod_mask = true;
  run(state, o);
}

void BM_LoaderDenseAttentionMask(benchmark::State& state) {
  SampleOptions o = base_options();
  o.reset_attention_mask = true;
  o.create_attention_mask = true;
  run(state, o);
}

}  // namespace

BENCHMARK(BM_LoaderPlain)->Arg(1)->Arg(4)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderEodResetCompressedMask)->Arg(4)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderDenseAttentionMask)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu_matrix_path", loom::bench::cpu_matrix_path());
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
