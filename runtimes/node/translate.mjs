// Greedy decoding of a tfm-export folder with onnxruntime-node.
// Reads manifest.json (checks the graphs' sha256), tokenises with its "chars" vocabulary, runs the
// encoder once and the KV-cache decoder per step, and returns exactly the Python runtime's ids.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { generateIds as greedy, makeTokenizer } from '../core/greedy.mjs';

const MANIFEST_FORMAT = 'tfm-export-manifest/1';

async function sha256(file) {
  return createHash('sha256').update(await readFile(file)).digest('hex');
}

/** Open an export folder: manifest checks, hash checks, and the two sessions. */
export async function openExport(exportDir, { verify = true } = {}) {
  const manifest = JSON.parse(await readFile(path.join(exportDir, 'manifest.json'), 'utf8'));
  if (manifest.format !== MANIFEST_FORMAT) {
    throw new Error(`${exportDir}: manifest format ${manifest.format}, expected ${MANIFEST_FORMAT}`);
  }
  const sessions = {};
  for (const name of ['encoder', 'decoder']) {
    const file = path.join(exportDir, manifest.graphs[name].file);
    if (verify && (await sha256(file)) !== manifest.graphs[name].sha256) {
      throw new Error(`${file} does not match the sha256 in manifest.json; re-run the export`);
    }
    sessions[name] = await ort.InferenceSession.create(file);
  }
  return { manifest, ...sessions, tokenizer: makeTokenizer(manifest.tokenizer) };
}

/** Greedy decoding of token id lists; rows without BOS/EOS. */
export function generateIds(model, sources, options = {}) {
  return greedy(ort, model, sources, options);
}

/** Translate texts with an export folder (opened once per call). */
export async function translate(exportDir, texts, { maxNewTokens } = {}) {
  const model = await openExport(exportDir);
  if (!model.tokenizer) throw new Error('this export has no tokenizer; use generateIds with token ids');
  const ids = await generateIds(model, texts.map((t) => model.tokenizer.encode(t)), { maxNewTokens });
  return ids.map((row) => model.tokenizer.decode(row));
}
