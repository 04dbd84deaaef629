#include "loom/data/preprocess.h"

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "loom/core/error.h"
#include "loom/data/indexed_dataset.h"
#include "loom/data/indexed_dataset_builder.h"
#include "loom/data/jsonl_reader.h"
#include "loom/data/tokenizer/tokenizer.h"

namespace loom::data {

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_document";
}

namespace {

struct EncodedDocument {
  std::vector<int64_t> tokens;
  std::vector<int32_t> lengths;  // one per non-empty sentence
};

struct Line {
  std::string text;
  int64_t number = 0;
};

// Megatron's Encoder.encode for one key.
EncodedDocument encode_document(const Tokenizer& tokenizer, const std::vector<std::string>& sentences,
                                bool append_eod) {
  EncodedDocument doc;
  for (const auto& sentence : sentences) {
    std::vector<int64_t> ids = tokenizer.encode(sentence);
    if (ids.empty()) continue;
    doc.tokens.insert(doc.tokens.end(), ids.begin(), ids.end());
    doc.lengths.push_back(static_cast<int32_t>(ids.size()));
  }
  if (append_eod && !doc.tokens.empty()) {
    doc.tokens.push_back(tokenizer.eod_id());
    doc.lengths.back() += 1;
  }
  return doc;
}

class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), start_(clock::now()), last_(start_) {}
  void report(int64_t documents, int64_t tokens, const JsonlReader& reader, bool final) {
    if (!enabled_) return;
    const auto now = clock::now();
    if (!final && now - last_ < std::chrono::seconds(2)) return;
    if (final && now - start_ < std::chrono::seconds(2)) return;  // short runs stay quiet
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double mb = static_cast<double>(reader.bytes_read()) / 1e6;
    const double percent = reader.file_size() > 0 ? 100.0 * static_cast<double>(reader.bytes_read()) /
                                                        static_cast<double>(reader.file_size())
                                                  : 0.0;
    std::fprintf(stderr, "preprocess: %lld documents, %lld tokens, %.1f MB (%.0f%%) in %.1f s, %.2f MB/s\n",
                 static_cast<long long>(documents), static_cast<long long>(tokens), mb,
                 std::min(percent, 100.0), seconds, seconds > 0 ? mb / seconds : 0.0);
  }

 private:
  using clock = std::chrono::steady_clock;
  bool enabled_;
  clock::time_point start_;
  clock::time_point last_;
};

// Worker threads that live for the whole run: a tokenizer caches words per thread, so threads
// started afresh for every chunk would start with empty caches.
class WorkerPool {
 public:
  explicit WorkerPool(size_t workers) : start_(static_cast<std::ptrdiff_t>(workers)),
                                        done_(static_cast<std::ptrdiff_t>(workers)) {
    for (size_t w = 1; w < workers; ++w) {
      threads_.emplace_back([this] {
        while (true) {
          start_.arrive_and_wait();
          if (stop_) return;
          (*task_)();
          done_.arrive_and_wait();
        }
      });
    }
  }
  ~WorkerPool() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : threads_) t.join();
  }
  // Runs `task` on every worker, the calling thread included, and waits for all.
  void run(const std::function<void()>& task) {
    task_ = &task;
    start_.arrive_and_wait();
    task();
    done_.arrive_and_wait();
  }

 private:
  std::barrier<> start_, done_;
  const std::function<void()>* task_ = nullptr;
  bool stop_ = false;  // written before the start barrier, which orders it for the workers
  std::vector<std::thread> threads_;
};

