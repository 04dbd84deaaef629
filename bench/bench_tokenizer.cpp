// Tokenizer throughput: encodes every document of a JSON-lines file with a tokenizer (a
// tokenizer.json, SentencePiece model or model folder) and prints MB/s on one thread (the first,
// cold pass and the warm passes after it, when the word cache is full) and summed over N threads
// encoding at once.
// bench/tokenizer_throughput.sh runs it next to the JavaScript port of HF tokenizers.
//
//   bench_tokenizer TOKENIZER INPUT.jsonl [KEY] [THREADS]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/data/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> read_texts(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  LOOM_CHECK(in.good(), IOError, "cannot read ", path);
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line).at(key).get<std::string>());
  }
  return texts;
}

// Seconds to encode all texts once on the calling thread; sets the token count.
double encode_all(const loom::data::Tokenizer& t, const std::vector<std::string>& texts, int64_t& tokens) {
  const auto start = Clock::now();
  tokens = 0;
  for (const auto& text : texts) tokens += static_cast<int64_t>(t.encode(text).size());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Mean seconds of the warm passes (at least three, at least two seconds) after a first one.
double warm_pass(const loom::data::Tokenizer& t, const std::vector<std::string>& texts, int64_t& tokens) {
  encode_all(t, texts, tokens);
  double total = 0;
  int passes = 0;
  while (passes < 3 || total < 2.0) total += encode_all(t, texts, tokens), ++passes;
  return total / passes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_tokenizer TOKENIZER INPUT.jsonl [KEY] [THREADS]\n");
    return 2;
  }
  try {
    const std::string key = argc > 3 ? argv[3] : "text";
    const size_t threads = argc > 4 ? std::stoul(argv[4]) : std::max(1u, std::thread::hardware_concurrency());
    const auto texts = read_texts(argv[2], key);
    double bytes = 0;
    for (const auto& s : texts) bytes += static_cast<double>(s.size());
    const auto load_start = Clock::now();
    const auto tokenizer = loom::data::load_tokenizer(argv[1]);
    const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
    int64_t tokens = 0;
    const double cold_s = encode_all(*tokenizer, texts, tokens);
    const double warm_s = warm_pass(*tokenizer, texts, tokens);
    // Every core encodes the whole corpus at once (as preprocess's workers share it).
    std::vector<double> seconds(threads);
    std::vector<std::thread> pool;
    for (size_t k = 0; k < threads; ++k) {
      pool.emplace_back([&, k] {
        int64_t n = 0;
        seconds[k] = warm_pass(*tokenizer, texts, n);
      });
    }
    for (auto& th : pool) th.join();
    double parallel_mb_s = 0;
    for (const double s : seconds) parallel_mb_s += bytes / 1e6 / s;
    std::printf("bytes=%.0f tokens=%lld load_s=%.3f cold_mb_s=%.2f warm_mb_s=%.2f threads=%zu parallel_mb_s=%.2f\n", bytes,
                static_cast<long long>(tokens), load_s, bytes / 1e6 / cold_s, bytes / 1e6 / warm_s, threads, parallel_mb_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
