#!/usr/bin/env bash
# Generation on a Qwen3-0.6B-shaped model in bf16 with random weights, side by side in one run:
#   loom      bench_decode: batch-1 decode tokens/s against the memory-bandwidth bound it measures
#             (weights + cache read per token ÷ stream-copy bandwidth) and prefill against the
#             bf16 peak Loom reports for the CPU
#   generate  `loom generate` on the same weights saved as an HF folder: the product's own path
#   torch     bench/torch_decode_reference.py on that folder: greedy with a KV cache, weights in
#             bf16 (--mode bf16) and fp32 under bf16 autocast (--mode autocast)
# alternating for ROUNDS rounds; the ratios are Loom's decode tokens/s over PyTorch's, and "same"
# counts how many leading greedy tokens PyTorch's ids share with Loom's.
#   bench/generate_throughput.sh                        # 28 layers, prompt 256, 32 new, 2 threads
#   LAYERS=8 PROMPT=64 NEW=16 ROUNDS=1 bench/generate_throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LAYERS=${LAYERS:-28}
PROMPT=${PROMPT:-256}
NEW=${NEW:-32}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-2}
TORCH_PYTHON=${TORCH_PYTHON:-/usr/bin/python3}
source scripts/find-python.sh
PY=$(loom_python)
if ! $TORCH_PYTHON -c "import torch" 2>/dev/null; then
  echo "installing the PyTorch peer's packages (python3-torch, libopenblas0-openmp)"
  apt-get install -y -qq python3-torch libopenblas0-openmp >/dev/null
fi
scripts/build.sh --target loom bench_decode >/dev/null
source bench/cpu_header.sh
print_cpu_header "$THREADS threads"
build/apps/loom/loom cpu | grep 'bfloat16 compute'

DIR=bench-data/decode_qwen3_${LAYERS}l
mkdir -p bench-data
save=()
[ -f "$DIR/model.safetensors" ] || save=(--save-hf "$DIR")
field() { $PY -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
same_prefix() {  # two JSON id lists -> how many leading ids agree
  $PY -c "import json,sys; a,b=map(json.loads,sys.argv[1:]); n=0
while n<min(len(a),len(b)) and a[n]==b[n]: n+=1
print(n)" "$1" "$2"
}

printf "%-5s %10s %10s %8s %10s %9s %12s %11s %11s %9s %9s %5s\n" round loom_tok/s bound_tok/s vs_bound \
  prefill_s vs_peak generate_tok/s torch_bf16 torch_auto x_bf16 x_auto same
for round in $(seq 1 "$ROUNDS"); do
  line=$(LOOM_NUM_THREADS=$THREADS build/bench/bench_decode --layers "$LAYERS" --prompt "$PROMPT" --new "$NEW" \
         "${save[@]}" | grep '^RESULT ' | cut -c8-)
  save=()
  $PY -c "import json,sys; json.dump(json.loads(sys.argv[1])['prompt_ids'], open(sys.argv[2], 'w'))" "$line" "$DIR/prompt.json"
  $PY -c "import json,sys; print(json.dumps({'prompt_ids': json.load(open(sys.argv[1]))}))" "$DIR/prompt.json" \
    > "$DIR/prompt.jsonl"
  gen=$(build/apps/loom/loom generate --load "$DIR" --prompts "$DIR/prompt.jsonl" --max-new-tokens "$NEW" \
        --threads "$THREADS" --json 2>&1 >/dev/null | grep -o '([0-9.]* tokens/s)' | tr -d '(' | cut -d' ' -f1)
  torch_ids=""
  declare -A torch_tps
  for mode in bf16 autocast; do
    t=$(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp $TORCH_PYTHON bench/torch_decode_reference.py \
        "$DIR" "$DIR/prompt.json" --new "$NEW" --threads "$THREADS" --mode "$mode" | grep '^RESULT ' | cut -c8-)
    torch_tps[$mode]=$(field "$t" decode_tok_s)
    [ -n "$torch_ids" ] || torch_ids=$(field "$t" ids | tr "'" '"')
  done
  loom_tps=$(field "$line" decode_tok_s)
  printf "%-5s %10.2f %10.2f %8.2f %10.3f %9.2f %12.2f %11.2f %11.2f %9.2f %9.2f %5s\n" "$round" "$loom_tps" \
    "$(field "$line" bound_tok_s)" "$(field "$line" vs_bound)" "$(field "$line" prefill_s)" \
    "$(field "$line" prefill_vs_peak)" "$gen" "${torch_tps[bf16]}" "${torch_tps[autocast]}" \
    "$($PY -c "print($loom_tps / ${torch_tps[bf16]})")" "$($PY -c "print($loom_tps / ${torch_tps[autocast]})")" \
    "$(same_prefix "$(field "$line" ids | tr "'" '"')" "$torch_ids")/$NEW"
done
echo "copy bandwidth, cache bytes and the bf16 peak of the last round: $(field "$line" copy_gbps) GB/s," \
     "$(field "$line" cache_bytes) bytes, $(field "$line" bf16_peak_gflops) GFLOP/s"
