// Types of 'tfm-export-node/tokenizers' (text/tokenizer.mjs): the manifest's tokenizers ("chars", and
// "hf": tokenizer.json through @huggingface/tokenizers) and the language codes of multilingual models.
import type { LanguagesSpec, Tokenizer, TokenizerSpec } from './index.js';

/** A tokenizer's language codes, with the Python runtime's checks (one-line errors naming the valid codes). */
export interface Languages {
  /** code -> the token that marks the source language. */
  source: Record<string, string>;
  /** code -> the token that starts the target (the forced first token). */
  target: Record<string, string>;
  sourceDefault: string | null;
  targetOnSource: boolean;
  /** A single-pair model's (source, target) codes, no tokens. */
  pair: [string, string] | null;
  /** The token that marks source language `code` (none given: the default); null without languages. */
  sourceToken(code?: string | null): string | null;
  /** The token that starts target language `code`; null when no code is given. */
  targetToken(code?: string | null): string | null;
  /** The codes of one side, sorted. */
  codes(side: 'source' | 'target'): string[];
}

/** The codes an export takes (Python's `tfm-export languages --json`). */
export interface LanguageCodes {
  source: string[];
  target: string[];
  sourceDefault: string | null;
  /** A Whisper export: the spoken languages' codes transcribe's `language` takes ([] for an English-only model). */
  spoken?: string[];
  /** A Whisper export: 'en' when it translates speech into English (task 'translate'), else null. */
  translateInto?: string | null;
}

/** A tokenizer's languages from the manifest's `tokenizer.languages`. */
export function makeLanguages(data: LanguagesSpec | null | undefined): Languages;

/**
 * The files beside manifest.json the tokenizer needs (["tokenizer.json"] for "hf"; a Marian export's
 * source.tokenizer.json and vocab.json, and target_vocab.json if it has one); read and pass them to makeTokenizer.
 */
export function tokenizerFiles(spec: TokenizerSpec | null | undefined): string[];

/**
 * The manifest's tokenizer, or null when the export has none. `files`: file name -> parsed JSON of
 * each of tokenizerFiles(spec). Other types (`m2m100`, Marian exports made before source.tokenizer.json) give an
 * ids-only tokenizer whose encode/decode throw.
 */
export function makeTokenizer(spec: TokenizerSpec | null, files?: Record<string, unknown>): Tokenizer | null;

/** transformers' clean_up_tokenization: no space before punctuation and English contractions. */
export function cleanUpSpaces(text: string): string;

/** Decoding options that make the output `targetLang`: `{ forcedBosTokenId }`, or `{}` when no token is forced. */
export function languageOptions(tokenizer: Tokenizer | null, targetLang?: string | null): { forcedBosTokenId?: number };

/** The language codes a manifest's tokenizer takes. */
export function languageCodes(spec: TokenizerSpec | null | undefined): LanguageCodes;
