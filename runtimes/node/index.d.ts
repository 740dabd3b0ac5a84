// Types of 'tfm-export-node' (exported.mjs; translate.mjs, its first name): open a tfm-export folder and decode it with
// onnxruntime-node: greedy, beam search, seeded sampling, streamed or not. The manifest fields are those this runtime reads; the whole contract is
// tfm_export/manifest.schema.json in the tfm-export repository.
import type { InferenceSession, Tensor } from 'onnxruntime-node';
import type { LanguageCodes, Languages } from './tokenizers.js';

/** The client of a `tfm-export serve` (client.d.ts): `connect(url, { apiKey })`. */
export { connect, ServerError } from './client.js';
export type { ConnectOptions, ServerClient, ServerEvent, ServerHypothesis } from './client.js';
export type { LanguageCodes, Languages } from './tokenizers.js';

/** One graph input or output: symbolic axes are names (`batch`, `src_len`, `past_len`), fixed ones numbers. */
export interface TensorSpec {
  name: string;
  dtype: 'float32' | 'float16' | 'int64' | 'int32' | 'bool';
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

/** A tokenizer's language codes (Python's text.languages): code -> token, per side. */
export interface LanguagesSpec {
  source?: Record<string, string>;
  target?: Record<string, string>;
  source_default?: string | null;
  target_on_source?: boolean;
  pair?: [string, string] | null;
}

/**
 * The `hf` tokenizer: `file` (tokenizer.json beside the graphs) without its post-processor, wrapped
 * in `source_prefix` + ids + `source_suffix` (token strings; "{lang}": the source language's token).
 */
export interface HfTokenizerSpec {
  type: 'hf';
  file: string;
  source_prefix: string[];
  source_suffix: string[];
  clean_up_spaces: boolean;
  languages: LanguagesSpec;
}

/** Other tokenizer types (`marian`) are ids only in this runtime: encode/decode throw, token ids work. */
export type TokenizerSpec = CharsTokenizerSpec | HfTokenizerSpec | { type: string; [field: string]: unknown };

/** manifest.json (format tfm-export-manifest/1). */
export interface Manifest {
  format: 'tfm-export-manifest/1';
  config: ModelConfig;
  special_ids: { src_pad: number; tgt_pad: number; bos: number; eos: number };
  tokenizer: TokenizerSpec | null;
  samples: string[] | null;
  /**
   * decoder: the KV-cache decoder; a module export (`source.decoder`: 'nocache') has decoder_nocache
   * instead (it reads the whole prefix every step), an encoder-only one neither.
   */
  graphs: { encoder: GraphEntry; decoder?: GraphEntry; decoder_nocache?: GraphEntry; decoder_static?: GraphEntry };
  /** Where the export came from; `decoder` marks a module export ('nocache' or 'encoder-only'). */
  source?: { decoder?: 'nocache' | 'encoder-only'; [field: string]: unknown };
  /** Default decoding settings (Python's GenerationConfig field names, e.g. num_beams), when the export has them. */
  generation?: Record<string, unknown> | null;
  /** Files beside the graphs (tokenizer.json) -> their sha256 (absent from older exports). */
  files?: Record<string, string>;
  [field: string]: unknown;
}

/** Text <-> ids with the manifest's tokenizer (text/tokenizer.mjs). */
export interface Tokenizer {
  /** The manifest's tokenizer type: 'chars', 'hf', or an ids-only type ('marian'). */
  kind: string;
  /** The language codes it takes (none for a single-language model). */
  languages: Languages;
  /** True for a type this runtime cannot encode (encode/decode throw; token ids still work). */
  idsOnly?: boolean;
  /**
   * Source text -> ids in the export's template (chars: + eos when the manifest says so); `sourceLang`
   * marks a multilingual model's source. Throws one line on text or codes it cannot encode.
   */
  encode(text: string, sourceLang?: string | null, targetLang?: string | null): number[];
  /** The id forced as the first generated token for `targetLang` (null: none). */
  forcedBos(targetLang?: string | null): number | null;
  /** Target ids -> text; special and out-of-range ids are skipped. */
  decode(ids: number[]): string;
}

/** An opened export folder (Python's ExportedModel; made by openExport): pass it instead of the folder path to decode many times. */
export class ExportedModel {
  constructor(folder: string, manifest: Manifest, tokenizer: Tokenizer | null, options?: OpenOptions);
  folder: string;
  manifest: Manifest;
  /** null when the export has no tokenizer (then only generateIds works). */
  tokenizer: Tokenizer | null;
  encoder: InferenceSession;
  /** decoder.onnx, or a module export's decoder_nocache.onnx; null for an encoder-only export. */
  decoder: InferenceSession | null;
  /** Releases the sessions. */
  release(): Promise<void>;
  /** A graph beside the decoder's (alignment.onnx), checked and opened on first use. */
  extraSession(name: string): Promise<InferenceSession>;
  /** generateIds / generate / translate / stream / languages bound to this model. */
  generateIds(idLists: number[][], opts?: GenerateIdsOptions): Promise<number[][]>;
  generate(idLists: number[][], opts?: GenerateOptions): Promise<Hypothesis[][]>;
  /** CTranslate2's vocabulary map for `useVmap: true` (null: none). */
  vmap: VocabularyMap | null;
  /** This model with its head restricted to `ids` (and EOS, the decoder start, the forced first token): a view whose
   * calls choose among those only (Python's with_shortlist; the full head's logits masked). */
  withShortlist(ids: Iterable<number>): ExportedModel;
  /** Per source, the log-probabilities of its target (ids without BOS and EOS; EOS is appended). */
  score(idLists: number[][], targets: number[][]): Promise<ScoreResult[]>;
  translate(texts: string[], opts?: TranslateOptions & { numHypotheses?: 1; returnAlternatives?: false }): Promise<string[]>;
  /** With `numHypotheses` > 1 or `returnAlternatives`: per text its translations, best first. */
  translate(texts: string[], opts?: TranslateOptions): Promise<string[] | string[][]>;
  languages(): LanguageCodes;
  stream(source: string, opts?: StreamOptions): AsyncGenerator<string, void, undefined>;
  stream(source: number[], opts?: StreamOptions): AsyncGenerator<number, void, undefined>;
  /** An encoder-only export's outputs by name (row i: source i); an export with a decoder throws. */
  run(idLists: number[][]): Promise<Record<string, Tensor>>;
  /** A Whisper export: one recording (a WAV path or bytes, or 16 kHz samples) to text, language and ids. */
  transcribe(audio: AudioInput, opts?: TranscribeOptions): Promise<Transcription>;
  /** Several recordings: their transcriptions in order (with `batchSize` > 1 decoded together). */
  transcribe(audio: AudioInput[], opts?: TranscribeOptions): Promise<Transcription[]>;
  /** A Whisper export, live (Python's `stream_transcribe`): 16 kHz chunks as they arrive -> updates with the text
   * confirmed for good and the tentative rest, the last one final. */
  streamTranscribe(chunks: Iterable<Float32Array> | AsyncIterable<Float32Array>,
    opts?: StreamTranscribeOptions): AsyncGenerator<StreamUpdate, void, undefined>;
  /** A live stream to feed by hand: `await stream.feed(chunk)` (0 or 1 updates), `await stream.finish()`. */
  streamTranscriber(opts?: StreamTranscribeOptions): StreamTranscriber;
}

/** How a live stream re-transcribes its buffer (Python's StreamOptions). */
export interface LiveOptions {
  /** New audio between two re-transcriptions (default 1 s). */
  stepSeconds?: number;
  /** The buffer is cut past this (default: half the model's window). */
  trimSeconds?: number | null;
  /** Of the confirmed text trimmed off, as the prompt (default 200; 0: none). */
  promptChars?: number;
  /** Repeated words looked for where a hypothesis meets the confirmed text (default 5). */
  overlapWords?: number;
}

/** A live stream's options: transcribe's, and `options` (its policy). */
export interface StreamTranscribeOptions extends Omit<TranscribeOptions, 'timestamps' | 'wordTimestamps' | 'maxSeconds' |
  'batchSize'> {
  options?: LiveOptions;
}

/** What one step of a live stream changed (Python's StreamUpdate). */
export interface StreamUpdate {
  /** The text this step confirmed ('' when none): appended for good. */
  confirmed: string;
  /** The latest hypothesis past the confirmed text: it may still change. */
  tentative: string;
  /** All the text confirmed so far. */
  text: string;
  words: { start: number; end: number; text: string }[];
  /** finish()'s: nothing is tentative any more. */
  final: boolean;
  language: string | null;
}

/** One live stream (Python's StreamTranscriber). */
export interface StreamTranscriber {
  readonly text: string;
  readonly buffered: number;
  feed(samples: Float32Array): Promise<StreamUpdate[]>;
  finish(): Promise<StreamUpdate>;
}

/** A recording: a WAV file's path, its bytes, or mono float32 samples at the model's rate (16 kHz). */
export type AudioInput = string | Uint8Array | ArrayBuffer | Float32Array;

/** Python's `transcribe` options. */
export interface TranscribeOptions {
  /** A code ('de'), an English name ('german') or a token ('<|de|>'); default: detected on the audio. */
  language?: string | null;
  /** 'transcribe' (default) or 'translate' (into English). */
  task?: 'transcribe' | 'translate' | null;
  /** Segments timed by the model's timestamp tokens (default false; audio over one window always has them). */
  timestamps?: boolean;
  /** Beam search when > 1 (default 1: greedy). */
  numBeams?: number;
  /** An initial prompt before every window: text the transcript is conditioned on (spellings, names), or its
   * token ids (Python's `prompt`). */
  prompt?: string | number[] | null;
  /** Most generated tokens per window (default: up to the folder's max_length). */
  maxNewTokens?: number | null;
  /** Longer recordings are refused (default 3600; null: no limit). */
  maxSeconds?: number | null;
  /** Names the audio in error messages (default: its path). */
  label?: string;
  /** Time each word (the export's alignment.onnx, as Python's word_timestamps): `words` in the result and in each
   * segment. */
  wordTimestamps?: boolean;
  /** Decoding temperature: one number, or the fallback's list (e.g. [0, 0.2, 0.4, 0.6, 0.8, 1]: a window whose try
   * fails a threshold is decoded again at the next one, as Python's and transformers'); default 0 (greedy). */
  temperature?: number | number[] | null;
  /** The sampling seed of temperatures above 0 (default 0): a seeded fallback gives Python's ids. */
  seed?: number;
  /** A try whose compression ratio is above this falls back (default: the folder's). */
  compressionRatioThreshold?: number | null;
  /** A try whose average log-probability is below this falls back (default: the folder's). */
  logprobThreshold?: number | null;
  /** With logprobThreshold: a low try whose P(<|nospeech|>) is above this is silence, skipped (default: the folder's). */
  noSpeechThreshold?: number | null;
  /** Each window decoded after the text of the segments before it (default: the folder's condition_on_prev_tokens). */
  conditionOnPrevTokens?: boolean | null;
  /** 'first-segment' (default): the prompt before the first window only; 'all-segments': before every window
   * (needs conditionOnPrevTokens), as transformers'. */
  promptConditionType?: 'first-segment' | 'all-segments';
  /** Words to favour (faster-whisper's hotwords): in the prompt of every window without a prefix. */
  hotwords?: string | null;
  /** Text every window's transcript starts with (forced after the prompt). */
  prefix?: string | null;
  /** Transcribe only the speech found by Silero VAD (Python's vad=True; default false). */
  vad?: boolean;
  /** The VAD's parameters, as Python's VadParameters fields (threshold, min_silence_duration_ms, speech_pad_ms, ...), with vad. */
  vadParameters?: Record<string, number> | null;
  /** The VAD's ONNX file (default: the checkout's models/silero-vad). */
  vadModel?: string;
  /** A whole number of 1 or more (default 1): > 1 decodes that many VAD chunks, or recordings of an array, together
   * (Python's batch_size: one encoder call per round of windows, their decoder rows side by side), with the answers
   * of decoding them one after the other. */
  batchSize?: number;
  /** Greedy windows drafted from n-grams of the decoder input (its prompt and conditioning text, the ids so far),
   * checked in one decoder step under Whisper's rules: plain greedy's transcript in fewer calls (0: off). */
  promptLookupNumTokens?: number | null;
  /** An opened Whisper export of the same tokenizer (a smaller one, or the model's int8 variant) that drafts for the
   * greedy windows (the same transcript; one of another vocabulary throws one line). */
  assistant?: ExportedModel | null;
  /** The ids the assistant drafts at first (default 20), then transformers' +2/-1 schedule. */
  numAssistantTokens?: number | null;
  /** Filled with the speculative windows' counts (decoder calls, drafted and accepted ids). */
  speculation?: Speculation | null;
}

/** A word and its times in seconds (Python's `words`). */
export interface Word {
  word: string;
  start: number;
  end: number;
}

/** One recording's transcription, as Python's `transcribe`. */
export interface Transcription {
  text: string;
  /** The language code of the prompt (given or detected), e.g. 'en'. */
  language: string | null;
  /** With timestamps: the model's segments (seconds); else one, the whole recording. */
  segments: Segment[];
  /** The generated token ids (without the prompt and EOS; every window's, timestamps included). */
  ids: number[];
  /** With wordTimestamps: every segment's words, in order. */
  words?: Word[];
}

/** A segment as Python's (OpenAI's verbose_json, less its id); the window fields are its window's. */
export interface Segment {
  /** The window's start in mel frames (10 ms) from the recording's start. */
  seek: number;
  /** Seconds from the recording's start. */
  start: number;
  end: number;
  text: string;
  /** The segment's ids, timestamp tokens included. */
  tokens: number[];
  /** The temperature of the window's kept try (0 unless the temperature fallback moved on). */
  temperature: number;
  /** The window's mean log-probability per generated token, EOS counted (null: nothing generated). */
  avg_logprob: number | null;
  /** Raw bytes / zlib bytes of the window's ids (transformers' compression ratio). */
  compression_ratio: number;
  /** P(<|nospeech|>) at <|startoftranscript|> (null: the model has no such token). */
  no_speech_prob: number | null;
  /** With wordTimestamps: its words. */
  words?: Word[];
}

export interface OpenOptions {
  /** Check the sha256 of every graph and tokenizer file (default true). */
  verify?: boolean;
  /** Passed to ort.InferenceSession.create (default: logSeverityLevel 3). */
  sessionOptions?: InferenceSession.SessionOptions;
}

/** Filled in by generateIds when given: the encoder's time and one entry per decoder step. */
export interface Timings {
  encoderMs?: number;
  stepsMs?: number[];
  /** A speculative decode's drafted ids and drafted ids accepted (promptLookupNumTokens, assistant). */
  drafted?: number;
  accepted?: number;
}

/** What a speculative decode did (speculating.mjs), filled in when passed as `speculation`. */
export interface Speculation {
  /** Decoder calls (plain greedy makes one per generated id, EOS included). */
  calls: number;
  /** Ids drafted, and drafted ids the model kept (its own greedy ids). */
  drafted: number;
  accepted: number;
}

/**
 * How to pick tokens: Python's GenerationConfig in camelCase, with its defaults and checks. Unset
 * (or undefined) options come from the manifest's `generation` section, else greedy decoding.
 */
export interface DecodingOptions {
  // BEGIN GENERATED by `make options` from tfm_export/runtime/options/generation.py: edit the options there
  /** Most tokens per source, EOS included (default: all that fit the model's max_len). */
  maxNewTokens?: number;
  /** Beam search with this many beams (1: greedy or sampling). */
  numBeams?: number;
  /** Beam search: finished hypotheses rank by sum(log p) / length ** this. */
  lengthPenalty?: number;
  /**
   * When beam search stops: true as soon as numBeams hypotheses are finished; false when the best running beam can no
   * longer beat them at its current length; "never" at the best possible length.
   */
  earlyStopping?: boolean | 'never';
  /** Hypotheses per source, best first: the n-best (at most numBeams) or, with doSample, samples. */
  numReturnSequences?: number;
  /** Sample from the (warped) distribution instead of taking the best token (with numBeams 1). */
  doSample?: boolean;
  /** Sampling: logits / temperature. */
  temperature?: number;
  /** Sampling: keep the k most likely tokens (0: all). */
  topK?: number;
  /** Sampling: keep the smallest set of tokens whose probability reaches this (nucleus; 1: all). */
  topP?: number;
  /**
   * Sampling: the seed of the runtimes' own generator (SplitMix64): the same seed gives the same tokens in Python and
   * Node (a BigInt beyond 2**53).
   */
  seed?: number | bigint;
  /** EOS is banned until this many tokens were generated. */
  minNewTokens?: number;
  /** Penalise tokens already in the row: their log-probs x become x * p if x < 0 else x / p (1: off). */
  repetitionPenalty?: number;
  /** Ban any token that would repeat an n-gram of this size (0: off). */
  noRepeatNgramSize?: number;
  /** The last allowed token is EOS (transformers' forced_eos_token_id). */
  forcedEos?: boolean;
  /**
   * The first generated token (transformers' forced_bos_token_id): a multilingual model's target language, BART's <s>.
   */
  forcedBosTokenId?: number;
  /**
   * Greedy decoding and sampling: draft up to this many ids a step from n-grams of the source and the output so far,
   * checked in one decoder step (transformers' prompt_lookup_num_tokens; greedy: plain greedy's ids; sampling: the same
   * distribution; 0: off).
   */
  promptLookupNumTokens?: number;
  /**
   * Greedy decoding and sampling with an assistant (a draft export): the ids it drafts at first; then +2 after a step
   * that accepts them all, -1 otherwise (transformers' heuristic schedule).
   */
  numAssistantTokens?: number;
  /** Log-softmax again after the logits processors (transformers' renormalize_logits). */
  renormalizeLogits?: boolean;
  // END GENERATED
}

export interface GenerateOptions extends DecodingOptions {
  timings?: Timings;
  /** CTranslate2's target_prefix: per source the token ids its hypotheses start with ([] for none); they are
   * returned with them, and maxNewTokens counts the tokens after them. */
  targetPrefix?: number[][] | null;
  /** CTranslate2's return_alternatives: per source `numReturnSequences` alternatives at the first position after
   * the prefix (that position's most likely tokens, best first, each continued greedily whatever numBeams says);
   * each starts with the prefix, and its score is the alternative token's log-probability plus its continuation's. */
  returnAlternatives?: boolean;
  /** CTranslate2's use_vmap: the output head chooses among the sources' shortlist under `model.vmap` only (a
   * VocabularyMap: the fixed set, the source tokens' candidates, EOS, the decoder start, the forced first token). */
  useVmap?: boolean;
  /** A draft export of the same vocabulary (an opened one: `await openExport(DRAFT_DIR)`): greedy decoding then
   * speculates, source by source, the drafts checked in one decoder step (the same ids in fewer calls; a draft of
   * another vocabulary throws one line), and sampling too (the same distribution; seeded: Python's speculative
   * sampling's ids). promptLookupNumTokens drafts from n-grams instead. */
  assistant?: ExportedModel | null;
  /** Filled with the speculative decode's counts (decoder calls, drafted and accepted ids). */
  speculation?: Speculation | null;
}

/**
 * CTranslate2's vocabulary map (Python's VocabularyMap, tfm_export/runtime/decode/vmap.py): per source token the
 * target tokens its translations use, and a fixed set every shortlist has. Set `model.vmap` to one and decode with
 * `useVmap: true`.
 */
export class VocabularyMap {
  constructor(fixed?: number[], candidates?: Map<number, number[]> | Record<string, number[]>);
  /** Sorted target ids. */
  fixed: number[];
  /** Source id -> sorted candidate target ids. */
  candidates: Map<number, number[]>;
  /** The sorted ids of the fixed set, each source token's candidates, and `always`. */
  shortlist(sources: number[][], always?: number[]): number[];
  /** Python's from_pairs: a map from parallel data (source ids, target ids) by co-occurrence (the same map). */
  static fromPairs(sources: number[][], targets: number[][], options?: { perToken?: number; frequent?: number }): VocabularyMap;
  /** Python's `save` format: { fixed, map: { "source id": [target ids] } } (JSON.stringify writes it). */
  toJSON(): { fixed: number[]; map: Record<string, number[]> };
  /** A map of that format (parsed JSON); throws one line when it is not one. */
  static fromJSON(data: unknown, where?: string): VocabularyMap;
  /** CTranslate2's vmap text (`source<TAB>targets` per line, an empty source for the fixed set), pieces -> ids by
   * the lookups (null/undefined: dropped). */
  static fromCt2(text: string, sourceId: (piece: string) => number | null | undefined,
    targetId: (piece: string) => number | null | undefined): VocabularyMap;
}

/** A vocabulary map file of Python's `VocabularyMap.save` format, for `model.vmap`; throws one line naming the file. */
export function loadVocabularyMap(file: string): Promise<VocabularyMap>;

/** One target's scores (Python's ScoreResult, CTranslate2's score_batch): `tokens` the target and EOS. */
export interface ScoreResult {
  tokens: number[];
  /** One log-probability per token, teacher-forced, without processors. */
  logProbs: number[];
  /** Their sum: log P(target | source). */
  score: number;
  /** Their mean (minus transformers' loss of these labels). */
  normalizedScore: number;
}

/** generateIds also takes `stopAtEos: false` (benchmarks): every row gets exactly maxNewTokens ids. */
export interface GenerateIdsOptions extends GenerateOptions {
  stopAtEos?: boolean;
}

/** A multilingual model's language codes (`languages()` lists them); unknown codes throw one line. */
export interface LanguageOptions {
  /** Marks the source language (default: the tokenizer's); text sources only. */
  sourceLang?: string;
  /** Forces the target language's token as the first generated token (forcedBosTokenId, when not given). */
  targetLang?: string;
}

/** translate's options: decoding options and language codes, and CTranslate2's (as Python's translate). */
export interface TranslateOptions extends DecodingOptions, LanguageOptions {
  /** Per text the target token ids its translation starts with ([] for none). */
  targetPrefix?: number[][] | null;
  /** Alternatives after the prefix (numHypotheses of them) instead of the n-best. */
  returnAlternatives?: boolean;
  /** > 1 (or with returnAlternatives): per text a list of translations, best first (the n-best on at least that
   * many beams, or the alternatives). */
  numHypotheses?: number;
  /** The head restricted to the texts' shortlist under `model.vmap` (one shortlist for the call). */
  useVmap?: boolean;
}

/** `numReturnSequences` is always 1 for a stream. */
export type StreamOptions = Omit<GenerateOptions, 'numReturnSequences' | 'targetPrefix' | 'returnAlternatives' | 'useVmap'>
  & LanguageOptions;

/** One decoded row: ids without BOS/EOS and its score (beam search: sum(log p) / length ** lengthPenalty; else sum(log p)). */
export interface Hypothesis {
  ids: number[];
  score: number;
}

/** Open an export folder: manifest checks, the sha256 of every graph file, one session per graph. */
export function openExport(exportDir: string, options?: OpenOptions): Promise<ExportedModel>;

/** The best ids per source (without BOS and EOS), exactly as the Python runtime's generate_ids. */
export function generateIds(exportDirOrModel: string | ExportedModel, idLists: number[][],
  opts?: GenerateIdsOptions): Promise<number[][]>;

/** Per source, `numReturnSequences` hypotheses with scores (beam search: best first). */
export function generate(exportDirOrModel: string | ExportedModel, idLists: number[][],
  opts?: GenerateOptions): Promise<Hypothesis[][]>;

/** CTranslate2's score_batch: per source, the teacher-forced log-probabilities of its target (EOS appended). */
export function score(exportDirOrModel: string | ExportedModel, idLists: number[][],
  targets: number[][]): Promise<ScoreResult[]>;

/**
 * An encoder-only export's outputs by name for token-id sources padded into one batch (row i: source
 * i), as Python's `open_export(OUT).run`; an export with a decoder throws one line.
 */
export function run(exportDirOrModel: string | ExportedModel, idLists: number[][]): Promise<Record<string, Tensor>>;

/** Translate texts with the manifest's tokenizer (throws when the export has none): the best texts. */
export function translate(exportDirOrModel: string | ExportedModel, texts: string[],
  opts?: TranslateOptions & { numHypotheses?: 1; returnAlternatives?: false }): Promise<string[]>;
/** With `numHypotheses` > 1 or `returnAlternatives`: per text its translations, best first. */
export function translate(exportDirOrModel: string | ExportedModel, texts: string[],
  opts?: TranslateOptions): Promise<string[] | string[][]>;

/**
 * Transcribe one recording with a Whisper export (the ids of Python's `open_export(OUT).transcribe`):
 * a WAV file's path or bytes (mixed to mono, resampled to 16 kHz) or samples; long audio window by window.
 */
export function transcribe(exportDirOrModel: string | ExportedModel, audio: AudioInput,
  opts?: TranscribeOptions): Promise<Transcription>;
/** Several recordings: their transcriptions in order (with `batchSize` > 1 their windows decoded together). */
export function transcribe(exportDirOrModel: string | ExportedModel, audio: AudioInput[],
  opts?: TranscribeOptions): Promise<Transcription[]>;

/** A transcription's segments as SubRip subtitles (Python's `to_srt`: `tfm-export transcribe --format srt`). */
export function toSrt(segments: Array<Pick<Segment, 'start' | 'end' | 'text'>>): string;

/** A transcription's segments as WebVTT subtitles (Python's `to_vtt`: `tfm-export transcribe --format vtt`). */
export function toVtt(segments: Array<Pick<Segment, 'start' | 'end' | 'text'>>): string;

/** The language codes the export takes (reads only manifest.json for a folder path). */
export function languages(exportDirOrModel: string | ExportedModel): Promise<LanguageCodes>;

/** One source as it is decoded: text pieces for a string, ids for an id list (beam search: all at the end). */
export function stream(exportDirOrModel: string | ExportedModel, source: string,
  opts?: StreamOptions): AsyncGenerator<string, void, undefined>;
export function stream(exportDirOrModel: string | ExportedModel, source: number[],
  opts?: StreamOptions): AsyncGenerator<number, void, undefined>;
