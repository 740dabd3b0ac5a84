#!/usr/bin/env node
// node runtimes/node/cli.mjs OUT "text" ["text" ...]          one translation per line
// node runtimes/node/cli.mjs OUT --ids "3 17 9" ["5 6" ...]   one row of token ids per line
// node runtimes/node/cli.mjs run OUT --ids "3 17 9" ["5 6" ...]   an encoder-only export: one JSON line per row
// node runtimes/node/cli.mjs --server URL "text" ...          the same lines from `tfm-export serve` at URL
// node runtimes/node/cli.mjs transcribe OUT file.wav [...]    a Whisper export: the text per file (cli-transcribe.mjs)
//   (--api-key KEY, else the environment's TFM_EXPORT_API_KEY)
// Decoding flags (default: the manifest's `generation` section, else greedy) are Python's `tfm-export
// generate` ones, from options/generation.mjs's CLI_FLAGS: --num-beams N, --n-best N (then each hypothesis is a line
// "score<TAB>output"), --sample with --seed N, --top-p X, ... (--help lists them); --stream prints tokens
// as they come; --prompt-lookup N or --assistant DRAFT_DIR (a smaller export of the same vocabulary) decode
// greedy speculatively (the same ids in fewer decoder calls: speculating.mjs). Multilingual exports:
// --source-lang CODE, --target-lang CODE; `cli.mjs OUT --languages`
// lists the codes.
import { parseArgs } from 'node:util';
import { connect } from './client.mjs';
import { tensorRows } from './api.mjs';
import { CLI_FLAGS } from './options/generation.mjs';

// A decoding flag's value in the usage line, by the option's kind (a choice: its words).
const METAVAR = { integer: ' N', number: ' X', boolean: '' };

/** `--flag N` words, wrapped after `lead` to lines under 100 characters. */
function wrapped(lead, words) {
  const lines = [lead];
  for (const word of words) {
    if (lines.at(-1).length + word.length >= 100) lines.push(' '.repeat(lead.length));
    lines[lines.length - 1] += ` ${word}`;
  }
  return lines.join('\n');
}

const USAGE = 'usage: cli.mjs EXPORT_DIR [options] "text" ["text" ...]\n' +
  '       cli.mjs EXPORT_DIR [options] --ids "3 17 9" ["5 6" ...]\n' +
  '       cli.mjs --server URL [--api-key KEY] [options] "text" ...  (key default: $TFM_EXPORT_API_KEY)\n' +
  '       cli.mjs EXPORT_DIR --languages                           (the codes --source-lang/--target-lang take)\n' +
  '       cli.mjs run EXPORT_DIR --ids "3 17 9" ["5 6" ...]          (an encoder-only export: its outputs)\n' +
  '       cli.mjs transcribe EXPORT_DIR FILE.wav [...] [--language CODE] [--task T] [--timestamps] [--num-beams N]\n' +
  wrapped('options:', [
    ...Object.entries(CLI_FLAGS).map(([flag, [, kind]]) => `--${flag}${METAVAR[kind] ?? ` ${kind.join('|')}`}`),
    '--stream', '--source-lang CODE', '--target-lang CODE', '--assistant DRAFT_DIR']);
const WORDS = { true: true, false: false }; // a choice's words that are booleans (--early-stopping)

function parseIds(text) {
  const ids = text.trim().split(/[\s,]+/).filter(Boolean).map(Number);
  if (!ids.length || ids.some((id) => !Number.isInteger(id))) {
    throw new Error(`--ids takes integers separated by spaces or commas, got ${JSON.stringify(text)}`);
  }
  return ids;
}

/** The decoding flags' values as options (options/generation.mjs checks them). */
function decodingOptions(values) {
  const options = { sourceLang: values['source-lang'], targetLang: values['target-lang'] };
  for (const [flag, [name, kind]] of Object.entries(CLI_FLAGS)) {
    const text = values[flag];
    if (text === undefined) continue;
    if (kind === 'boolean') {
      options[name] = text;
    } else if (Array.isArray(kind)) {
      if (!kind.includes(text)) throw new Error(`--${flag} takes ${kind.join(', ')}, got ${JSON.stringify(text)}`);
      options[name] = WORDS[text] ?? text;
    } else {
      options[name] = Number(text);
      if (Number.isNaN(options[name])) throw new Error(`--${flag} takes a number, got ${JSON.stringify(text)}`);
    }
  }
  return options;
}

/** The export folder opened here: best lines, n-best hypotheses { score, output } and streams. */
async function openLocal(exportDir, ids, assistantDir) {
  const { openExport } = await import('./exported.mjs'); // onnxruntime-node: loaded only when decoding here
  const { languageOptions } = await import('./text/tokenizer.mjs');
  const assistant = assistantDir ? await openExport(assistantDir) : null; // the draft of speculative decoding
  const model = await openExport(exportDir);
  if (!ids && !model.tokenizer) {
    await model.release();
    await assistant?.release();
    throw new Error('this export has no tokenizer; pass token ids with --ids');
  }
  const show = (row) => (ids ? row.join(' ') : model.tokenizer.decode(row));
  // Language codes: the source's marks the text; the target's is the forced first token (decoding option).
  const prepare = (sources, { sourceLang, targetLang, ...options }) => ({
    sources: ids ? sources : sources.map((s) => model.tokenizer.encode(s, sourceLang, targetLang)),
    options: { ...languageOptions(model.tokenizer, targetLang), ...options, ...(assistant ? { assistant } : {}) },
  });
  return {
    best: async (inputs, opts) => {
      const { sources, options } = prepare(inputs, opts);
      return (await model.generateIds(sources, options)).map(show);
    },
    nBest: async (input, opts) => {
      const { sources, options } = prepare([input], opts);
      return (await model.generate(sources, options))[0].map((h) => ({ score: h.score, output: show(h.ids) }));
    },
    stream: (source, options) => model.stream(source, options),
    release: async () => { await model.release(); await assistant?.release(); },
  };
}

