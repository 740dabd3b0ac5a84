// What this runtime checks of an export before it decodes: the manifest's format, the graphs it opens
// (Python's runtime_graphs, tfm_export/runtime/states/nocache.py) with their files and sha256, and an
// encoder input it can feed (sources.mjs). Python checks the manifest's schema on loading
// (tfm_export/manifest.py) and the opened sessions against it (tfm_export/runtime/checks.py); a JS
// runtime reads manifest.json itself, so both kinds of check start here.
// No globals beyond ECMAScript: the browser page imports this file too.
import { sourceInput } from './sources.mjs';

export const MANIFEST_FORMAT = 'tfm-export-manifest/1';

// A module export's source.decoder -> its decoder graph (null: none); any other export has decoder.onnx.
const MODULE_DECODERS = { nocache: 'decoder_nocache', 'encoder-only': null };

/**
 * The graphs a runner opens, by role (Python's runtime_graphs): { encoder: 'encoder', decoder: 'decoder',
 * 'decoder_nocache' (a module export's decoder without a cache) or null (an encoder-only export) }.
 */
export function runtimeGraphs(manifest) {
  const kind = manifest.source?.decoder;
  return { encoder: 'encoder', decoder: Object.hasOwn(MODULE_DECODERS, kind) ? MODULE_DECODERS[kind] : 'decoder' };
}

/** Checks what this runtime reads from manifest.json; throws a one-line error naming the fix. */
export function checkManifest(manifest, where = 'manifest.json') {
  if (manifest?.format !== MANIFEST_FORMAT) {
    throw new Error(`${where} has format ${JSON.stringify(manifest?.format)}, this runtime reads ` +
      `${MANIFEST_FORMAT}; re-export the model with tfm-export`);
  }
  for (const name of Object.values(runtimeGraphs(manifest)).filter(Boolean)) {
    const graph = manifest.graphs?.[name];
    if (!graph?.file || !/^[0-9a-f]{64}$/.test(graph.sha256 ?? '')) {
      throw new Error(`${where} has no valid graphs.${name} entry (file, sha256); re-export the model`);
    }
  }
  sourceInput(manifest, where); // an encoder input this runtime cannot feed is refused on opening
  return manifest;
}

/** The files of one graph (the .onnx file and any external-data files) with their sha256. */
export function graphFiles(graph) {
  return { [graph.file]: graph.sha256, ...(graph.external_data ?? {}) };
}
