// `tfm-export-node/decoding`: the runtime-agnostic decoding calls under one name, as the package
// documented them before the modules mirrored the Python runtime's (api.mjs: generate, generateIds,
// stream, run, decodeFeatures; checks.mjs: the manifest; sources.mjs; options/generation.mjs;
// text/tokenizer.mjs's makeTokenizer). Existing imports keep working; new code imports those modules.
export { decodeFeatures, generate, generateIds, run, stream, tensorRows, textPieces } from './api.mjs';
export { checkManifest, graphFiles, MANIFEST_FORMAT, runtimeGraphs } from './checks.mjs';
export { fromPythonNames, generationConfig } from './options/generation.mjs';
export { resolveMaxNewTokens } from './sources.mjs';
export { makeTokenizer } from './text/tokenizer.mjs';
