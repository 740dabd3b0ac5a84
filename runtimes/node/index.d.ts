// Types of 'tfm-export-node' (translate.mjs): open a tfm-export folder and decode it greedily with
// onnxruntime-node. The manifest fields are those this runtime reads; the whole contract is
// tfm_export/manifest.schema.json in the tfm-export repository.
import type { InferenceSession } from 'onnxruntime-node';

/** One graph input or output: symbolic axes are names (`batch`, `src_len`, `past_len`), fixed ones numbers. */
export interface TensorSpec {
  name: string;
  dtype: 'float32' | 'float16' | 'int64' | 'bool';
  shape: Array<number | string>;
}

/** A graph file as the manifest records it. */
export interface GraphEntry {
  file: string;
  sha256: string;
  /** External-data file name -> sha256 (models over 2 GB). */
  external_data?: Record<string, string>;
  opset: number;
  inputs: TensorSpec[];
  outputs: TensorSpec[];
}

/** The model's TransformerConfig (the fields this runtime reads; the manifest has more). */
export interface ModelConfig {
  src_vocab_size: number;
  tgt_vocab_size: number;
  d_model: number;
  n_heads: number;
  n_decoder_layers: number;
  max_len: number;
  src_pad_id: number;
  tgt_pad_id: number;
  bos_id: number;
  eos_id: number;
  [field: string]: unknown;
}

/** The `chars` tokenizer: ids are positions in the vocabularies; the first `specials` are <pad>, <bos>, <eos>. */
export interface CharsTokenizerSpec {
  type: 'chars';
  src_vocab: string[];
  tgt_vocab: string[];
  specials?: number;
  append_eos?: boolean;
}

/** Other tokenizer types (`marian`) are recorded but refused by this runtime: pass token ids instead. */
export type TokenizerSpec = CharsTokenizerSpec | { type: string; [field: string]: unknown };

/** manifest.json (format tfm-export-manifest/1). */
export interface Manifest {
  format: 'tfm-export-manifest/1';
  config: ModelConfig;
  special_ids: { src_pad: number; tgt_pad: number; bos: number; eos: number };
  tokenizer: TokenizerSpec | null;
  samples: string[] | null;
  graphs: { encoder: GraphEntry; decoder: GraphEntry; decoder_static?: GraphEntry };
  [field: string]: unknown;
}

/** Text <-> ids with the manifest's vocabulary. */
export interface Tokenizer {
  /** Source text -> ids (+ eos when the manifest says so); throws on characters outside the vocabulary. */
  encode(text: string): number[];
  /** Target ids -> text; special and out-of-range ids are skipped. */
  decode(ids: number[]): string;
}

/** An opened export folder: pass it instead of the folder path to decode many times. */
export interface ExportedModel {
  folder: string;
  manifest: Manifest;
  /** null when the export has no tokenizer (then only generateIds works). */
  tokenizer: Tokenizer | null;
  encoder: InferenceSession;
  decoder: InferenceSession;
  /** Releases both sessions. */
  release(): Promise<void>;
}

export interface OpenOptions {
  /** Check the sha256 of every graph file (default true). */
  verify?: boolean;
  /** Passed to ort.InferenceSession.create (default: logSeverityLevel 3). */
  sessionOptions?: InferenceSession.SessionOptions;
}

/** Filled in by generateIds when given: the encoder's time and one entry per decoder step. */
export interface Timings {
  encoderMs?: number;
  stepsMs?: number[];
}

export interface GenerateOptions {
  /** Most new tokens per row (default and maximum: the model's max_len). */
  maxNewTokens?: number;
  timings?: Timings;
}

/** Open an export folder: manifest checks, the sha256 of every graph file, one session per graph. */
export function openExport(exportDir: string, options?: OpenOptions): Promise<ExportedModel>;

/** Greedy decoding of token id lists; rows come back without BOS and EOS, exactly as the Python runtime's. */
export function generateIds(exportDirOrModel: string | ExportedModel, idLists: number[][],
  opts?: GenerateOptions): Promise<number[][]>;

/** Translate texts with the manifest's tokenizer (throws when the export has none). */
export function translate(exportDirOrModel: string | ExportedModel, texts: string[],
  opts?: { maxNewTokens?: number }): Promise<string[]>;
