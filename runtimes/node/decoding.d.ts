// Types of 'tfm-export-node/decoding' (decoding.mjs, which re-exports api.mjs, checks.mjs, sources.mjs and
// options/generation.mjs): the runtime-agnostic decoding calls (greedy, beam search, seeded sampling,
// streaming: one decoder cache, one step driver), shared by onnxruntime-node and onnxruntime-web (the
// browser page imports the same modules).
// 'tfm-export-node/greedy' is the same module under its old name.
import type { InferenceSession, Tensor } from 'onnxruntime-node';
import type { DecodingOptions, GenerateOptions, GraphEntry, Hypothesis, Manifest, StreamOptions, Timings, Tokenizer
  } from './index.js';

export const MANIFEST_FORMAT: 'tfm-export-manifest/1';

/** Any onnxruntime module (onnxruntime-node or onnxruntime-web): only its Tensor class is used. */
export type Ort = { Tensor: typeof Tensor };

/**
 * What the loop runs: the manifest and one session per graph of `runtimeGraphs` (decoder: null or absent
 * for an encoder-only export); `tokenizer` is used by `stream` on text.
 */
export interface DecodableModel {
  manifest: Manifest;
  encoder: InferenceSession;
  decoder?: InferenceSession | null;
  tokenizer?: Tokenizer | null;
}

/** Every decoding option resolved: the defaults, the manifest's `generation` section, then the call's options. */
export type GenerationConfig = Required<Omit<DecodingOptions, 'maxNewTokens' | 'forcedBosTokenId'>> &
  { maxNewTokens: number | undefined; forcedBosTokenId: number | null };

/**
 * Checks what this runtime reads from manifest.json, the encoder's declared input included (token ids,
 * int64 or int32, on a batch and a src_len axis); throws a one-line error naming the fix.
 */
export function checkManifest(manifest: unknown, where?: string): Manifest;

/**
 * The graphs a runner opens, by role: the encoder, and the decoder's graph: 'decoder' (KV cache),
 * 'decoder_nocache' (a module export's, no cache) or null (an encoder-only export).
 */
export function runtimeGraphs(manifest: Manifest): { encoder: 'encoder'; decoder: 'decoder' | 'decoder_nocache' | null };

/** The files of one graph (the .onnx file and any external-data files) with their sha256. */
export function graphFiles(graph: GraphEntry): Record<string, string>;

/** text/tokenizer.mjs's makeTokenizer (it lived here first): the manifest's tokenizer, or null. */
export { makeTokenizer } from './tokenizers.js';

/** The Python runtime's rule: default max_len; below 1 or above max_len throws. */
export function resolveMaxNewTokens(maxNewTokens: number | undefined | null, maxLen: number): number;

/** The settings of one call (throws one line on a bad value or an unknown option name). */
export function generationConfig(manifest: { generation?: Record<string, unknown> | null } | null,
  options?: DecodingOptions): GenerationConfig;

/** Options from Python's names (a manifest `generation` section, a GenerationConfig dict); unknown keys are ignored. */
export function fromPythonNames(section: Record<string, unknown> | null | undefined): DecodingOptions;

/**
 * The best ids per source, without BOS and EOS (plain greedy runs the decoder's own argmax: no logits
 * are fetched). `stopAtEos: false` (benchmarks): every row gets exactly maxNewTokens ids.
 */
export function generateIds(ort: Ort, model: DecodableModel, sources: number[][],
  opts?: GenerateOptions & { stopAtEos?: boolean }): Promise<number[][]>;

/** Per source, `numReturnSequences` hypotheses (beam search: best first). */
export function generate(ort: Ort, model: DecodableModel, sources: number[][], opts?: GenerateOptions): Promise<Hypothesis[][]>;

/** An encoder-only export's outputs by name (row i: source i); an export with a decoder throws one line. */
export function run(ort: Ort, model: DecodableModel, sources: number[][]): Promise<Record<string, Tensor>>;

/** A strategy of the step driver (decode/loop.mjs's Strategy), with the first token every row is fed. */
export interface Strategy {
  rows: number;
  reads: 'next_ids' | 'logits';
  finished: boolean;
  bosId: number;
  advance(state: unknown): { ids: number[]; beamIdx: number[] | null };
  results(): Hypothesis[][];
}

/**
 * A Whisper export's decoding (Python's runtime.decode.loop.run): the features (one Float32Array of
 * n_mels x frames per source) encoded once, then `strategy` (speech/search.mjs's) stepped to its end.
 */
export function decodeFeatures(ort: Ort, model: DecodableModel, features: Float32Array[], strategy: Strategy,
  opts?: { timings?: Timings }): Promise<Hypothesis[][]>;

/** A tensor's rows as nested lists (numpy's tolist(): row i is source i); int64 values as numbers. */
export function tensorRows(tensor: Tensor): unknown[];

/**
 * One source as it is decoded: text pieces for a string, token ids for an id list (beam search: at
 * the end). `sourceLang` / `targetLang` as in translate (the model's tokenizer maps them).
 */
export function stream(ort: Ort, model: DecodableModel, source: string, opts?: StreamOptions): AsyncGenerator<string, void, undefined>;
export function stream(ort: Ort, model: DecodableModel, source: number[], opts?: StreamOptions): AsyncGenerator<number, void, undefined>;

/** Text pieces from growing ids: what decoding all ids so far adds to the text so far. */
export function textPieces(tokenizer: Tokenizer, ids: AsyncIterable<number> | Iterable<number>): AsyncGenerator<string, void, undefined>;
