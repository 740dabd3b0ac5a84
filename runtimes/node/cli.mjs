#!/usr/bin/env node
// node runtimes/node/cli.mjs OUT "text" ["text" ...]   or   node cli.mjs OUT --ids "3 17 9"
import { generateIds, openExport, translate } from './translate.mjs';

const [exportDir, ...rest] = process.argv.slice(2);
if (!exportDir || rest.length === 0) {
  console.error('usage: cli.mjs EXPORT_DIR "text" ["text" ...] | EXPORT_DIR --ids "3 17 9"');
  process.exit(2);
}
try {
  if (rest[0] === '--ids') {
    const model = await openExport(exportDir);
    const sources = rest.slice(1).map((s) => s.trim().split(/[\s,]+/).map(Number));
    for (const row of await generateIds(model, sources)) console.log(row.join(' '));
  } else {
    for (const [i, out] of (await translate(exportDir, rest)).entries()) console.log(`${rest[i]}\t${out}`);
  }
} catch (err) {
  console.error(`error: ${err.message}`);
  process.exit(1);
}
