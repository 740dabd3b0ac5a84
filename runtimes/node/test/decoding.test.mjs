// node --test runtimes/node/test/
// Beam search, seeded sampling, the processors and streaming (api.mjs, decode/) against the
// Python runtime: runtimes/fixtures/expected.json's `searches`, made by runtimes/make_fixture.py.
// Ids must be equal; scores within 1e-6, relative to the score beyond 1 in magnitude (float64 both
// sides, Math.exp may differ from numpy's in the last bit: 4e-15 measured on the plain export; a fused
// `--optimize` export rounds its float32 logits differently: 5e-6 on a sampled score of -99).
// TFM_EXPORT_DIR: an export of the bundled model; the tests that need it skip without it.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as ort from 'onnxruntime-node';
import * as decoding from '../decoding.mjs'; // the documented entry point (tfm-export-node/decoding)
import { fromPythonNames, generationConfig } from '../options/generation.mjs';
import { bannedNgramTokens, pairwiseSum, processRow } from '../decode/processors.mjs';
import { rowGenerators, SplitMix64, warp } from '../decode/sampling.mjs';
import { Greedy, strategyFor, TokenPicker } from '../decode/strategies.mjs';
import { generate, generateIds, openExport, stream } from '../exported.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const exportDir = process.env.TFM_EXPORT_DIR;
const fixture = JSON.parse(await readFile(path.join(here, '..', '..', 'fixtures', 'expected.json'), 'utf8'));
const skip = exportDir ? false : 'TFM_EXPORT_DIR is not set (export the bundled model first: runtimes/run-tests.sh)';
const TOLERANCE = 1e-6;
const isBeam = (s) => (s.options.num_beams ?? 1) > 1;
const isSample = (s) => s.options.do_sample === true;

/** Every hypothesis: equal ids, scores within TOLERANCE * max(1, |score|); returns the largest difference. */
function assertHypotheses(got, expected, what) {
  assert.deepEqual(got.map((hyps) => hyps.map((h) => h.ids)), expected.map((hyps) => hyps.map((h) => h.ids)), what);
  let worst = 0;
  got.forEach((hyps, i) => hyps.forEach((h, j) => {
    const want = expected[i][j].score;
    const diff = Math.abs(h.score - want);
    assert.ok(diff <= TOLERANCE * Math.max(1, Math.abs(want)), `${what}: score ${h.score} is ${diff} away from Python's ${want}`);
    worst = Math.max(worst, diff);
  }));
  return worst;
}

async function collect(iterable) {
  const out = [];
  for await (const item of iterable) out.push(item);
  return out;
}

