// consume.js INDIR: the JavaScript consumer of the Fabric wire-compatibility test.
//
// Decodes every INDIR/NAME.bin whose NAME is one of the five test messages (summary.NAMES) with
// Fabric's own generated JavaScript protobufs, nested layers included, and prints ONE JSON object
// { NAME: summary, ... } to stdout, computed by the same code as produce.js (summary.js). Files
// with other names are ignored.
//
// Exit status: 0 on success; 1 if a message cannot be decoded or INDIR holds none of the five
// (the error goes to stderr); 2 on bad usage.
//
// A layer that decodes but whose google-protobuf re-encoding differs from the bytes it came from
// (fields google-protobuf does not know are dropped, non-canonical order or defaults are
// normalised) is reported on stderr as a warning only.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const S = require('./summary');

function main() {
  const inDir = process.argv[2];
  if (!inDir) {
    process.stderr.write('usage: node consume.js INDIR\n');
    process.exit(2);
  }

  const present = new Set(fs.readdirSync(inDir));
  const names = S.NAMES.filter((name) => present.has(`${name}.bin`));
  if (names.length === 0) {
    process.stderr.write(`consume.js: no ${S.NAMES.map((n) => `${n}.bin`).join(', ')} in ${inDir}\n`);
    process.exit(1);
  }

  const summaries = {};
  for (const name of names) {
    try {
      const decoded = S.decode(name, fs.readFileSync(path.join(inDir, `${name}.bin`)));
      summaries[name] = S.summarize(name, decoded);
      for (const layer of S.reencodingMismatches(decoded)) {
        process.stderr.write(`consume.js: warning: ${name}: layer ${layer} does not re-encode byte-identically\n`);
      }
    } catch (error) {
      process.stderr.write(`consume.js: cannot decode ${name}.bin: ${error.stack || error}\n`);
      process.exit(1);
    }
  }
  process.stdout.write(S.summariesJson(summaries));
}

main();
