// A client of `tfm-export serve` with the local model's API: `connect(url, { apiKey })` gives
// translate, generateIds, generate and stream over HTTP (POST /v1/translate), plus health. Decoding
// options are the local ones (camelCase, options/generation.mjs), sent under the server's snake_case names;
// `sourceLang` / `targetLang` go as `source_lang` / `target_lang`.
// Runtime-agnostic (fetch, TextDecoder, ReadableStream: Node >= 18 and browsers): the web page
// imports this file too (/lib/client.mjs).
//
//   const server = connect('http://127.0.0.1:8080', { apiKey: process.env.TFM_EXPORT_API_KEY });
//   await server.translate(['4718']);                     // [ 'viertausendsiebenhundertachtzehn' ]
//   for await (const piece of server.stream('4718')) process.stdout.write(piece);
import { PYTHON_NAMES } from './options/generation.mjs';

const RETRIED = new Set([429, 503]); // queue full, shutting down: the server says when to try again
// A multilingual model's language codes: request fields beside the decoding options (the server encodes).
const LANGUAGE_NAMES = { sourceLang: 'source_lang', targetLang: 'target_lang' };
const BIGINT = '\u0000bigint:'; // marks a BigInt (a seed beyond 2**53) until it is written as a JSON number

/** A non-2xx answer: the server's one-line `error` and the HTTP status; `body` is its JSON. */
export class ServerError extends Error {
  constructor(message, status, body = null) {
    super(status ? `${message} (HTTP ${status})` : message);
    this.name = 'ServerError';
    this.status = status;
    this.body = body;
  }
}

/**
 * The JSON body of POST /v1/translate: `texts` (strings) or `ids` (id lists), the decoding options
 * under their Python names and `source_lang` / `target_lang` (undefined/null: the server's default).
 * Unknown options throw.
 */
export function requestBody(sources, options = {}) {
  const body = { [sources.every((s) => typeof s === 'string') ? 'texts' : 'ids']: sources };
  const names = { ...PYTHON_NAMES, ...LANGUAGE_NAMES };
  for (const [name, value] of Object.entries(options)) {
    if (!(name in names)) {
      throw new Error(`unknown decoding option ${JSON.stringify(name)}; known: ${Object.keys(names).join(', ')}`);
    }
    if (value !== undefined && value !== null) body[names[name]] = value;
  }
  return body;
}

function toJson(body) {
  const text = JSON.stringify(body, (_, v) => (typeof v === 'bigint' ? `${BIGINT}${v}` : v));
  return text.replace(/"\\u0000bigint:(\d+)"/g, '$1'); // exact: JSON numbers have no size limit
}

/** Seconds to wait from a Retry-After header (seconds or an HTTP date); 1 when absent or unreadable. */
export function retryAfterSeconds(header, now = Date.now()) {
  if (header === null || header === undefined || header.trim() === '') return 1;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(header);
  return Number.isNaN(date) ? 1 : Math.max(0, (date - now) / 1000);
}

async function failure(res) {
  let body = null;
  try {
    body = await res.json();
  } catch { /* not JSON (a proxy's error page): the status line says what it can */ }
  const message = typeof body?.error === 'string' ? body.error : (res.statusText || 'no error message');
  return new ServerError(message, res.status, body);
}

function unreachable(base, err) {
  const reason = err.cause?.message ?? err.message;
  // In a browser a refused cross-origin request looks like a network error: say what the server needs.
  const origin = globalThis.location?.origin;
  const page = origin?.startsWith('http') ? ` with --cors-origin ${origin}` : '';
  return new ServerError(`cannot reach ${base} (${reason}); is \`tfm-export serve\` running there${page}?`);
}

/**
 * Server-sent events of a response body, `{ event, data }` with `data` parsed as JSON. Lines end in
 * LF or CRLF; comment lines (`:`) are skipped.
 */
export async function* serverSentEvents(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let event = 'message';
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const lines = (buffer + decoder.decode(value, { stream: true })).split('\n');
      buffer = lines.pop();
      for (const raw of lines) {
        const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
        if (line === '') { // the end of an event
          if (data.length) yield { event, data: parseData(data.join('\n')) };
          event = 'message';
          data = [];
          continue;
        }
        const value = line.slice(line.indexOf(':') + 1).replace(/^ /, ''); // comments (':...') match no field
        if (line.startsWith('event:')) event = value;
        else if (line.startsWith('data:')) data.push(value);
      }
    }
  } finally {
    await reader.cancel().catch(() => {}); // a consumer that stops early closes the connection
  }
}

