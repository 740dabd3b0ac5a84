// node --test runtimes/node/test/
// TFM_EXPORT_DIR: an export of the bundled model (runtimes/run-tests.sh and pytest set it); the
// tests that need it skip without it. Expected outputs: runtimes/fixtures/expected.json, written by
// the Python runtime (runtimes/make_fixture.py).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { makeTokenizer, resolveMaxNewTokens } from '../greedy.mjs'; // the oldest entry point still works
import { generateIds, openExport, translate } from '../translate.mjs'; // likewise the package's first main module

const here = path.dirname(fileURLToPath(import.meta.url));
const exportDir = process.env.TFM_EXPORT_DIR;
const fixture = JSON.parse(await readFile(path.join(here, '..', '..', 'fixtures', 'expected.json'), 'utf8'));
const skip = exportDir ? false : 'TFM_EXPORT_DIR is not set (export the bundled model first: runtimes/run-tests.sh)';
const inputs = fixture.cases.map((c) => c.input);

const chars = { type: 'chars', src_vocab: ['<pad>', '<bos>', '<eos>', '0', '1'], tgt_vocab: ['<pad>', '<bos>', '<eos>', 'a', 'b'], specials: 3, append_eos: true };

describe('chars tokenizer and limits (no export needed)', () => {
  test('encode appends eos, decode skips specials and out-of-range ids', () => {
    const tok = makeTokenizer(chars);
    assert.deepEqual(tok.encode('101'), [4, 3, 4, 2]);
    assert.deepEqual(makeTokenizer({ ...chars, append_eos: false }).encode('10'), [4, 3]);
    assert.equal(tok.decode([1, 3, 4, 2, 0, 99]), 'ab');
  });

  test('unknown characters, other tokenizer types and bad vocabularies are clear errors', () => {
    assert.throws(() => makeTokenizer(chars).encode('1x0y'), /cannot encode "xy" in "1x0y": the model knows only the characters "01"/);
    assert.throws(() => makeTokenizer(chars).encode('<eos>'), /cannot encode/);
    assert.throws(() => makeTokenizer({ type: 'nope' }).encode('12'), /tokenizer type "nope" is not supported by this runtime \(only "chars", "hf", "marian"\)/);
    assert.throws(() => makeTokenizer({ ...chars, src_vocab: ['0', '1'] }), /src_vocab must start with <pad>, <bos>, <eos>/);
    assert.equal(makeTokenizer(null), null);
  });

  test('maxNewTokens follows the Python rules', () => {
    assert.equal(resolveMaxNewTokens(undefined, 64), 64);
    assert.equal(resolveMaxNewTokens(5, 64), 5);
    assert.throws(() => resolveMaxNewTokens(0, 64), /at least 1/);
    assert.throws(() => resolveMaxNewTokens(65, 64), /does not fit the model's max_len \(64\); use at most 64/);
  });
});

describe('the bundled model', { skip }, () => {
  let model;
  before(async () => { model = await openExport(exportDir); });
  after(async () => { await model?.release(); });

  test('texts decode to exactly the Python runtime output', async () => {
    assert.deepEqual(await translate(exportDir, inputs), fixture.cases.map((c) => c.text));
  });

  test('token ids equal the Python runtime ids: batched, one row, and from a folder path', async () => {
    assert.deepEqual(inputs.map((t) => model.tokenizer.encode(t)), fixture.cases.map((c) => c.source_ids));
    const sources = fixture.cases.map((c) => c.source_ids);
    assert.deepEqual(await generateIds(model, sources), fixture.cases.map((c) => c.ids));
    assert.deepEqual(await generateIds(model, [sources[2]]), [fixture.cases[2].ids]);
    assert.deepEqual(await generateIds(exportDir, sources.slice(0, 2)), fixture.cases.slice(0, 2).map((c) => c.ids));
  });

  test('maxNewTokens cuts rows like the Python runtime', async () => {
    const { max_new_tokens: maxNewTokens, ids, texts } = fixture.truncated;
    const sources = fixture.truncated.inputs.map((t) => model.tokenizer.encode(t));
    assert.deepEqual(await generateIds(model, sources, { maxNewTokens }), ids);
    assert.deepEqual(await translate(model, fixture.truncated.inputs, { maxNewTokens }), texts);
  });

  test('timings: one encoder time and one entry per decoder step', async () => {
    const timings = {};
    const [row] = await generateIds(model, [fixture.cases[0].source_ids], { timings });
    assert.ok(timings.encoderMs > 0);
    assert.equal(timings.stepsMs.length, row.length + 1); // the last step produced EOS
  });

  test('bad inputs are clear errors', async () => {
    await assert.rejects(translate(model, ['12x']), /cannot encode "x" in "12x"/);
    await assert.rejects(generateIds(model, [[9999]]), /source id 9999 is out of range for a vocabulary of 13 ids/);
    await assert.rejects(generateIds(model, []), /no sources given/);
    await assert.rejects(generateIds(model, [[]]), /every source is empty/);
    await assert.rejects(generateIds(model, [Array(65).fill(3)]), /source length 65 exceeds the model's max_len \(64\)/);
    await assert.rejects(generateIds(model, [[3, 2]], { maxNewTokens: 65 }), /use at most 64/);
  });

  test('a changed graph file, a missing manifest and a missing folder are refused', async () => {
    const tmp = await mkdtemp(path.join(tmpdir(), 'tfm-node-'));
    try {
      const copy = path.join(tmp, 'copy');
      await cp(exportDir, copy, { recursive: true });
      const manifest = JSON.parse(await readFile(path.join(copy, 'manifest.json'), 'utf8'));
      manifest.graphs.decoder.sha256 = '0'.repeat(64);
      await writeFile(path.join(copy, 'manifest.json'), JSON.stringify(manifest));
      await assert.rejects(openExport(copy), /decoder\.onnx does not match the sha256 in manifest\.json/);
      const opened = await openExport(copy, { verify: false });
      await opened.release();
      await rm(path.join(copy, 'manifest.json'));
      await assert.rejects(openExport(copy), /has no manifest\.json/);
      await assert.rejects(openExport(path.join(tmp, 'nope')), /export folder not found/);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });

  test('the CLI prints translations and id rows', async () => {
    const run = promisify(execFile);
    const cli = path.join(here, '..', 'cli.mjs');
    const text = await run(process.execPath, [cli, exportDir, ...inputs.slice(0, 2)]);
    assert.equal(text.stdout, fixture.cases.slice(0, 2).map((c) => `${c.text}\n`).join(''));
    const ids = await run(process.execPath, [cli, exportDir, '--ids', fixture.cases[0].source_ids.join(' ')]);
    assert.equal(ids.stdout, `${fixture.cases[0].ids.join(' ')}\n`);
    await assert.rejects(run(process.execPath, [cli, exportDir, '12x']), (err) => err.code === 1 && /cannot encode "x"/.test(err.stderr));
  });
});
