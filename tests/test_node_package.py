"""runtimes/node as a package another app depends on: `npm pack`, installed into a fresh folder, translates.

The tarball is installed the way runtimes/node/README.md tells an app to (npm registry or npm's cache
for onnxruntime-node), then imported by name, run through its bin, and type-checked against its
TypeScript declarations with the TypeScript compiler from runtimes/node's devDependencies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "runtimes" / "node"
FIXTURE = json.loads((ROOT / "runtimes" / "fixtures" / "expected.json").read_text(encoding="utf-8"))
TSC = PACKAGE / "node_modules" / ".bin" / "tsc"

CONSUMER_JS = """
import { translate, generateIds, openExport } from 'tfm-export-node';
import { makeTokenizer } from 'tfm-export-node/greedy';
const [dir, inputs] = [process.argv[2], JSON.parse(process.argv[3])];
const model = await openExport(dir);
const ids = await generateIds(model, inputs.map((t) => model.tokenizer.encode(t)));
const beam = await model.generate([model.tokenizer.encode(inputs[0])], { numBeams: 4, numReturnSequences: 4 });
let streamed = '';
for await (const piece of model.stream(inputs[0])) streamed += piece;
console.log(JSON.stringify({ texts: await translate(dir, inputs), ids, tokenizer: typeof makeTokenizer, beam, streamed }));
await model.release();
"""

# Strict TypeScript against index.d.ts and greedy.d.ts; `BAD` lines must be refused.
CONSUMER_TS = """
import { translate, generate, generateIds, openExport, stream, type ExportedModel, type Hypothesis, type Timings
  } from 'tfm-export-node';
import { makeTokenizer, resolveMaxNewTokens } from 'tfm-export-node/greedy';
import * as decoding from 'tfm-export-node/decoding';
import { connect, ServerError, type ServerClient } from 'tfm-export-node';
import { serverSentEvents } from 'tfm-export-node/client';
import { languages, run, type LanguageCodes } from 'tfm-export-node';
import { toSrt, toVtt, transcribe, type Transcription } from 'tfm-export-node';
import { languageOptions, makeTokenizer as makeHfTokenizer, tokenizerFiles } from 'tfm-export-node/tokenizers';
const model: ExportedModel = await openExport('model_onnx', { verify: false, sessionOptions: { intraOpNumThreads: 1 } });
const texts: string[] = await translate(model, ['4718'], { maxNewTokens: 20 });
const timings: Timings = {};
const rows: number[][] = await generateIds('model_onnx', [[7, 4, 8, 2]], { timings });
const ids: number[] | undefined = model.tokenizer?.encode(texts[0]);
const max: number = resolveMaxNewTokens(undefined, model.manifest.config.max_len);
makeTokenizer(model.manifest.tokenizer);
const nbest: Hypothesis[][] = await generate(model, [[7, 4, 8, 2]], { numBeams: 4, numReturnSequences: 2, earlyStopping: 'never' });
const sampled: number[][] = await model.generateIds([[7, 2]], { doSample: true, seed: 2n ** 63n, topP: 0.9, topK: 5 });
for await (const piece of stream(model, '4718', { numBeams: 4 })) { const text: string = piece; console.log(text); }
for await (const id of model.stream([7, 2], { timings })) { const n: number = id; console.log(n); }
const config: decoding.GenerationConfig = decoding.generationConfig(model.manifest, decoding.fromPythonNames({ num_beams: 4 }));
console.log(rows, ids, max, timings.stepsMs?.length, nbest[0][0].score, sampled, config.numBeams);
const forced: number | null = config.forcedBosTokenId;
const codes: LanguageCodes = await languages('model_onnx');
const german: string[] = await translate(model, ['Hello'], { sourceLang: 'en_XX', targetLang: 'de_DE', numBeams: 4 });
for await (const piece of model.stream('Hello', { targetLang: 'de_DE' })) { const text: string = piece; console.log(text); }
const first: number | null = model.tokenizer?.forcedBos('de_DE') ?? null;
const tok = makeHfTokenizer(model.manifest.tokenizer, { 'tokenizer.json': {} });
const extra = languageOptions(tok, 'de_DE').forcedBosTokenId;
console.log(forced, codes.source, codes.sourceDefault, german, first, model.languages().target, tokenizerFiles(null), extra,
  await generateIds(model, [[7, 2]], { forcedBosTokenId: 5 }));
