// The JavaScript side of bench/tokenizer_throughput.sh: the same documents encoded by
// @lenml/tokenizers (transformers.js's port of HF tokenizers) on one thread, cold and warm.
//
//   node tokenizer_throughput.cjs NPM_DIR MODEL_DIR INPUT.jsonl [KEY]
const fs = require("fs");
const path = require("path");

const [npmDir, modelDir, input, key = "text"] = process.argv.slice(2);
const { TokenizerLoader } = require(path.join(npmDir, "tokenizers/dist/main.js"));
const read = (f) => JSON.parse(fs.readFileSync(path.join(modelDir, f), "utf8"));
const texts = fs.readFileSync(input, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)[key]);
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);

const loadStart = process.hrtime.bigint();
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON: read("tokenizer.json"), tokenizerConfig: read("tokenizer_config.json") });
const seconds = (start) => Number(process.hrtime.bigint() - start) / 1e9;
const loadS = seconds(loadStart);

const pass = () => {
  const start = process.hrtime.bigint();
  let tokens = 0;
  for (const t of texts) tokens += tokenizer.encode(t).length;
  return [seconds(start), tokens];
};
const [coldS, tokens] = pass();
let warmS = 0;
let passes = 0;
while (passes < 3 || warmS < 2) warmS += pass()[0], passes += 1;
console.log(`bytes=${bytes} tokens=${tokens} load_s=${loadS.toFixed(3)} cold_mb_s=${(bytes / 1e6 / coldS).toFixed(2)} ` +
            `warm_mb_s=${(bytes / 1e6 / (warmS / passes)).toFixed(2)}`);