function parseData(text) {
  try {
    return JSON.parse(text);
  } catch {
    throw new ServerError(`the server sent an event that is not JSON: ${text.slice(0, 80)}`);
  }
}

/** What `whole` (text or ids) adds to what was already yielded; nothing when it does not continue it. */
function rest(whole, shown) {
  const continues = typeof whole === 'string' ? whole.startsWith(shown) : shown.every((x, n) => whole[n] === x);
  return whole.slice(continues ? shown.length : whole.length);
}

/**
 * A client of the server at `url`. `apiKey`: sent as `Authorization: Bearer KEY`. A 429 (queue
 * full) or 503 (shutting down) is retried up to `retries` times after the server's Retry-After, when
 * that is at most `maxRetryWait` seconds; any other non-2xx answer throws a ServerError.
 */
export function connect(url, { apiKey, retries = 2, maxRetryWait = 30, fetch = globalThis.fetch } = {}) {
  let base;
  try {
    base = new URL(url);
  } catch {
    throw new Error(`not a URL: ${JSON.stringify(url)}; give the server's address, e.g. http://127.0.0.1:8080`);
  }
  if (!['http:', 'https:'].includes(base.protocol)) throw new Error(`${url} is not an http(s) URL`);
  base = base.href.replace(/\/+$/, '');
  const headers = { 'content-type': 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) };

  async function send(path, init = {}) {
    for (let attempt = 0; ; attempt += 1) {
      let res;
      try {
        res = await fetch(`${base}${path}`, { headers, ...init });
      } catch (err) {
        throw init.signal?.aborted ? err : unreachable(base, err);
      }
      if (res.ok) return res;
      const wait = retryAfterSeconds(res.headers.get('retry-after'));
      if (!RETRIED.has(res.status) || attempt >= retries || wait > maxRetryWait) throw await failure(res);
      await res.body?.cancel();
      await new Promise((resolve) => { setTimeout(resolve, wait * 1000); });
    }
  }

  const post = (sources, options, more = {}, init = {}) => send('/v1/translate',
    { method: 'POST', body: toJson({ ...requestBody(sources, options), ...more }), ...init });
  const translations = async (sources, options) => (await (await post(sources, options)).json()).translations;

  /** One streamed request: { type: 'token', index, id, text? } per token, then { type: 'done', translations }. */
  async function* streamEvents(sources, options = {}) {
    const controller = new AbortController();
    const res = await post(sources, options, { stream: true }, { signal: controller.signal });
    let done = false;
    try {
      for await (const { event, data } of serverSentEvents(res.body)) {
        if (done) continue; // the body ends right after `done`: read it to its end, a clean close
        if (event === 'error') throw new ServerError(`${data.error} (during the stream)`, undefined, data);
        if (event === 'token') yield { type: 'token', ...data };
        if (event === 'done') {
          done = true;
          yield { type: 'done', translations: data.translations };
        }
      }
      if (!done) throw new ServerError(`${base} ended the stream before its done event`);
    } finally {
      if (!done) controller.abort(); // the consumer stopped early: hang up, the server frees the rows
    }
  }

  return {
    url: base,
    /** Texts in, the best texts out (the server's tokenizer). */
    translate: async (texts, options) => (await translations(texts, options)).map((t) => t.text),
    /** Id lists in, the best ids out (without BOS/EOS). */
    generateIds: async (idLists, options) => (await translations(idLists, options)).map((t) => t.ids),
    /** Per source (text or ids), its hypotheses { ids, text?, score? }: the server's n-best, else the one. */
    generate: async (sources, options) => (await translations(sources, options))
      .map(({ hypotheses, ...best }) => hypotheses ?? [best]),
    streamEvents,
    /** One source as it is decoded: text pieces for a string, ids for an id list (local model.stream). */
    async* stream(source, options = {}) {
      const isText = typeof source === 'string';
      let shown = isText ? '' : [];
      for await (const event of streamEvents([source], options)) {
        const [row] = event.translations ?? [];
        // a token adds its piece; done adds what the tokens did not show (beam search: all of it)
        const added = event.type === 'token' ? (isText ? event.text ?? '' : [event.id])
          : rest(isText ? row.text ?? '' : row.ids, shown);
        yield* (isText ? [added].filter(Boolean) : added);
        shown = shown.concat(added);
      }
    },
    /** GET /healthz: { status, batching, queue_depth, active }. */
    health: async () => (await send('/healthz', { headers: {} })).json(), // no headers: no CORS preflight
  };
}