// Encodes every line, each worker taking the next unclaimed line so long documents do not leave
// the others idle. The error of the earliest failing line is the one reported, whatever the
// timing, so messages are stable.
void encode_lines(const Tokenizer& tokenizer, const PreprocessOptions& o, const std::vector<Line>& lines,
                  std::vector<std::vector<EncodedDocument>>& encoded, WorkerPool& pool) {
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(lines.size());
  pool.run([&] {
    for (size_t i = next++; i < lines.size(); i = next++) {
      try {
        const auto record = parse_json_line(lines[i].text, o.input, lines[i].number);
        for (const auto& key : o.json_keys) {
          encoded[i].push_back(
              encode_document(tokenizer, json_texts(record, key, o.input, lines[i].number), o.append_eod));
        }
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  });
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace

PreprocessResult preprocess_jsonl(const PreprocessOptions& o) {
  LOOM_CHECK(!o.input.empty(), ValueError, "--input is required");
  LOOM_CHECK(!o.output_prefix.empty(), ValueError, "--output-prefix is required");
  LOOM_CHECK(!o.json_keys.empty(), ValueError, "--json-keys needs at least one key");
  LOOM_CHECK(o.workers >= 0, ValueError, "--workers must be at least 1 (or 0: one per core), got ", o.workers);
  LOOM_CHECK(!o.tokenizer.empty(), ValueError, "--tokenizer is required");
  const std::unique_ptr<Tokenizer> loaded = load_tokenizer(o.tokenizer);
  const Tokenizer& tokenizer = *loaded;
  LOOM_CHECK(!o.append_eod || tokenizer.eod_id() >= 0, DataError, "tokenizer ", o.tokenizer,
             " has no end-of-sequence id, so --append-eod has nothing to append (for a tokenizer.json, pass the "
             "model's folder: its tokenizer_config.json names eos_token)");
  const TokenDType dtype = optimal_token_dtype(tokenizer.vocab_size());
  const std::filesystem::path out_dir = std::filesystem::path(o.output_prefix).parent_path();
  std::error_code ec;
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir, ec);
  LOOM_CHECK(!ec, IOError, "--output-prefix ", o.output_prefix, ": cannot create its folder ", out_dir.string(), ": ",
             ec.message(), " (choose a writable place)");

  PreprocessResult result;
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  std::vector<std::string> tmp_bins, tmp_idxs;
  for (const auto& key : o.json_keys) {
    const std::string prefix = preprocess_output_prefix(o.output_prefix, key);
    result.output_prefixes.push_back(prefix);
    tmp_bins.push_back(data_file_path(prefix) + ".partial");
    tmp_idxs.push_back(index_file_path(prefix) + ".partial");
    builders.push_back(std::make_unique<IndexedDatasetBuilder>(tmp_bins.back(), dtype));
  }
  result.tokens.assign(o.json_keys.size(), 0);
  auto cleanup = [&] {
    builders.clear();
    std::error_code ec;
    for (const auto& p : tmp_bins) std::filesystem::remove(p, ec);
    for (const auto& p : tmp_idxs) std::filesystem::remove(p, ec);
  };

  try {
    JsonlReader reader(o.input);
    Progress progress(o.progress);
    const size_t workers = o.workers > 0 ? static_cast<size_t>(o.workers)
                                         : std::max<size_t>(1, std::thread::hardware_concurrency());
    const size_t chunk = 256 * workers;
    WorkerPool pool(workers);
    std::vector<Line> lines;
    // encoded[line][key]
    std::vector<std::vector<EncodedDocument>> encoded;
    bool more = true;
    int64_t total_tokens = 0;
    while (more) {
      lines.clear();
      Line line;
      while (lines.size() < chunk && (more = reader.next(line.text, line.number))) lines.push_back(line);
      if (lines.empty()) break;
      encoded.assign(lines.size(), {});
      encode_lines(tokenizer, o, lines, encoded, pool);
      for (size_t i = 0; i < lines.size(); ++i) {
        for (size_t k = 0; k < o.json_keys.size(); ++k) {
          const EncodedDocument& doc = encoded[i][k];
          builders[k]->add_document(doc.tokens, doc.lengths);
          result.tokens[k] += static_cast<int64_t>(doc.tokens.size());
          total_tokens += static_cast<int64_t>(doc.tokens.size());
        }
        ++result.documents;
      }
      progress.report(result.documents, total_tokens, reader, false);
    }
    progress.report(result.documents, total_tokens, reader, true);
    for (size_t k = 0; k < builders.size(); ++k) builders[k]->finalize(tmp_idxs[k]);
    for (size_t k = 0; k < builders.size(); ++k) {
      std::filesystem::rename(tmp_bins[k], data_file_path(result.output_prefixes[k]));
      std::filesystem::rename(tmp_idxs[k], index_file_path(result.output_prefixes[k]));
    }
  } catch (...) {
    cleanup();
    throw;
  }
  return result;
}

}  // namespace loom::data
