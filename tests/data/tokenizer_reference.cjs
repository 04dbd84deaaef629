// Reference outputs for the tokenizer tests, from the JavaScript implementations: ids and
// decodings from @lenml/tokenizers (transformers.js's tokenizers), chat renderings from
// @huggingface/jinja with the variables transformers' apply_chat_template passes.
//
//   node tokenizer_reference.cjs NPM_DIR MODEL_DIR CASES.json OUT.json
const fs = require("fs");
const path = require("path");

const [npmDir, modelDir, casesPath, outPath] = process.argv.slice(2);
const { TokenizerLoader } = require(path.join(npmDir, "tokenizers/dist/main.js"));
const { Template } = require(path.join(npmDir, "jinja/dist/index.cjs"));

const readJson = (f) => JSON.parse(fs.readFileSync(path.join(modelDir, f), "utf8"));
const config = readJson("tokenizer_config.json");
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON: readJson("tokenizer.json"), tokenizerConfig: config });
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const model = path.basename(modelDir);

// transformers passes the special tokens map: each token set in tokenizer_config.json as its
// string (an AddedToken object gives its content), unset ones left out.
const tokenString = (v) => (v && typeof v === "object" ? v.content : v);
const specialTokens = {};
for (const key of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
  if (config[key] !== undefined && config[key] !== null) specialTokens[key] = tokenString(config[key]);
}
if (config.additional_special_tokens) {
  specialTokens.additional_special_tokens = config.additional_special_tokens.map(tokenString);
}

// transformers.js refuses to decode an empty list; the empty text is the answer.
const decode = (ids, skip) =>
  ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });

const texts = cases.texts.map((text) => {
  const ids = tokenizer.encode(text);
  return {
    text,
    ids,
    ids_without_special: tokenizer.encode(text, { add_special_tokens: false }),
    decoded: decode(ids, false),
    decoded_skip_special: decode(ids, true),
  };
});

const template = new Template(config.chat_template);
const chats = [];
for (const chat of cases.chats) {
  if (chat.models && !chat.models.includes(model)) continue;
  for (const thinking of chat.enable_thinking || [null]) {
    for (const addGenerationPrompt of [false, true]) {
      const variables = { ...specialTokens, messages: chat.messages, add_generation_prompt: addGenerationPrompt };
      if (chat.tools) variables.tools = chat.tools;
      if (thinking !== null) variables.enable_thinking = thinking;
      const text = template.render(variables);
      chats.push({
        name: chat.name, variables, text,
        ids: tokenizer.encode(text, { add_special_tokens: false }),
      });
    }
  }
}

const out = { model, bos_token_id: tokenizer.bos_token_id ?? null, eos_token_id: tokenizer.eos_token_id ?? null,
              pad_token_id: tokenizer.pad_token_id ?? null, texts, chats };
fs.writeFileSync(outPath, JSON.stringify(out, null, 1));
console.error(`${model}: ${texts.length} texts, ${chats.length} chat renderings`);
