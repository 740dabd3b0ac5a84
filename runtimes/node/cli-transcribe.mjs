// `cli.mjs transcribe EXPORT_DIR file.wav [...]`: Python's `tfm-export transcribe` for a Whisper export
// in Node (speech/whisper.mjs): the text of each file on its line, its subtitles (--format srt|vtt, as Python's), or with
// --json one object per line { file, text, language, segments, ids } (Python's --json). A bad file or export is one error line and exit 1
// (the files before it are printed); a bad flag exit 2, as cli.mjs.
import { existsSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { toSrt, toVtt } from './speech/whisper.mjs';

const FORMATS = { txt: (r) => `${r.text.trim()}\n`, srt: (r) => toSrt(r.segments), vtt: (r) => toVtt(r.segments),
  json: (r, file) => `${JSON.stringify({ file, ...r })}\n` };

export const USAGE = 'usage: cli.mjs transcribe EXPORT_DIR FILE.wav [FILE.wav ...] [--language CODE] ' +
  '[--task transcribe|translate] [--timestamps] [--num-beams N] [--prompt TEXT] [--max-new-tokens N] ' +
  '[--format txt|srt|vtt|json] [--json] [--word-timestamps] [--output-dir DIR]';

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

/** The decoding options of the parsed flags (a bad number is one line). */
function transcribeOptions(values) {
  return { language: values.language, task: values.task ?? 'transcribe', timestamps: values.timestamps ?? false,
    numBeams: integer('num-beams', values['num-beams']) ?? 1, prompt: values.prompt ?? null,
    maxNewTokens: integer('max-new-tokens', values['max-new-tokens']), wordTimestamps: values['word-timestamps'] ?? false };
}

/** Runs the command on `args` (after `transcribe`); the process's exit code. */
export async function transcribeCommand(args) {
  let values;
  let positionals;
  try {
    ({ values, positionals } = parseArgs({
      args, allowPositionals: true,
      options: { language: { type: 'string' }, task: { type: 'string' }, 'num-beams': { type: 'string' },
        'max-new-tokens': { type: 'string' }, prompt: { type: 'string' }, format: { type: 'string' },
        'output-dir': { type: 'string' }, timestamps: { type: 'boolean' }, json: { type: 'boolean' },
        'word-timestamps': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' } },
    }));
  } catch (err) {
    console.error(`error: ${err.message}\n${USAGE}`);
    return 2;
  }
  if (values.help) { console.log(USAGE); return 0; }
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
  let model = null;
  try {
    const options = transcribeOptions(values);
    const targets = values['output-dir'] ? await outputFiles(files, values['output-dir'], ext) : [];
    const { openExport } = await import('./exported.mjs'); // onnxruntime-node: loaded only when decoding
    model = await openExport(exportDir);
    for (const [i, file] of files.entries()) {
      const text = format(await model.transcribe(file, options), file);
      if (targets.length) await writeNew(targets[i], text);
      else process.stdout.write(text);
    }
    return 0;
  } catch (err) {
    console.error(`error: ${err.message}`);
    return 1;
  } finally {
    await model?.release();
  }
}
