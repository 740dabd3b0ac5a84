// Types of 'tfm-export-node/greedy' (greedy.mjs): the runtime-agnostic decoding loop, shared by
// onnxruntime-node and onnxruntime-web (the browser page imports the same file).
import type { InferenceSession, Tensor } from 'onnxruntime-node';
import type { GenerateOptions, GraphEntry, Manifest, Tokenizer, TokenizerSpec } from './index.js';

export const MANIFEST_FORMAT: 'tfm-export-manifest/1';

/** Checks what this runtime reads from manifest.json; throws a one-line error naming the fix. */
export function checkManifest(manifest: unknown, where?: string): Manifest;

/** The files of one graph (the .onnx file and any external-data files) with their sha256. */
export function graphFiles(graph: GraphEntry): Record<string, string>;

/** The manifest's tokenizer, or null when the export has none (only type "chars" is implemented). */
export function makeTokenizer(spec: TokenizerSpec | null): Tokenizer | null;

/** The Python runtime's rule: default max_len; below 1 or above max_len throws. */
export function resolveMaxNewTokens(maxNewTokens: number | undefined | null, maxLen: number): number;

/** Greedy decoding with any onnxruntime module (`ort`: onnxruntime-node or onnxruntime-web). */
export function generateIds(
  ort: { Tensor: typeof Tensor },
  model: { manifest: Manifest; encoder: InferenceSession; decoder: InferenceSession },
  sources: number[][], opts?: GenerateOptions): Promise<number[][]>;
