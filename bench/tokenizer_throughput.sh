#!/usr/bin/env bash
# Tokenizer throughput on the demo corpus (data/demo/brown.jsonl, 6 MB): MB/s per core of Loom's
# Qwen3, Llama 3.1 and DeepSeek-V3 tokenizer.json next to @lenml/tokenizers (the JavaScript port
# of HF tokenizers in transformers.js) on the same text, plus Loom on every core and the demo's
# SentencePiece model. "cold" is the first pass over the corpus, "warm" the passes after it (both
# implementations cache words). Token counts must agree: the two encode the same text.
#   bench/tokenizer_throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh --target bench_tokenizer | tail -1
scripts/get-demo-data.sh > /dev/null
scripts/get-tokenizers.sh 2> /dev/null
BENCH=${BUILD_DIR:-build}/bench/bench_tokenizer
CORPUS=data/demo/brown.jsonl
source bench/cpu_header.sh
print_cpu_header "1 thread per runner; Loom also on $(getconf _NPROCESSORS_ONLN) threads; node $(node --version)"

field() { echo "$1" | tr ' ' '\n' | grep "^$2=" | cut -d= -f2; }
printf "%-14s %-6s %9s %12s %12s %12s %10s\n" tokenizer runner tokens "cold MB/s" "warm MB/s" "all-core MB/s" "load s"
for model in qwen3 llama3_1 deepseek_v3 sentencepiece; do
  if [ "$model" = sentencepiece ]; then path=data/demo/brown_spm.model; else path=data/tokenizers/$model; fi
  loom=$("$BENCH" "$path" "$CORPUS")
  printf "%-14s %-6s %9s %12s %12s %12s %10s\n" "$model" loom "$(field "$loom" tokens)" "$(field "$loom" cold_mb_s)" \
    "$(field "$loom" warm_mb_s)" "$(field "$loom" parallel_mb_s)" "$(field "$loom" load_s)"
  [ "$model" = sentencepiece ] && continue
  js=$(node bench/tokenizer_throughput.cjs "$PWD/data/tokenizers/npm" "data/tokenizers/$model" "$CORPUS")
  printf "%-14s %-6s %9s %12s %12s %12s %10s\n" "$model" js "$(field "$js" tokens)" "$(field "$js" cold_mb_s)" \
    "$(field "$js" warm_mb_s)" "-" "$(field "$js" load_s)"
  if [ "$(field "$loom" tokens)" != "$(field "$js" tokens)" ]; then
    echo "  warning: token counts differ between Loom and the JavaScript port on $model" >&2
  fi
done