describe('sampling, processors and options (no export needed)', () => {
  test('SplitMix64 and the per-row generators draw exactly the Python numbers', () => {
    const g = new SplitMix64(0);
    assert.deepEqual([g.next(), g.next(), g.next()], [16294208416658607535n, 7960286522194355700n, 487617019471545679n]);
    const top = new SplitMix64(2n ** 64n - 1n);
    assert.equal(top.next(), 16490336266968443936n);
    assert.equal(top.uniform(), 0.9125972035944532);
    assert.deepEqual(rowGenerators(1, 3).map((r) => r.uniform()), [0.36818951565166946, 0.46696631092582586, 0.651475462601699]);
  });

  test('warpers: top-k keeps ties at the k-th, top-p keeps the smallest nucleus', () => {
    const row = Float64Array.from([1, 3, 3, 2, 0.5]);
    assert.deepEqual([...warp(row, 0.5, 2, 1)], [-Infinity, 6, 6, -Infinity, -Infinity]);
    assert.deepEqual([...warp(row, 1, 0, 0.5)], [-Infinity, 3, 3, -Infinity, -Infinity]);
  });

  test('n-gram bans and numpy-exact sums', () => {
    assert.deepEqual(bannedNgramTokens([1, 5, 6, 7, 5, 6], 3), [7]);
    assert.deepEqual(bannedNgramTokens([1, 5], 3), []);
    const values = Array.from({ length: 300 }, (_, i) => 1 / (i + 1));
    assert.ok(Math.abs(pairwiseSum(values) - values.reduce((a, b) => a + b)) < 1e-12);
  });

  test('options: defaults from the manifest, one-line errors for bad values and unknown names', () => {
    const manifest = { generation: { num_beams: 4, length_penalty: 0.6, unknown_key: 1 } };
    assert.deepEqual(generationConfig(manifest), generationConfig({}, { numBeams: 4, lengthPenalty: 0.6 }));
    assert.equal(generationConfig(manifest, { numBeams: 1 }).numBeams, 1);
    assert.equal(generationConfig(manifest, { numBeams: undefined }).numBeams, 4);
    assert.deepEqual(fromPythonNames({ top_p: 0.9, seed: 3 }), { topP: 0.9, seed: 3 });
    const bad = [[{ numBeams: 0 }, /numBeams must be an integer of at least 1, got 0/],
      [{ topP: 1.5 }, /topP must be in \(0, 1\], got 1.5/], [{ topP: 0 }, /topP must be in \(0, 1\]/],
      [{ numBeams: 2, numReturnSequences: 3 }, /numReturnSequences cannot exceed the number of beams/],
      [{ temperature: 0 }, /temperature must be greater than 0/], [{ topK: -1 }, /topK must be 0 \(off\) or more/],
      [{ doSample: true, numBeams: 2 }, /beam sampling\) is not supported/], [{ seed: -1 }, /seed must be an integer/],
      [{ earlyStopping: 'sometimes' }, /earlyStopping must be true, false or "never"/],
      [{ numbeams: 4 }, /unknown decoding option "numbeams"; known: maxNewTokens, numBeams/]];
    for (const [options, message] of bad) assert.throws(() => generationConfig({}, options), message);
  });
});

// A stand-in for a model (no export needed): no decoder layers; from input id t the decoder's best
// next id is NEXT[t] (logit 5, all others 0), and next_ids is that argmax, as in the graph. Like ORT,
// it returns only the outputs named in `fetches` (all without), and it records what each run fetched.
const NEXT = { 1: 5, 5: 6, 6: 2, 7: 8, 8: 2 }; // BOS -> 5 -> 6 -> EOS; forced 7 -> 8 -> EOS
const fakeOrt = { Tensor: class { constructor(type, data, dims) { Object.assign(this, { type, data, dims }); } } };
const VOCAB = 10;
const fakeModel = {
  manifest: {
    config: { n_decoder_layers: 0, n_heads: 1, d_model: 4, max_len: 8, src_vocab_size: VOCAB, tgt_vocab_size: VOCAB,
      bos_id: 1, eos_id: 2, src_pad_id: 0, tgt_pad_id: 0 },
    graphs: { decoder: { inputs: [] } },
  },
  encoder: { run: async ({ src_ids: src }) => ({ src_mask: src }) },
  decoder: {
    fetched: [],
    async run({ input_ids: input }, fetches) {
      const rows = input.dims[0];
      const best = Array.from(input.data, (t) => NEXT[Number(t)] ?? 2);
      const logits = new Float32Array(rows * VOCAB);
      best.forEach((t, r) => { logits[r * VOCAB + t] = 5; });
      const out = { next_ids: new fakeOrt.Tensor('int64', BigInt64Array.from(best, BigInt), [rows]),
        logits: new fakeOrt.Tensor('float32', logits, [rows, 1, VOCAB]) };
      this.fetched.push(fetches ?? Object.keys(out));
      return Object.fromEntries(Object.entries(out).filter(([name]) => !fetches || fetches.includes(name)));
    },
  },
};

