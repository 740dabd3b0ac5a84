// `cli.mjs transcribe EXPORT_DIR file.wav [...]`: Python's `tfm-export transcribe` for a Whisper export
// in Node (speech.mjs): the text of each file on its line, its subtitles (--format srt|vtt, as Python's), or with
// --json one object per line { file, text, language, segments, ids } (Python's --json). A bad file or export is one error line and exit 1
// (the files before it are printed); a bad flag exit 2, as cli.mjs.
import { parseArgs } from 'node:util';
import { toSrt, toVtt } from './subtitles.mjs';

const FORMATS = { txt: (r) => `${r.text.trim()}\n`, srt: (r) => toSrt(r.segments), vtt: (r) => toVtt(r.segments),
  json: (r, file) => `${JSON.stringify({ file, ...r })}\n` };

export const USAGE = 'usage: cli.mjs transcribe EXPORT_DIR FILE.wav [FILE.wav ...] [--language CODE] ' +
  '[--task transcribe|translate] [--timestamps] [--num-beams N] [--prompt TEXT] [--max-new-tokens N] ' +
  '[--format txt|srt|vtt|json] [--json]';

/** A positive integer flag's value, or one line. */
function integer(flag, text) {
  const value = Number(text);
  if (text === undefined) return undefined;
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${flag} takes an integer of at least 1, got ${JSON.stringify(text)}`);
  return value;
}

/** Runs the command on `args` (after `transcribe`); the process's exit code. */
export async function transcribeCommand(args) {
  let values;
  let positionals;
  try {
    ({ values, positionals } = parseArgs({
      args, allowPositionals: true,
      options: { language: { type: 'string' }, task: { type: 'string' }, 'num-beams': { type: 'string' },
        'max-new-tokens': { type: 'string' }, prompt: { type: 'string' }, format: { type: 'string' }, timestamps: { type: 'boolean' }, json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' } },
    }));
  } catch (err) {
    console.error(`error: ${err.message}\n${USAGE}`);
    return 2;
  }
  if (values.help) { console.log(USAGE); return 0; }
  const [exportDir, ...files] = positionals;
  if (!exportDir || !files.length) { console.error(USAGE); return 2; }
  const format = FORMATS[values.json ? 'json' : values.format ?? 'txt'];
  if (!format) {
    console.error(`error: --format takes ${Object.keys(FORMATS).join(', ')}, got ${JSON.stringify(values.format)}\n${USAGE}`);
    return 2;
  }
  let model = null;
  try {
    const options = { language: values.language, task: values.task ?? 'transcribe', timestamps: values.timestamps ?? false,
      numBeams: integer('num-beams', values['num-beams']) ?? 1, prompt: values.prompt ?? null, maxNewTokens: integer('max-new-tokens', values['max-new-tokens']) };
    const { openExport } = await import('./translate.mjs'); // onnxruntime-node: loaded only when decoding
    model = await openExport(exportDir);
    for (const file of files) {
      const result = await model.transcribe(file, options);
      process.stdout.write(format(result, file));
    }
    return 0;
  } catch (err) {
    console.error(`error: ${err.message}`);
    return 1;
  } finally {
    await model?.release();
  }
}