const server: ServerClient = connect('http://127.0.0.1:8080', { apiKey: 'key', retries: 1, maxRetryWait: 5 });
const remote: string[] = await server.translate(['4718'], { maxNewTokens: 20 });
const remoteIds: number[][] = await server.generateIds([[7, 2]], { numBeams: 4 });
const score: number | undefined = (await server.generate(['4718'], { numReturnSequences: 1 }))[0][0].score;
for await (const piece of server.stream('4718')) { const text: string = piece; console.log(text); }
for await (const event of server.streamEvents(['4718', '12'])) { if (event.type === 'token') console.log(event.index); }
const error: ServerError = new ServerError('x', 413);
console.log(remote, remoteIds, score, (await server.health()).batching, error.status, typeof serverSentEvents);
console.log(await server.translate(['Hello'], { sourceLang: 'en_XX', targetLang: 'de_DE' }));
const outputs = await run('classifier_onnx', [[5, 9, 13]]);  // an encoder-only module export
const dims: readonly number[] = (await model.run([[5, 9]])).logits.dims;
console.log(outputs.logits.data, dims, decoding.runtimeGraphs(model.manifest).decoder, model.manifest.source?.decoder);
const heard: Transcription = await transcribe('whisper_onnx', 'talk.wav', { language: 'de', task: 'translate', numBeams: 2 });
const said: string = (await model.transcribe(new Float32Array(16000), { maxNewTokens: 20, timestamps: true })).text;
const quiet: number | null = heard.segments[0].no_speech_prob;
const cues: string = toSrt(heard.segments) + toVtt([{ start: 0, end: 1, text: 'x' }]);
console.log(heard.ids, heard.language, heard.segments[0].end, heard.segments[0].tokens.length, quiet, said,
            typeof decoding.decodeFeatures);
"""
BAD = ["await translate(model, '4718');", "await generateIds(model, [['7']]);",
       "const n: number = model.manifest.samples;", "await openExport('x', { verfy: true });",
       "await generate(model, [[7, 2]], { numBeams: '4' });", "await translate(model, ['4'], { earlyStopping: 'always' });",
       "for await (const piece of model.stream('4718')) { const n: number = piece; }",
       "connect('http://127.0.0.1:8080', { apikey: 'key' });", "await server.translate('4718');",
       "for await (const id of server.stream([7, 2])) { const s: string = id; }",
       "await translate(model, ['4'], { targetLang: 5 });", "await generateIds(model, [[7]], { forcedBosTokenId: '5' });",
       "const c: string[] = (await languages('x')).sourceDefault;",
       "const s: string = (await run(model, [[5]])).logits;",
       "await transcribe(model, 'a.wav', { task: 'summarise' });", "const t: string = (await model.transcribe('a.wav')).ids;"]


def npm(args: list, cwd: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run(["npm", *map(str, args), "--no-audit", "--no-fund", "--loglevel=error"], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **env})
    assert done.returncode == 0, f"npm {args[0]}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    """A fresh app folder with the packed tarball installed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("SKIPPED: node/npm not found; install Node.js >= 18 to test the Node package")
    packed = tmp_path_factory.mktemp("pack")
    info = json.loads(npm(["pack", PACKAGE, "--json", "--pack-destination", packed], cwd=packed).stdout)[0]
    assert sorted(f["path"] for f in info["files"]) == sorted(  # the folders of the Python runtime they port
        ["README.md", "api.mjs", "checks.mjs", "cli-transcribe.mjs", "cli.mjs", "client.d.ts", "client.mjs",
         "decoding.d.ts", "decoding.mjs", "exported.mjs", "greedy.d.ts", "greedy.mjs", "index.d.ts", "manifest.mjs",
         "package.json", "shortlisted.mjs", "sources.mjs", "tokenizers.d.ts", "translate.mjs",
         "audio/features.mjs", "audio/io.mjs", "audio/spectrum.mjs",
         "decode/beam.mjs", "decode/loop.mjs", "decode/prefix.mjs", "decode/processors.mjs", "decode/sampling.mjs",
         "decode/scoring.mjs", "decode/strategies.mjs", "decode/vmap.mjs", "decode/checking.mjs",
         "decode/draft_length.mjs", "decode/proposers.mjs", "decode/speculative.mjs", "speculating.mjs",
         "decode/speculative_sampling.mjs",
         "decode/together.mjs", "options/generation.mjs", "speech/batch.mjs", "speech/batch_rounds.mjs",
         "speech/alignment.mjs", "speech/assisted.mjs", "speech/chunks.mjs", "speech/fallback.mjs", "speech/longform.mjs",
         "speech/prompt.mjs", "speech/prompt_text.mjs", "speech/rules.mjs", "speech/search.mjs",
         "speech/streaming.mjs", "speech/subtitles.mjs", "speech/transcribe.mjs",
         "speech/silero.mjs", "speech/vad.mjs", "speech/whisper.mjs", "speech/words.mjs",
         "states/growing.mjs", "states/nocache.mjs", "states/reorder.mjs", "states/shortlist.mjs",
         "text/charsmap.mjs", "text/marian.mjs", "text/sentencepiece.mjs", "text/tokenizer.mjs"])
    app = tmp_path_factory.mktemp("app")
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}\n')
    try:
        npm(["install", "--prefer-offline", packed / info["filename"]], cwd=app, ONNXRUNTIME_NODE_INSTALL="skip")
    except AssertionError as exc:
        if "ENOTFOUND" in str(exc) or "EAI_AGAIN" in str(exc):
            pytest.skip("SKIPPED: the npm registry is not reachable and onnxruntime-node is not in npm's cache")
        raise
    assert (app / "node_modules" / "tfm-export-node" / "index.d.ts").is_file()
    return app