describe('forced BOS: the first generated token (no export needed)', () => {
  test('processRow: at step 0 every id but the forced one is -Infinity; forced EOS wins on the same step', () => {
    const config = generationConfig({}, { forcedBosTokenId: 3 });
    assert.deepEqual([...processRow(Float64Array.from([1, 2, 3, 4]), [1], 0, 5, config, 2)], [-Infinity, -Infinity, -Infinity, 0]);
    assert.deepEqual([...processRow(Float64Array.from([1, 2, 3, 4]), [1, 3], 1, 5, config, 2)], [1, 2, 3, 4]);
    const both = generationConfig({}, { forcedBosTokenId: 3, forcedEos: true });
    assert.deepEqual([...processRow(Float64Array.from([1, 2, 3, 4]), [1], 0, 0, both, 2)], [-Infinity, -Infinity, 0, -Infinity]);
  });

  test('options: forced_bos_token_id from the manifest, checked against the vocabulary', () => {
    assert.equal(generationConfig({}).forcedBosTokenId, null);
    assert.equal(generationConfig({ generation: { forced_bos_token_id: 0 } }).forcedBosTokenId, 0);
    assert.deepEqual(fromPythonNames({ forced_bos_token_id: 7 }), { forcedBosTokenId: 7 });
    assert.throws(() => generationConfig({}, { forcedBosTokenId: -1 }), /forcedBosTokenId must be a token id \(0 or more\) or null, got -1/);
    assert.throws(() => generationConfig({}, { forcedBosTokenId: 1.5 }), /forcedBosTokenId must be a token id/);
    assert.throws(() => generationConfig(fakeModel.manifest, { forcedBosTokenId: 10 }),
      /^Error: forcedBosTokenId 10 is out of range for a vocabulary of 10 ids$/);
  });

  test('greedy (the fast path), greedy with processors, sampling and beam search all start with it', async () => {
    assert.deepEqual(await decoding.generateIds(fakeOrt, fakeModel, [[3, 4]]), [[5, 6]]);
    for (const options of [{}, { minNewTokens: 1 }, { doSample: true, seed: 3 }, { numBeams: 2 }]) {
      const forced = { ...options, forcedBosTokenId: 7 };
      assert.deepEqual(await decoding.generateIds(fakeOrt, fakeModel, [[3, 4], [5]], forced), [[7, 8], [7, 8]], JSON.stringify(options));
    }
    const [[best]] = await decoding.generate(fakeOrt, fakeModel, [[3]], { forcedBosTokenId: 7, numBeams: 2 });
    assert.deepEqual(best.ids, [7, 8]);
    const withDefault = { ...fakeModel, manifest: { ...fakeModel.manifest, generation: { forced_bos_token_id: 7 } } };
    assert.deepEqual(await decoding.generateIds(fakeOrt, withDefault, [[3]]), [[7, 8]]);
    assert.deepEqual(await collect(decoding.stream(fakeOrt, withDefault, [3])), [7, 8]);
  });
});

