// `cli.mjs transcribe EXPORT_DIR file.wav [...]`: Python's `tfm-export transcribe` for a Whisper export
// in Node (speech/whisper.mjs): the text of each file on its line, its subtitles (--format srt|vtt, as Python's), or with
// --json one object per line { file, text, language, segments, ids } (Python's --json). --vad (and its --vad-* settings)
// transcribes only the speech; --batch-size N decodes N windows together (--vad's chunks and the files given), as
// Python's; --prompt-lookup N or --assistant DRAFT_DIR (a Whisper export of the same tokenizer) decode the greedy
// windows speculatively (the same ids: speech/assisted.mjs). The temperature fallback (--temperature 0,0.2,...,
// --*-threshold, --seed: speech/fallback.mjs), --condition-on-prev-tokens, --prompt-condition-type, --hotwords and
// --prefix are Python's flags of the same names. A bad file, export or value is one error line and exit 1 (the files
// before it are printed; with --batch-size, which transcribes the files in one call, none); a bad flag exit 2, as cli.mjs.
import { existsSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { VadParameters } from './speech/vad.mjs';
import { toSrt, toVtt } from './speech/subtitles.mjs';

const FORMATS = { txt: (r) => `${r.text.trim()}\n`, srt: (r) => toSrt(r.segments), vtt: (r) => toVtt(r.segments),
  json: (r, file) => `${JSON.stringify({ file, ...r })}\n` };

export const USAGE = 'usage: cli.mjs transcribe EXPORT_DIR FILE.wav [FILE.wav ...] [--language CODE] ' +
  '[--task transcribe|translate] [--timestamps] [--num-beams N] [--prompt TEXT] [--max-new-tokens N] ' +
  '[--format txt|srt|vtt|json] [--json] [--word-timestamps] [--output-dir DIR] [--vad] [--vad-threshold P] ' +
  '[--vad-min-speech-ms MS] [--vad-min-silence-ms MS] [--vad-pad-ms MS] [--vad-max-speech-s S] [--batch-size N] ' +
  '[--prompt-lookup N] [--assistant DRAFT_DIR] [--temperature T[,T...]] [--seed N] ' +
  '[--compression-ratio-threshold X] [--logprob-threshold X] [--no-speech-threshold X] ' +
  '[--condition-on-prev-tokens | --no-condition-on-prev-tokens] [--prompt-condition-type first-segment|all-segments] ' +
  '[--hotwords TEXT] [--prefix TEXT]';

// --help's lines on the options of every window (Python's --help says the same of its flags)
const HELP = `
  --temperature T[,T...]   0 greedy, above 0 sampling; several (0,0.2,0.4,0.6,0.8,1): the temperature fallback,
                           a window that fails a threshold is decoded again at the next one [default: 0]
  --seed N                 the seed of the sampled tries (the same seed, the same text: Python's) [default: 0]
  --compression-ratio-threshold X  fall back when a window's ids compress better than X (repetition; 2.4)
  --logprob-threshold X    fall back when a window's average log-probability is below X (-1.0)
  --no-speech-threshold X  with a logprob threshold: skip a window as silence when P(<|nospeech|>) is above X (0.6)
                           [thresholds' default: the folder's generation_config.json]
  --condition-on-prev-tokens, --no-condition-on-prev-tokens  decode each window after the text before it
  --prompt-condition-type first-segment|all-segments  all-segments keeps --prompt before every window's text
  --hotwords TEXT          words to expect (names, terms), before every window's text (faster-whisper's)
  --prefix TEXT            the first window's first words, forced (faster-whisper's)`;

// --*-threshold -> the fallback's option (speech/fallback.mjs; Python's --*-threshold)
const THRESHOLD_FLAGS = { 'compression-ratio-threshold': 'compressionRatioThreshold',
  'logprob-threshold': 'logprobThreshold', 'no-speech-threshold': 'noSpeechThreshold' };
// the library's names of these options -> the flags, so that its errors (checked with the folder's settings) say
// what to type
const LIBRARY_NAMES = { ...Object.fromEntries(Object.entries(THRESHOLD_FLAGS).map(([flag, name]) => [name, `--${flag}`])),
  conditionOnPrevTokens: '--condition-on-prev-tokens', promptConditionType: '--prompt-condition-type' };
const NUMBER_FLAGS = new Set(['--temperature', '--seed', ...Object.keys(THRESHOLD_FLAGS).map((flag) => `--${flag}`)]);
const PROMPT_CONDITIONS = ['first-segment', 'all-segments'];
const SEEDS = 2n ** 64n; // Python's --seed range: 0 .. 2**64 - 1

// --vad-* -> the VAD's parameter (Python's VadParameters field, speech/vad.mjs), and whether it takes whole numbers
const VAD_FLAGS = { 'vad-threshold': ['threshold', false], 'vad-min-speech-ms': ['min_speech_duration_ms', true],
  'vad-min-silence-ms': ['min_silence_duration_ms', true], 'vad-pad-ms': ['speech_pad_ms', true],
  'vad-max-speech-s': ['max_speech_duration_s', false] };

// parseArgs' flags: those taking a value, the switches
const FLAGS = Object.fromEntries([
  ...['language', 'task', 'num-beams', 'max-new-tokens', 'prompt', 'format', 'output-dir', 'batch-size', 'prompt-lookup',
    'assistant', 'temperature', 'seed', 'prompt-condition-type', 'hotwords', 'prefix', ...Object.keys(THRESHOLD_FLAGS),
    ...Object.keys(VAD_FLAGS)].map((flag) => [flag, { type: 'string' }]),
  ...['timestamps', 'json', 'word-timestamps', 'vad', 'condition-on-prev-tokens', 'no-condition-on-prev-tokens']
    .map((flag) => [flag, { type: 'boolean' }]),
  ['help', { type: 'boolean', short: 'h' }]]);

/** A positive integer flag's value, or one line. */
function integer(flag, text) {
  const value = Number(text);
  if (text === undefined) return undefined;
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${flag} takes an integer of at least 1, got ${JSON.stringify(text)}`);
  return value;
}

/**
 * DIR/NAME.EXT for each file (Python's output_files): one line, before any work, when two files would share a
 * name or one is there already (new files only: a user's file is never replaced).
 */
async function outputFiles(files, dir, ext) {
  const paths = files.map((file) => path.join(dir, `${path.parse(file).name}.${ext}`));
  const twice = paths.find((p, i) => paths.indexOf(p) !== i);
  if (twice) throw new Error(`two inputs would write ${twice}; rename one, or write them to separate folders`);
  const there = paths.find((p) => existsSync(p));
  if (there) throw new Error(`${there} exists; tfm-export writes new files only: choose another folder`);
  await mkdir(dir, { recursive: true });
  return paths;
}

/** `text` as the new file `target`: written beside it, then renamed (a reader never sees half a file). */
async function writeNew(target, text) {
  const partial = path.join(path.dirname(target), `.${path.basename(target)}.${process.pid}.partial`);
  await writeFile(partial, text, { flag: 'wx' });
  await rename(partial, target);
  console.error(`wrote ${target}`);
}

/** The --vad-* flags given, as the VAD's parameters (null: none given); a number that is not one is one line. */
function vadParameters(values) {
  const given = Object.keys(VAD_FLAGS).filter((flag) => values[flag] !== undefined);
  if (!given.length) return null;
  return Object.fromEntries(given.map((flag) => {
    const [field, whole] = VAD_FLAGS[flag];
    const value = Number(values[flag]);
    if (values[flag].trim() === '' || !Number.isFinite(value) || (whole && !Number.isInteger(value))) {
      throw new Error(`--${flag} takes ${whole ? 'a whole number' : 'a number'}, got ${JSON.stringify(values[flag])}`);
    }
    return [field, value];
  }));
}

/**
 * `args` with `--logprob-threshold -1` as `--logprob-threshold=-1`: parseArgs takes a value that starts with a dash
 * for a flag, and a negative number is what these flags are given (Python's click takes it).
 */
function joinNegatives(args) {
  const out = [];
  for (let i = 0; i < args.length; i += 1) {
    const joined = NUMBER_FLAGS.has(args[i]) && /^-[\d.]/.test(args[i + 1] ?? '');
    out.push(joined ? `${args[i]}=${args[(i += 1)]}` : args[i]);
  }
  return out;
}

/** A number flag's value (finite), or one line. */
function number(flag, text) {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value)) throw new Error(`--${flag} takes a number, got ${JSON.stringify(text)}`);
  return value;
}

/** --temperature's numbers (one: that temperature; several: the fallback's), each 0 or more, or one line. */
function temperatures(text) {
  const values = text.split(',').map(Number);
  if (text.split(',').some((t) => t.trim() === '') || values.some((t) => !Number.isFinite(t) || t < 0)) {
    throw new Error(`--temperature takes numbers of 0 or more separated by commas (0,0.2,0.4), got ${JSON.stringify(text)}`);
  }
  return values.length > 1 ? values : values[0];
}

/** --seed: a whole number in 0 .. 2**64 - 1 (a BigInt past 2**53, as generationConfig takes it), or one line. */
function seedOf(text) {
  const big = /^\d+$/.test(text) ? BigInt(text) : -1n;
  if (big < 0n || big >= SEEDS) throw new Error(`--seed takes a whole number from 0 to 2**64 - 1, got ${JSON.stringify(text)}`);
  return big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
}

/**
 * The fallback's, prompt's, hotwords' and prefix's options of the flags given (those left out are not passed: the
 * folder's settings stay), a bad value one line.
 */
function windowOptions(values) {
  const options = {};
  if (values.temperature !== undefined) options.temperature = temperatures(values.temperature);
  if (values.seed !== undefined) options.seed = seedOf(values.seed);
  for (const [flag, name] of Object.entries(THRESHOLD_FLAGS)) {
    if (values[flag] !== undefined) options[name] = number(flag, values[flag]);
  }
  if (values['condition-on-prev-tokens'] && values['no-condition-on-prev-tokens']) {
    throw new Error('--condition-on-prev-tokens and --no-condition-on-prev-tokens contradict each other: give one');
  }
  if (values['condition-on-prev-tokens'] || values['no-condition-on-prev-tokens']) {
    options.conditionOnPrevTokens = Boolean(values['condition-on-prev-tokens']);
  }
  const kind = values['prompt-condition-type'];
  if (kind !== undefined && !PROMPT_CONDITIONS.includes(kind)) {
    throw new Error(`--prompt-condition-type takes ${PROMPT_CONDITIONS.join(' or ')}, got ${JSON.stringify(kind)}`);
  }
  if (kind !== undefined) options.promptConditionType = kind;
  for (const name of ['hotwords', 'prefix']) if (values[name] !== undefined) options[name] = values[name];
  return options;
}

/** A library error named by the flags (its option names replaced: `noSpeechThreshold` -> `--no-speech-threshold`). */
const asFlags = (message) => Object.entries(LIBRARY_NAMES).reduce((text, [name, flag]) => text.replaceAll(name, flag),
  message);

/** The decoding options of the parsed flags (a bad number is one line). */
function transcribeOptions(values) {
  const options = { language: values.language, task: values.task ?? 'transcribe', timestamps: values.timestamps ?? false,
    numBeams: integer('num-beams', values['num-beams']) ?? 1, prompt: values.prompt ?? null,
    maxNewTokens: integer('max-new-tokens', values['max-new-tokens']), wordTimestamps: values['word-timestamps'] ?? false,
    batchSize: integer('batch-size', values['batch-size']) ?? 1,
    promptLookupNumTokens: integer('prompt-lookup', values['prompt-lookup']), ...windowOptions(values) };
  if (values.vad) Object.assign(options, { vad: true, vadParameters: vadParameters(values) });
  return options;
}

/** The VAD's parameters checked before any work (Python's rule), its error named by the flags, not its fields. */
function checkVad(parameters) {
  try {
    if (parameters) new VadParameters(parameters); // eslint-disable-line no-new
  } catch (err) {
    throw new Error(Object.entries(VAD_FLAGS).reduce((text, [flag, [field]]) => text.replaceAll(field, `--${flag}`),
      err.message));
  }
}

/** Runs the command on `args` (after `transcribe`); the process's exit code. */
export async function transcribeCommand(args) {
  let values;
  let positionals;
  try {
    ({ values, positionals } = parseArgs({
      args: joinNegatives(args), allowPositionals: true,
      options: FLAGS,
    }));
  } catch (err) {
    console.error(`error: ${err.message}\n${USAGE}`);
    return 2;
  }
  if (values.help) { console.log(`${USAGE}\n${HELP}`); return 0; }
  const [exportDir, ...files] = positionals;
  if (!exportDir || !files.length) { console.error(USAGE); return 2; }
  const ext = values.json ? 'json' : values.format ?? 'txt';
  const format = FORMATS[ext];
  if (!format) {
    console.error(`error: --format takes ${Object.keys(FORMATS).join(', ')}, got ${JSON.stringify(values.format)}\n${USAGE}`);
    return 2;
  }
  if (values['word-timestamps'] && ext !== 'json') { // Python's rule: the words would be computed and not shown
    console.error(`error: --word-timestamps shows in --json (or --format json), not in --format ${ext}\n${USAGE}`);
    return 2;
  }
  const vadFlag = Object.keys(VAD_FLAGS).find((flag) => values[flag] !== undefined);
  if (vadFlag && !values.vad) { // Python's rule: a setting of the VAD without the VAD
    console.error(`error: --${vadFlag} sets the VAD; add --vad\n${USAGE}`);
    return 2;
  }
  let model = null;
  let assistant = null;
  try {
    const options = transcribeOptions(values);
    checkVad(options.vadParameters);
    const targets = values['output-dir'] ? await outputFiles(files, values['output-dir'], ext) : [];
    const { openExport } = await import('./exported.mjs'); // onnxruntime-node: loaded only when decoding
    model = await openExport(exportDir);
    if (values.assistant) options.assistant = assistant = await openExport(values.assistant); // the draft
    // one file at a time, each written when done; with --batch-size, all files' windows together (Python's)
    const all = options.batchSize > 1 ? await model.transcribe(files, options) : null;
    for (const [i, file] of files.entries()) {
      const text = format(all ? all[i] : await model.transcribe(file, options), file);
      if (targets.length) await writeNew(targets[i], text);
      else process.stdout.write(text);
    }
    return 0;
  } catch (err) {
    console.error(`error: ${asFlags(err.message)}`);
    return 1;
  } finally {
    await model?.release();
    await assistant?.release();
  }
}
