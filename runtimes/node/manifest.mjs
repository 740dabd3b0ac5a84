// An export folder's files read and checked: the port of tfm_export/manifest.py's load_manifest and its sha256
// checks for Node's files (exported.mjs opens an export with these). manifest.json must exist and pass checks.mjs's
// checkManifest; every graph file must exist and, unless `verify` is false, have the sha256 the manifest records;
// the tokenizer's files too (manifest.files). Each failure is one line naming the file and what to do.
// Reads files with node:fs: Node's only (the page fetches its files).
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { checkManifest, graphFiles } from './checks.mjs';
import { makeTokenizer, tokenizerFiles } from './text/tokenizer.mjs';

/** A file's sha256 (hex), read in chunks: graphs can be gigabytes. */
export async function sha256File(file) {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk);
  return hash.digest('hex');
}

const CHANGED = 'does not match the sha256 in manifest.json (changed, corrupt, or from another export); ' +
  're-run the export or restore the file';

/**
 * The manifest's tokenizer with its files read from the folder (tokenizer.json), each checked
 * against the sha256 the manifest's `files` records (exports from before `files` record none).
 */
export async function openTokenizer(exportDir, manifest, verify) {
  const files = {};
  for (const name of tokenizerFiles(manifest.tokenizer)) {
    const full = path.join(exportDir, name);
    const bytes = await readFile(full).catch(() => null);
    if (!bytes) throw new Error(`${full} is missing; it belongs to the tokenizer: re-run the export`);
    const expected = manifest.files?.[name];
    if (verify && expected && createHash('sha256').update(bytes).digest('hex') !== expected) {
      throw new Error(`${full} ${CHANGED}`);
    }
    try {
      files[name] = JSON.parse(bytes.toString('utf8'));
    } catch (err) {
      throw new Error(`${full} is not valid JSON (${err.message}); re-run the export`);
    }
  }
  return makeTokenizer(manifest.tokenizer, files);
}

/**
 * The folder's manifest.json, checked (checks.mjs's checkManifest; Python's load_manifest); one line naming what
 * is wrong when the folder, the file or its JSON is.
 */
export async function readManifest(exportDir) {
  const file = path.join(exportDir, 'manifest.json');
  if (!(await stat(exportDir).catch(() => null))?.isDirectory()) {
    throw new Error(`export folder not found: ${exportDir}; run \`tfm-export MODEL.pt -o ${exportDir}\` first`);
  }
  let text;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    throw new Error(`${exportDir} has no manifest.json; it is not a (complete) tfm-export folder — re-run the export`);
  }
  try {
    return checkManifest(JSON.parse(text), file);
  } catch (err) {
    throw err instanceof SyntaxError ? new Error(`${file} is not valid JSON (${err.message}); re-run the export`) : err;
  }
}

/** A graph's files, each checked (unless `verify` is false) against the sha256 the manifest records. */
export async function checkGraph(exportDir, manifest, name, verify) {
  for (const [file, expected] of Object.entries(graphFiles(manifest.graphs[name]))) {
    const full = path.join(exportDir, file);
    if (!(await stat(full).catch(() => null))) throw new Error(`${name} graph file ${full} is missing; re-run the export`);
    if (verify && (await sha256File(full)) !== expected) throw new Error(`${full} ${CHANGED}`);
  }
}