describe('beam search, sampling and streaming on the bundled model', { skip }, () => {
  let model;
  before(async () => { model = await openExport(exportDir); });
  after(async () => { await model?.release(); });

  const sourcesOf = (search) => search.inputs.map((t) => model.tokenizer.encode(t));

  test('every fixture search: the same ids as Python, scores within 1e-6 (relative beyond 1)', async () => {
    assert.ok(fixture.searches.some(isBeam) && fixture.searches.some(isSample));
    let worst = 0;
    for (const search of fixture.searches) {
      const got = await generate(model, sourcesOf(search), fromPythonNames(search.options));
      worst = Math.max(worst, assertHypotheses(got, search.hypotheses, JSON.stringify(search.options)));
    }
    console.log(`# largest score difference from Python: ${worst}`);
  });

  test('beam 4 n-best: every source has 4 hypotheses, best first; generateIds returns the best', async () => {
    const [search] = fixture.searches;
    assert.deepEqual(search.options, { num_beams: 4, num_return_sequences: 4 });
    assert.ok(search.hypotheses.every((hyps) => hyps.length === 4 && hyps.every((h, i) => i === 0 || h.score <= hyps[i - 1].score)));
    const ids = await generateIds(model, sourcesOf(search), { numBeams: 4 });
    assert.deepEqual(ids, search.hypotheses.map((hyps) => hyps[0].ids));
    assert.deepEqual(await model.translate(search.inputs.slice(0, 2), { numBeams: 4 }),
      search.hypotheses.slice(0, 2).map((hyps) => model.tokenizer.decode(hyps[0].ids)));
  });

  test('the manifest generation section sets the defaults (a Marian folder\'s num_beams)', async () => {
    const [search] = fixture.searches;
    const withDefaults = { ...model, manifest: { ...model.manifest, generation: { num_beams: 4, num_return_sequences: 4 } } };
    const got = await decoding.generate(ort, withDefaults, sourcesOf(search));
    assertHypotheses(got, search.hypotheses, 'manifest defaults');
    const greedy = await decoding.generateIds(ort, withDefaults, sourcesOf(search).slice(0, 1), { numBeams: 1, numReturnSequences: 1 });
    assert.deepEqual(greedy, [fixture.cases[0].ids]);
  });

  test('seeded sampling is reproducible and a row does not depend on its batch', async () => {
    const search = fixture.searches.find((s) => isSample(s) && !s.options.num_return_sequences);
    const options = fromPythonNames(search.options);
    const sources = sourcesOf(search);
    assertHypotheses(await generate(model, sources, options), search.hypotheses, 'again');
    // Source i of a batch draws from row i's generator: alone, source 0 (row 0) samples the same.
    assert.deepEqual(await generateIds(model, sources.slice(0, 1), options), [search.hypotheses[0][0].ids]);
    const other = await generateIds(model, sources.slice(0, 1), { ...options, seed: options.seed + 1 });
    assert.notDeepEqual(other, [search.hypotheses[0][0].ids]);
  });

  test('stream: ids one by one (sampling), text pieces, and beam search\'s best at the end', async () => {
    const sampled = fixture.searches.find((s) => isSample(s) && !s.options.num_return_sequences);
    const options = fromPythonNames(sampled.options);
    const [source] = sourcesOf(sampled);
    assert.deepEqual(await collect(model.stream(source, options)), sampled.hypotheses[0][0].ids);
    const pieces = await collect(stream(model, sampled.inputs[0], options));
    assert.equal(pieces.join(''), model.tokenizer.decode(sampled.hypotheses[0][0].ids));
    assert.ok(pieces.length > 1 && pieces.every((p) => p.length > 0));
    const [beam] = fixture.searches;
    const timings = {};
    assert.deepEqual(await collect(model.stream(sourcesOf(beam)[1], { numBeams: 4, timings })), beam.hypotheses[1][0].ids);
    assert.ok(timings.encoderMs > 0 && timings.stepsMs.length >= beam.hypotheses[1][0].ids.length);
    const greedy = await collect(stream(exportDir, fixture.cases[0].input)); // a folder path: opened and released
    assert.equal(greedy.join(''), fixture.cases[0].text);
  });

  test('breaking out of a stream early leaves the model usable', async () => {
    const taken = [];
    for await (const piece of model.stream(fixture.cases[0].input)) {
      taken.push(piece);
      if (taken.length === 3) break;
    }
    assert.equal(taken.join(''), fixture.cases[0].text.slice(0, 3));
    assert.deepEqual(await generateIds(model, [fixture.cases[0].source_ids]), [fixture.cases[0].ids]);
  });

  test('bad decoding options are refused before anything runs', async () => {
    await assert.rejects(generate(model, [[3, 2]], { numBeams: 2, numReturnSequences: 3 }), /numReturnSequences cannot exceed/);
    await assert.rejects(collect(model.stream('12', { topP: 2 })), /topP must be in \(0, 1\]/);
    await assert.rejects(generateIds(model, [[3, 2]], { numBeams: 4, maxNewTokens: 65 }), /use at most 64/);
  });

  test('the CLI decodes with beams, n-best and samples, and streams', async () => {
    const run = promisify(execFile);
    const cli = path.join(here, '..', 'cli.mjs');
    const [beam] = fixture.searches;
    const best = await run(process.execPath, [cli, exportDir, '--num-beams', '4', ...beam.inputs.slice(0, 2)]);
    assert.equal(best.stdout, beam.hypotheses.slice(0, 2).map((h) => `${model.tokenizer.decode(h[0].ids)}\n`).join(''));
    const nbest = await run(process.execPath, [cli, exportDir, '--num-beams', '4', '--n-best', '2', '--ids',
      sourcesOf(beam)[0].join(' ')]);
    const lines = beam.hypotheses[0].slice(0, 2).map((h) => h.ids.join(' '));
    assert.deepEqual(nbest.stdout.trim().split('\n').map((l) => l.split('\t')[1]), lines);
    const sampled = fixture.searches.find((s) => isSample(s) && !s.options.num_return_sequences);
    const o = sampled.options;
    const streamed = await run(process.execPath, [cli, exportDir, '--sample', '--seed', String(o.seed), '--temperature',
      String(o.temperature), '--top-k', String(o.top_k), '--top-p', String(o.top_p), '--stream', sampled.inputs[0]]);
    assert.equal(streamed.stdout, `${model.tokenizer.decode(sampled.hypotheses[0][0].ids)}\n`);
    await assert.rejects(run(process.execPath, [cli, exportDir, '--num-beams', '0', '12']),
      (err) => err.code === 1 && /numBeams must be an integer of at least 1/.test(err.stderr));
  });
});

