#!/usr/bin/env node
// Validates JSON files against a JSON Schema (draft 2020-12) with ajv and
// prints one verdict per file as a JSON line:
//   {"file": "...", "valid": false, "errors": [{"path": "/roles/actor/replicas", "message": "must be integer"}]}
// Usage: node validate.js SCHEMA FILE...
// Exit status: 0 when every file got a verdict (valid or not), 2 when the
// schema itself does not compile or an argument is missing. Used by the
// spec_corpus ctest (orchestrator/spec/tests/spec_corpus_test.cc).
"use strict";
const fs = require("fs");
const Ajv2020 = require("ajv/dist/2020");

function main(argv) {
  if (argv.length < 1) {
    process.stderr.write("usage: node validate.js SCHEMA FILE...\n");
    return 2;
  }
  const [schemaPath, ...files] = argv;
  let validate;
  try {
    const schema = JSON.parse(fs.readFileSync(schemaPath, "utf8"));
    const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false, strictTuples: false });
    validate = ajv.compile(schema);
  } catch (e) {
    process.stderr.write(`schema ${schemaPath}: ${e.message}\n`);
    return 2;
  }
  for (const file of files) {
    let verdict;
    try {
      const doc = JSON.parse(fs.readFileSync(file, "utf8"));
      const valid = validate(doc);
      verdict = {
        file,
        valid: !!valid,
        errors: valid ? [] : validate.errors.map((e) => ({ path: e.instancePath, message: e.message })),
      };
    } catch (e) {
      verdict = { file, valid: false, errors: [{ path: "", message: `not JSON: ${e.message}` }] };
    }
    process.stdout.write(JSON.stringify(verdict) + "\n");
  }
  return 0;
}

process.exitCode = main(process.argv.slice(2));