/** The same from a `tfm-export serve` (which tokenizes texts itself). */
function openRemote(url, apiKey, ids) {
  const server = connect(url, { apiKey });
  const show = (h) => (ids ? h.ids.join(' ') : h.text);
  return {
    best: async (sources, options) => (await server.generate(sources, options)).map(([h]) => show(h)),
    nBest: async (source, options) => (await server.generate([source], options))[0]
      .map((h) => ({ score: h.score, output: show(h) })),
    stream: (source, options) => server.stream(source, options),
    release: async () => {},
  };
}

/** `--languages`: the lines of Python's `tfm-export languages FOLDER`. */
async function printLanguages(exportDir) {
  const { languages } = await import('./exported.mjs');
  const codes = await languages(exportDir);
  if (codes.spoken) { // a Whisper export
    if (!codes.spoken.length) {
      console.log('spoken: English only (an English-only Whisper model: no --language, no --task translate)');
      return;
    }
    console.log(`spoken (${codes.spoken.length}): ${codes.spoken.join(' ')} (transcribe --language CODE; default: detected)`);
    if (codes.translateInto) console.log(`translates into: ${codes.translateInto} (transcribe --task translate)`);
    return;
  }
  if (!codes.source.length && !codes.target.length) {
    console.log('this model takes no language codes (it translates one pair, or its tokenizer marks none)');
    return;
  }
  for (const side of ['source', 'target']) {
    console.log(`${side} (${codes[side].length}): ${codes[side].length ? codes[side].join(' ') : '-'}`);
  }
  if (codes.sourceDefault) console.log(`default source: ${codes.sourceDefault}`);
}

/** `run EXPORT_DIR --ids ...`: the lines of Python's `tfm-export run`, one JSON object per source. */
async function runEncoder(exportDir, sources) {
  const { run: runExport } = await import('./exported.mjs');
  const outputs = Object.entries(await runExport(exportDir, sources)).map(([name, t]) => [name, tensorRows(t)]);
  sources.forEach((ids, row) => {
    console.log(JSON.stringify({ ids, ...Object.fromEntries(outputs.map(([name, rows]) => [name, rows[row]])) }));
  });
}

/** Best outputs in one batch; n-best ("score<TAB>output") and streams one input at a time. */
async function run(backend, sources, options, { ids, stream }) {
  if (stream) {
    for (const source of sources) {
      for await (const piece of backend.stream(source, options)) process.stdout.write(ids ? `${piece} ` : piece);
      process.stdout.write('\n');
    }
  } else if ((options.numReturnSequences ?? 1) > 1) {
    for (const source of sources) {
      for (const h of await backend.nBest(source, options)) console.log(`${h.score?.toFixed(6)}\t${h.output}`);
    }
  } else {
    for (const line of await backend.best(sources, options)) console.log(line);
  }
}

if (process.argv[2] === 'transcribe') { // its own flags (--language, --task): cli-transcribe.mjs
  const { transcribeCommand } = await import('./cli-transcribe.mjs');
  process.exit(await transcribeCommand(process.argv.slice(3)));
}

let backend;
try {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      ids: { type: 'boolean' }, stream: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
      server: { type: 'string' }, 'api-key': { type: 'string' }, languages: { type: 'boolean' },
      'source-lang': { type: 'string' }, 'target-lang': { type: 'string' }, assistant: { type: 'string' },
      ...Object.fromEntries(Object.entries(CLI_FLAGS)
        .map(([flag, [, kind]]) => [flag, { type: kind === 'boolean' ? 'boolean' : 'string' }])),
    },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const command = !values.server && positionals[0] === 'run' ? positionals.shift() : null;
  const [exportDir, ...inputs] = values.server ? [values.server, ...positionals] : positionals;
  if (values.languages && exportDir && !values.server) {
    await printLanguages(exportDir);
    process.exit(0);
  }
  if (!exportDir || inputs.length === 0) {
    console.error(USAGE);
    process.exit(2);
  }
  if (command && !values.ids) throw new Error('run takes token ids: cli.mjs run EXPORT_DIR --ids "3 17 9" ["5 6" ...]');
  const options = decodingOptions(values);
  const sources = values.ids ? inputs.map(parseIds) : inputs;
  if (command) {
    await runEncoder(exportDir, sources);
    process.exit(0);
  }
  if (values.assistant && values.server) throw new Error('--assistant opens a draft export here; it does not go with --server');
  backend = values.server ? openRemote(values.server, values['api-key'] ?? process.env.TFM_EXPORT_API_KEY, values.ids)
    : await openLocal(exportDir, values.ids, values.assistant);
  await run(backend, sources, options, values);
  await backend.release();
} catch (err) {
  await backend?.release();
  console.error(`error: ${err.message}`);
  process.exit(err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? 2 : 1);
}