describe('one step driver: strategies and the decoder state (no export needed)', () => {
  const ids = { bosId: 1, eosId: 2, padId: 0, banned: [] };
  const fetchedBy = async (call) => {
    fakeModel.decoder.fetched = [];
    await call();
    return [...new Set(fakeModel.decoder.fetched.map((names) => names.join(',')))];
  };

  test('strategyFor: Greedy for plain greedy ids, TokenPicker when scores or processors need the logits', () => {
    const plain = generationConfig({}, { forcedBosTokenId: 7, renormalizeLogits: true });
    assert.ok(strategyFor(2, 5, plain, ids) instanceof Greedy);
    assert.ok(strategyFor(2, 5, plain, ids, { scored: true }) instanceof TokenPicker);
    assert.ok(strategyFor(2, 5, generationConfig({}, { minNewTokens: 1 }), ids) instanceof TokenPicker);
    assert.equal(strategyFor(2, 5, generationConfig({}, { numBeams: 2 }), ids).reads, 'logits');
  });

  test('Greedy: forced BOS at step 0 only, finished rows fed padding, done when every row has EOS', () => {
    const greedy = new Greedy(2, 5, generationConfig({}, { forcedBosTokenId: 7 }), ids);
    const state = (next) => ({ nextIds: () => next, logits: () => assert.fail('greedy read the logits') });
    assert.deepEqual(greedy.advance(state([3, 3])), { ids: [7, 7], beamIdx: null });
    assert.deepEqual(greedy.advance(state([2, 4])).ids, [2, 4]);
    assert.deepEqual(greedy.advance(state([5, 2])).ids, [0, 2]);
    assert.ok(greedy.finished);
    assert.deepEqual(greedy.results(), [[{ ids: [7], score: null }], [{ ids: [7, 4], score: null }]]);
    const all = new Greedy(1, 2, generationConfig({}), ids, { stopAtEos: false });
    all.advance(state([2]));
    assert.ok(!all.finished);
    assert.deepEqual(all.advance(state([6])).ids, [6]);
    assert.deepEqual(all.results(), [[{ ids: [2, 6], score: null }]]);
  });

  test('only the output the strategy reads crosses: next_ids for greedy ids and streams, logits otherwise', async () => {
    assert.deepEqual(await fetchedBy(() => decoding.generateIds(fakeOrt, fakeModel, [[3]])), ['next_ids']);
    assert.deepEqual(await fetchedBy(() => collect(decoding.stream(fakeOrt, fakeModel, [3]))), ['next_ids']);
    assert.deepEqual(await fetchedBy(() => decoding.generate(fakeOrt, fakeModel, [[3]])), ['logits']);
    assert.deepEqual(await fetchedBy(() => decoding.generateIds(fakeOrt, fakeModel, [[3]], { numBeams: 2 })), ['logits']);
    const [[greedy]] = await decoding.generate(fakeOrt, fakeModel, [[3]]);
    assert.deepEqual(greedy.ids, [5, 6]);
    assert.ok(greedy.score < 0); // generate's greedy hypotheses keep their score
  });

  test('stopAtEos: false gives every row maxNewTokens ids (greedy runs on past EOS, others ban it)', async () => {
    const options = { stopAtEos: false, maxNewTokens: 4 };
    assert.deepEqual(await decoding.generateIds(fakeOrt, fakeModel, [[3], [4]], options), [[5, 6, 2, 2], [5, 6, 2, 2]]);
    const [row] = await decoding.generateIds(fakeOrt, fakeModel, [[3]], { ...options, numBeams: 2 });
    assert.equal(row.length, 4);
    assert.ok(!row.includes(2));
  });
});

