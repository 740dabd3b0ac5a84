// Types of 'tfm-export-node/client' (client.mjs), also exported by 'tfm-export-node': a client of
// `tfm-export serve` with the local model's API. Needs only fetch (Node >= 18, browsers).
import type { DecodingOptions, StreamOptions, TranslateOptions } from './index.js';

export interface ConnectOptions {
  /** Sent as `Authorization: Bearer KEY` (a server started with --api-key needs it). */
  apiKey?: string;
  /** 429 (queue full) and 503 (shutting down) answers retried this many times (default 2). */
  retries?: number;
  /** Retry only when the server's Retry-After is at most this many seconds (default 30). */
  maxRetryWait?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

/** One output of the server: ids without BOS/EOS, its text when the export has a tokenizer, its score when the server sends one. */
export interface ServerHypothesis {
  ids: number[];
  text?: string;
  score?: number;
}

/** A streamed request's events: one per token (`index`: which source), then the final translations. */
export type ServerEvent =
  | { type: 'token'; index: number; id: number; text?: string }
  | { type: 'done'; translations: Array<ServerHypothesis & { hypotheses?: ServerHypothesis[] }> };

/** A connected server: the local model's methods, decoded by the server. */
export interface ServerClient {
  /** The server's base URL (no trailing slash). */
  url: string;
  /** Texts in (the server's tokenizer; `sourceLang`/`targetLang` sent as source_lang/target_lang), the best texts out. */
  translate(texts: string[], opts?: TranslateOptions): Promise<string[]>;
  /** Token ids in, the best ids out (without BOS and EOS). */
  generateIds(idLists: number[][], opts?: DecodingOptions): Promise<number[][]>;
  /** Per source (a text or an id list), its hypotheses: the server's n-best, else the best one. */
  generate(sources: string[] | number[][], opts?: TranslateOptions): Promise<ServerHypothesis[][]>;
  /** One source as it is decoded: text pieces for a string, ids for an id list. Breaking out hangs up. */
  stream(source: string, opts?: StreamOptions): AsyncGenerator<string, void, undefined>;
  stream(source: number[], opts?: StreamOptions): AsyncGenerator<number, void, undefined>;
  /** Every event of one streamed request over several sources. */
  streamEvents(sources: string[] | number[][], opts?: TranslateOptions): AsyncGenerator<ServerEvent, void, undefined>;
  /** GET /healthz. */
  health(): Promise<{ status: string; batching: string; queue_depth: number; active: number }>;
}

/** A non-2xx answer (message: the server's `error` and the status) or an unreachable server (no status). */
export class ServerError extends Error {
  status: number | undefined;
  /** The server's JSON error body (`error`, and e.g. `limit` or `fields`), when it sent one. */
  body: Record<string, unknown> | null;
  constructor(message: string, status?: number, body?: Record<string, unknown> | null);
}

/** A client of the `tfm-export serve` at `url` (nothing is sent until the first call). */
export function connect(url: string, options?: ConnectOptions): ServerClient;

/** The JSON body of POST /v1/translate: `texts` or `ids`, the options under their Python names, `source_lang`, `target_lang`. */
export function requestBody(sources: string[] | number[][], opts?: TranslateOptions): Record<string, unknown>;

/** Seconds to wait from a Retry-After header (seconds or an HTTP date); 1 when absent or unreadable. */
export function retryAfterSeconds(header: string | null | undefined, now?: number): number;

/** Server-sent events of a response body, each `{ event, data }` with `data` parsed as JSON. */
export function serverSentEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<{ event: string; data: any }, void, undefined>;
