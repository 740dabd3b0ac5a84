#!/usr/bin/env node
// node runtimes/node/cli.mjs OUT "text" ["text" ...]          one translation per line
// node runtimes/node/cli.mjs OUT --ids "3 17 9" ["5 6" ...]   one row of token ids per line
// --max-new-tokens N limits the generated tokens (default: the model's max_len).
import { parseArgs } from 'node:util';
import { generateIds, translate } from './translate.mjs';

const USAGE = 'usage: cli.mjs EXPORT_DIR [--max-new-tokens N] "text" ["text" ...]\n' +
  '       cli.mjs EXPORT_DIR [--max-new-tokens N] --ids "3 17 9" ["5 6" ...]';

function parseIds(text) {
  const ids = text.trim().split(/[\s,]+/).filter(Boolean).map(Number);
  if (!ids.length || ids.some((id) => !Number.isInteger(id))) {
    throw new Error(`--ids takes integers separated by spaces or commas, got ${JSON.stringify(text)}`);
  }
  return ids;
}

try {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { ids: { type: 'boolean' }, 'max-new-tokens': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const [exportDir, ...inputs] = positionals;
  if (!exportDir || inputs.length === 0) {
    console.error(USAGE);
    process.exit(2);
  }
  const maxNewTokens = values['max-new-tokens'] === undefined ? undefined : Number(values['max-new-tokens']);
  if (values.ids) {
    for (const row of await generateIds(exportDir, inputs.map(parseIds), { maxNewTokens })) console.log(row.join(' '));
  } else {
    for (const out of await translate(exportDir, inputs, { maxNewTokens })) console.log(out);
  }
} catch (err) {
  console.error(`error: ${err.message}`);
  process.exit(err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? 2 : 1);
}