def node(args: list, cwd: Path) -> str:
    done = subprocess.run(["node", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_the_installed_package_translates_the_bundled_export(app, bundled_export):
    (app / "consumer.mjs").write_text(CONSUMER_JS)
    inputs = [case["input"] for case in FIXTURE["cases"]]
    got = json.loads(node(["consumer.mjs", bundled_export, json.dumps(inputs)], cwd=app))
    beam = got.pop("beam")
    assert got == {"texts": [c["text"] for c in FIXTURE["cases"]], "ids": [c["ids"] for c in FIXTURE["cases"]],
                   "tokenizer": "function", "streamed": FIXTURE["cases"][0]["text"]}
    search = FIXTURE["searches"][0]  # beam 4, 4-best, computed by the Python runtime
    assert search["options"] == {"num_beams": 4, "num_return_sequences": 4} and search["inputs"][0] == inputs[0]
    assert [h["ids"] for h in beam[0]] == [h["ids"] for h in search["hypotheses"][0]]
    assert [h["score"] for h in beam[0]] == pytest.approx([h["score"] for h in search["hypotheses"][0]], abs=1e-6)


def test_the_installed_bin(app, bundled_export):
    case = FIXTURE["cases"][0]
    assert node([app / "node_modules" / ".bin" / "tfm-export-node", bundled_export, case["input"]],
                cwd=app) == case["text"] + "\n"


def test_the_declarations_type_check_a_consumer(app):
    if not TSC.exists():
        pytest.skip(f"SKIPPED: {TSC} missing; run `npm ci` in runtimes/node (make test does)")
    flags = ["--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext"]
    (app / "consumer.mts").write_text(CONSUMER_TS)
    done = subprocess.run([TSC, *flags, "consumer.mts"], cwd=app, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    where = CONSUMER_TS.count("\n") + 1  # the line appended below
    # The declarations are types, not `any`: each wrong call is an error. One compiler run checks every file
    # (tsc reports each file's errors; the consumer alone is clean, so each error is its appended line's).
    bad = [f"bad{n}.mts" for n in range(len(BAD))]
    for name, line in zip(bad, BAD):
        (app / name).write_text(CONSUMER_TS + line + "\n")
    done = subprocess.run([TSC, *flags, *bad], cwd=app, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    for name, line in zip(bad, BAD):
        assert re.search(rf"^{re.escape(name)}\({where},\d+\): error TS", done.stdout, re.M), line


def exported_names(text: str) -> set[str]:
    """Names a module or declaration file exports: functions, constants, classes and `export { a, b } from`."""
    names = set(re.findall(r"^export (?:async )?(?:function\*?|const|class) ?(\w+)", text, re.M))
    for group in re.findall(r"^export \{([^}]*)\} from", text, re.M):
        names |= {name.strip() for name in group.split(",") if name.strip()}
    return names


def test_every_export_is_declared():
    """The names of the package's entry points (exported.mjs, decoding.mjs, client.mjs, text/tokenizer.mjs) are
    exactly those their .d.ts files declare; greedy.mjs and greedy.d.ts (the old entry point) re-export
    decoding's, translate.mjs (the first main module) exported.mjs's."""
    for module, types in (("exported.mjs", "index.d.ts"), ("decoding.mjs", "decoding.d.ts"),
                          ("client.mjs", "client.d.ts"), ("text/tokenizer.mjs", "tokenizers.d.ts")):
        exported = exported_names((PACKAGE / module).read_text())
        declared = exported_names((PACKAGE / types).read_text())
        assert exported and exported == declared, (module, exported ^ declared)
    assert "export * from './decoding.mjs';" in (PACKAGE / "greedy.mjs").read_text()
    assert "export * from './exported.mjs';" in (PACKAGE / "translate.mjs").read_text()
    assert "export * from './decoding.js';" in (PACKAGE / "greedy.d.ts").read_text()
