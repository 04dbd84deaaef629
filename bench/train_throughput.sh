#!/usr/bin/env bash
# Sizes A and B (configs/bench/size_a.yaml, size_b.yaml) through `loom train`, next to the PyTorch
# reference torch_llama_reference.py (a Llama of the same shape trained on random tokens; its path
# in REFERENCE), alternating, in one run. Prints tokens/s, MFU and peak RSS of each run and the
# Loom/PyTorch ratios. Both use the median step time after warm-up.
# PRECISIONS="fp32 bf16" adds a bf16 pass: Loom with model.compute_dtype=bfloat16 (fp32 weights)
# next to the reference's --bf16 (PyTorch CPU autocast), each row naming Loom's CPU matrix path.
#   export REFERENCE=path/to/torch_llama_reference.py
#   bench/train_throughput.sh               # sizes A and B, fp32, 2 rounds, 2 threads
#   SIZES=a ROUNDS=3 THREADS=1 bench/train_throughput.sh
#   PRECISIONS="fp32 bf16" SIZES=b bench/train_throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"a b"}
ROUNDS=${ROUNDS:-2}
PRECISIONS=${PRECISIONS:-fp32}
THREADS=${THREADS:-2}
REFERENCE=${REFERENCE:-}
[ -n "$REFERENCE" ] && [ -f "$REFERENCE" ] || {
  echo "error: set REFERENCE=path/to/torch_llama_reference.py (the PyTorch peer; '${REFERENCE}' is not a file)"; exit 2; }
source scripts/find-python.sh
PY=$(loom_python)

if ! $PY -c "import torch" 2>/dev/null || [ ! -d /usr/lib/x86_64-linux-gnu/openblas-openmp ]; then
  echo "installing the PyTorch reference's packages (python3-torch, libopenblas0-openmp)"
  apt-get install -y -qq python3-torch libopenblas0-openmp >/dev/null
fi
scripts/build.sh --target loom >/dev/null
source bench/cpu_header.sh
print_cpu_header "$THREADS threads per runner"
mkdir -p bench-data

median_loom() {  # metrics.jsonl, warm-up steps to skip -> "tokens_per_s mfu cpu_matrix_path"
  $PY - "$1" "$2" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = rows[int(sys.argv[2]):]
rows.sort(key=lambda r: r["step_time_s"])
m = rows[len(rows) // 2]
print(m["tokens_per_s"], m["mfu"], m.get("cpu_matrix_path", "-"))
PYEOF
}

printf "%-5s %-5s %-7s %5s %12s %8s %10s  %s\n" size prec runner round tokens/s MFU peakRSS_MB matrix_path
declare -A SUM
for size in $SIZES; do
  upper=$(echo "$size" | tr a-z A-Z)
  if [ "$size" = a ]; then vocab=8192; warm=3; else vocab=32000; warm=2; fi
  [ -f "bench-data/random_$size.bin" ] || $PY bench/random_dataset.py "bench-data/random_$size" "$vocab" 2000000
  for round in $(seq 1 "$ROUNDS"); do
    for prec in $PRECISIONS; do  # alternating, so drift on a shared machine hits both alike
      if [ "$prec" = bf16 ]; then torch_flag=--bf16; loom_dtype=bfloat16; else torch_flag=; loom_dtype=float32; fi
      key=$size,$prec
      # PyTorch
      out=$(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/time -f "RSS %M" \
            $PY "$REFERENCE" "$upper" --threads "$THREADS" $torch_flag 2>&1)
      res=$(echo "$out" | grep '^RESULT ' | sed 's/^RESULT //')
      tps=$(echo "$res" | $PY -c "import json,sys; r=json.load(sys.stdin); print(r['tok_per_s_median'], r['mfu_vs_peak'])")
      rss=$(echo "$out" | awk '/^RSS/{print int($2/1024)}')
      printf "%-5s %-5s %-7s %5s %12.0f %7.1f%% %10s  %s\n" "$upper" "$prec" pytorch "$round" ${tps% *} $($PY -c "print(${tps#* }*100)") "$rss" -
      SUM[$key,torch]=$($PY -c "print(${SUM[$key,torch]:-0} + ${tps% *})"); SUM[$key,torch_rss]=$rss
      # Loom
      rm -rf "bench-data/run_$size"
      out=$(/usr/bin/time -f "RSS %M" build/apps/loom/loom train --config "configs/bench/size_$size.yaml" \
            --output "bench-data/run_$size" --threads "$THREADS" --set "model.compute_dtype=$loom_dtype" \
            --set "train_dataset.dataloader.config.data_path=[\"bench-data/random_$size\"]" 2>&1)
      read -r ltps lmfu lpath <<<"$(median_loom "bench-data/run_$size/metrics.jsonl" "$warm")"
      rss=$(echo "$out" | awk '/^RSS/{print int($2/1024)}')
      printf "%-5s %-5s %-7s %5s %12.0f %7.1f%% %10s  %s\n" "$upper" "$prec" loom "$round" "$ltps" $($PY -c "print($lmfu*100)") "$rss" "$lpath"
      SUM[$key,loom]=$($PY -c "print(${SUM[$key,loom]:-0} + $ltps)"); SUM[$key,loom_rss]=$rss
    done
  done
  for prec in $PRECISIONS; do
    key=$size,$prec
    $PY -c "print('size $upper $prec: Loom/PyTorch tokens/s = %.2fx, peak RSS ratio = %.2f' % (${SUM[$key,loom]} / ${SUM[$key,torch]}, ${SUM[$key,loom_rss]} / ${SUM[$key,torch_rss]}))"
  done
  if [ -n "${SUM[$size,bf16,loom]:-}" ] && [ -n "${SUM[$size,fp32,loom]:-}" ]; then
    $PY -c "print('size $upper: Loom bf16/fp32 tokens/s = %.2fx' % (${SUM[$size,bf16,loom]} / ${SUM[$size,fp32,loom]}))"
  fi
done