describe('the encoder input is the manifest\'s (no export needed)', () => {
  /** fakeModel with graphs.encoder.inputs `inputs`; `fed` gets what the encoder was given. */
  const withEncoderInputs = (inputs, fed) => ({
    ...fakeModel,
    manifest: { ...fakeModel.manifest, graphs: { ...fakeModel.manifest.graphs, encoder: { inputs } } },
    encoder: { run: async (feeds) => { Object.assign(fed, feeds); return { src_mask: Object.values(feeds)[0] }; } },
  });
  const valid = (inputs) => ({ format: decoding.MANIFEST_FORMAT, graphs: {
    encoder: { file: 'encoder.onnx', sha256: 'a'.repeat(64), inputs }, decoder: { file: 'decoder.onnx', sha256: 'b'.repeat(64) } } });

  test('its name, id type and axis order are fed as declared', async () => {
    const fed = {};
    const declared = [{ name: 'input_ids', dtype: 'int32', shape: ['batch', 'src_len'] }];
    assert.deepEqual(await decoding.generateIds(fakeOrt, withEncoderInputs(declared, fed), [[3, 4], [5]]), [[5, 6], [5, 6]]);
    assert.deepEqual(Object.keys(fed), ['input_ids']);
    assert.equal(fed.input_ids.type, 'int32');
    assert.deepEqual([...fed.input_ids.data], [3, 4, 5, 0]);
    assert.deepEqual(fed.input_ids.dims, [2, 2]);
    const transposed = {};
    await decoding.generateIds(fakeOrt, withEncoderInputs([{ name: 'src', dtype: 'int64', shape: ['src_len', 'batch'] }],
      transposed), [[3, 4], [5]]);
    assert.deepEqual(transposed.src.dims, [2, 2]);
    assert.deepEqual([...transposed.src.data], [3n, 5n, 4n, 0n]);
  });

  test('without a declaration: src_ids, int64 (batch, src_len); what it cannot feed is refused on opening', async () => {
    const fed = {};
    await decoding.generateIds(fakeOrt, { ...fakeModel, encoder: withEncoderInputs(undefined, fed).encoder }, [[3, 4]]);
    assert.deepEqual(fed.src_ids.dims, [1, 2]);
    assert.equal(fed.src_ids.type, 'int64');
    assert.equal(decoding.checkManifest(valid([{ name: 'src_ids', dtype: 'int64', shape: ['batch', 'src_len'] }])).format,
      decoding.MANIFEST_FORMAT);
    const refused = [
      [[{ name: 'features', dtype: 'float32', shape: ['batch', 'src_len'] }], /input "features" is float32; this runtime feeds token ids as int64 or int32/],
      [[{ name: 'src_ids', dtype: 'int64', shape: ['batch', 'src_len'] }, { name: 'lang', dtype: 'int64', shape: ['batch'] }],
        /declares 2 inputs; this runtime feeds one/],
      [[{ name: 'src_ids', dtype: 'int64', shape: ['batch', 64] }], /has axes \["batch",64\]; this runtime feeds \(batch, src_len\) or \(src_len, batch\)/],
    ];
    for (const [inputs, message] of refused) assert.throws(() => decoding.checkManifest(valid(inputs)), message);
  });
});
