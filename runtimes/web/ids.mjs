// Token ids on the page, for exports it cannot give text to: a module export (a user's own architecture,
// `tfm-export MODEL.pt --trust-pickle --adapter ...`) has no tokenizer, and an encoder-only one has no
// decoder either. Each line of the text box is then one source's ids, separated by spaces or commas
// (as `tfm-export generate OUT --ids` and Node's `cli.mjs OUT --ids` take them); a decoder's output is
// shown as ids, an encoder-only export's as its output values (Python's `open_export(OUT).run`).
// Decoding itself is app.mjs's: the one driver of /lib/api.mjs, whose NoCacheCache
// (/lib/states/nocache.mjs) runs decoder_nocache.onnx.
import { run, tensorRows } from '/lib/api.mjs';

// A module export's source.decoder, as the ready line says it (its config's sizes are placeholders).
const MODULE_DECODERS = { nocache: 'a decoder without a cache', 'encoder-only': 'encoder-only' };

/** The model's shape: its sizes, or (a module export: the user's own module) its class and decoder. */
export function shape({ config: c, source }) {
  if (Object.hasOwn(MODULE_DECODERS, source?.decoder)) return `${source.module}, ${MODULE_DECODERS[source.decoder]}`;
  return `d_model ${c.d_model}, ${c.n_encoder_layers}+${c.n_decoder_layers} layers, max_len ${c.max_len}`;
}

/** One line's ids; a one-line error naming the line otherwise. */
export function parseIds(line, n) {
  const ids = line.split(/[\s,]+/).filter(Boolean).map(Number);
  if (!ids.length || ids.some((id) => !Number.isInteger(id) || id < 0)) {
    const shown = line.length > 60 ? `${line.slice(0, 57)}...` : line;
    throw new Error(`line ${n + 1}: token ids must be integers of at least 0 separated by spaces or commas, ` +
      `got ${JSON.stringify(shown)}`);
  }
  return ids;
}

/** How output ids are shown: the tokenizer's text, or (no tokenizer) the ids themselves. */
export const idsShower = (tokenizer) => (ids) => (tokenizer ? tokenizer.decode(ids) : ids.join(' '));

/** A row's output values for its cell: each output by name, numbers rounded for the eye (tfmResults has them all). */
function showValues(outputs) {
  const round = (v) => (Array.isArray(v) ? v.map(round) : typeof v === 'number' ? Number(v.toPrecision(4)) : v);
  return Object.entries(outputs).map(([name, v]) => `${name} ${JSON.stringify(round(v))}`).join('; ');
}

/**
 * An encoder-only export on the lines' ids, in one padded batch as Python's run: one row per source
 * { input, ids, outputs: { [name]: values } }, shown in `table` (emptied first) by `addRow(input)`'s cells.
 */
export async function runRows(ort, model, lines, sources, table, addRow) {
  table.replaceChildren();
  const outputs = Object.entries(await run(ort, model, sources)).map(([name, t]) => [name, tensorRows(t)]);
  return lines.map((input, row) => {
    const values = Object.fromEntries(outputs.map(([name, rows]) => [name, rows[row]]));
    const cells = addRow(input);
    cells[1].textContent = showValues(values);
    return { input, ids: sources[row], outputs: values };
  });
}
