// node --test runtimes/node/test/   (TFM_EXPORT_DIR: the bundled model's export folder)
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { generateIds, openExport, translate } from '../translate.mjs';

const exportDir = process.env.TFM_EXPORT_DIR;
const fixture = JSON.parse(await readFile(new URL('../../fixtures/expected.json', import.meta.url), 'utf8'));
const skip = exportDir ? false : 'TFM_EXPORT_DIR is not set (export the bundled model first)';

test('texts decode to exactly the Python runtime output', { skip }, async () => {
  const texts = fixture.cases.map((c) => c.input);
  assert.deepEqual(await translate(exportDir, texts), fixture.cases.map((c) => c.text));
});

test('token ids equal the Python runtime ids, one by one and batched', { skip }, async () => {
  const model = await openExport(exportDir);
  const sources = fixture.cases.map((c) => c.source_ids);
  assert.deepEqual(await generateIds(model, sources), fixture.cases.map((c) => c.ids));
  assert.deepEqual(await generateIds(model, [sources[1]]), [fixture.cases[1].ids]);
  assert.deepEqual(sources.map((s) => model.tokenizer.encode(fixture.cases[sources.indexOf(s)].input)), sources);
});

test('unknown characters and out-of-range ids are clear errors', { skip }, async () => {
  const model = await openExport(exportDir);
  assert.throws(() => model.tokenizer.encode('12x'), /cannot encode "x"/);
  await assert.rejects(generateIds(model, [[9999]]), /out of range/);
});
