#!/usr/bin/env node
// node runtimes/node/cli.mjs OUT "text" ["text" ...]          one translation per line
// node runtimes/node/cli.mjs OUT --ids "3 17 9" ["5 6" ...]   one row of token ids per line
// Decoding options (default: the manifest's `generation` section, else greedy): --max-new-tokens N,
// --num-beams N, --n-best N (then each hypothesis is a line "score<TAB>output"), --length-penalty X,
// --sample with --seed N, --temperature X, --top-k N, --top-p X; --stream prints tokens as they come.
import { parseArgs } from 'node:util';
import { openExport } from './translate.mjs';

const USAGE = 'usage: cli.mjs EXPORT_DIR [options] "text" ["text" ...]\n' +
  '       cli.mjs EXPORT_DIR [options] --ids "3 17 9" ["5 6" ...]\n' +
  'options: --max-new-tokens N --num-beams N --n-best N --length-penalty X\n' +
  '         --sample --seed N --temperature X --top-k N --top-p X --stream';

// flag -> decoding option (options.mjs); each takes a number.
const NUMERIC = {
  'max-new-tokens': 'maxNewTokens', 'num-beams': 'numBeams', 'n-best': 'numReturnSequences',
  'length-penalty': 'lengthPenalty', seed: 'seed', temperature: 'temperature', 'top-k': 'topK', 'top-p': 'topP',
};

function parseIds(text) {
  const ids = text.trim().split(/[\s,]+/).filter(Boolean).map(Number);
  if (!ids.length || ids.some((id) => !Number.isInteger(id))) {
    throw new Error(`--ids takes integers separated by spaces or commas, got ${JSON.stringify(text)}`);
  }
  return ids;
}

function decodingOptions(values) {
  const options = { doSample: values.sample };
  for (const [flag, name] of Object.entries(NUMERIC)) {
    if (values[flag] === undefined) continue;
    options[name] = Number(values[flag]);
    if (Number.isNaN(options[name])) throw new Error(`--${flag} takes a number, got ${JSON.stringify(values[flag])}`);
  }
  return options;
}

/** One input: streamed pieces, the best output, or n-best lines "score<TAB>output". */
async function decode(model, input, options, { ids, stream }) {
  const show = (row) => (ids ? row.join(' ') : model.tokenizer.decode(row));
  if (stream) {
    for await (const piece of model.stream(input, options)) process.stdout.write(ids ? `${piece} ` : piece);
    process.stdout.write('\n');
    return;
  }
  const source = ids ? input : model.tokenizer.encode(input);
  const [hyps] = await model.generate([source], options);
  const nBest = (options.numReturnSequences ?? 1) > 1;
  for (const h of hyps) console.log(nBest ? `${h.score.toFixed(6)}\t${show(h.ids)}` : show(h.ids));
}

let model;
try {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      ids: { type: 'boolean' }, sample: { type: 'boolean' }, stream: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
      ...Object.fromEntries(Object.keys(NUMERIC).map((flag) => [flag, { type: 'string' }])),
    },
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
  const options = decodingOptions(values);
  const sources = values.ids ? inputs.map(parseIds) : inputs;
  model = await openExport(exportDir);
  if (!values.ids && !model.tokenizer) throw new Error('this export has no tokenizer; pass token ids with --ids');
  if (!values.stream && !((options.numReturnSequences ?? 1) > 1)) {
    // one batch for the best outputs (as before); n-best and streams go one input at a time
    const rows = await model.generateIds(values.ids ? sources : sources.map((t) => model.tokenizer.encode(t)), options);
    for (const row of rows) console.log(values.ids ? row.join(' ') : model.tokenizer.decode(row));
  } else {
    for (const source of sources) await decode(model, source, options, values);
  }
  await model.release();
} catch (err) {
  await model?.release();
  console.error(`error: ${err.message}`);
  process.exit(err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? 2 : 1);
}
