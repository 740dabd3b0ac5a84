// node --test runtimes/node/test/
// The parts of Whisper transcription that need no export (audio/, speech/prompt.mjs, speech/whisper.mjs):
// the FFT against a plain DFT, WAV decoding as libsndfile scales samples, the forced prompt and lengths
// as Python's tfm_export/runtime/speech/prompt.py builds them, and the one-line refusals. Features
// and ids against Python on real speech: tests/test_node_speech.py.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import wavefile from 'wavefile';
import { decodeWav, resample } from '../audio/io.mjs';
import { decodeFeatures } from '../api.mjs';
import { featureConfig, melFilters } from '../audio/features.mjs';
import { powerSpectrum } from '../audio/spectrum.mjs';
import { compressionRatio, previousText, splitSegments, windowPrompt } from '../speech/longform.mjs';
import { dtw, medianFilter, words } from '../speech/alignment.mjs';
import { toSrt, toVtt } from '../speech/subtitles.mjs';
import { transcribe } from '../speech/whisper.mjs';
import { DETECT, initTokens, languageId, maxNewTokens, promptPrefix, whisperSettings } from '../speech/prompt.mjs';

const { WaveFile } = wavefile;
// models/whisper-digits/generation_config.json's Whisper keys, as an export's manifest keeps them
const SPEECH = {
  decoder_start_token_id: 322, eos_token_id: 321, pad_token_id: 321, no_timestamps_token_id: 330,
  lang_to_id: { '<|de|>': 324, '<|en|>': 323 }, task_to_id: { transcribe: 326, translate: 325 }, is_multilingual: true,
  suppress_tokens: [329], begin_suppress_tokens: [321], prev_sot_token_id: 328, max_length: 64,
};
const TEXT_MANIFEST = { format: 'tfm-export-manifest/1', config: { max_len: 64 }, graphs: {}, generation: {} };

/** |DFT(frame)|^2 for k = 0 .. n/2, the plain O(n^2) sum. */
function plainPower(frame) {
  const n = frame.length;
  return Array.from({ length: Math.floor(n / 2) + 1 }, (_, k) => {
    let [re, im] = [0, 0];
    frame.forEach((x, j) => { re += x * Math.cos((2 * Math.PI * k * j) / n); im -= x * Math.sin((2 * Math.PI * k * j) / n); });
    return re * re + im * im;
  });
}

describe('features', () => {
  // [n, its method]: 400 (Whisper's) = 2 x 200, 200 = 4 2 5 5; 30 = 2 x 15 (3 5); 105 odd (3 5 7); 22 = 2 x 11
  const lengths = [[400, 'mixed'], [512, 'fft.js'], [30, 'mixed'], [105, 'mixed'], [22, 'bluestein'], [401, 'bluestein']];
  for (const [n, method] of lengths) {
    test(`the power spectrum of ${n} samples is the DFT's (${method}, and every other method that takes ${n})`, () => {
      const frame = Float64Array.from({ length: n }, (_, i) => Math.sin(i * 0.37) + ((i * 7919) % 13) / 13 - 0.5);
      const want = plainPower(frame);
      const scale = Math.max(...want);
      const methods = [null, 'bluestein', ...(n & (n - 1) ? [] : ['fft.js']), ...(method === 'mixed' ? ['mixed'] : [])];
      for (const m of methods) {
        const got = Array.from(powerSpectrum(n, m)(frame)); // a copy: the next call reuses the array
        assert.equal(got.length, want.length);
        want.forEach((w, k) => assert.ok(Math.abs(got[k] - w) <= 1e-12 * scale, `${m ?? method} bin ${k}: ${got[k]} vs ${w}`));
      }
    });
  }

  test('a frame length with a prime factor over 7 has no mixed-radix transform', () => {
    assert.throws(() => powerSpectrum(22, 'mixed'), /prime factor over 7/);
  });

  test('the Slaney filters cover 0 Hz to Nyquist, each a triangle of area about 2 / width', () => {
    const filters = melFilters(80, 400, 16000);
    const rows = Array.from({ length: 80 }, (_, m) => filters.subarray(m * 201, (m + 1) * 201));
    assert.ok(rows.every((row) => row.some((v) => v > 0) && row.every((v) => v >= 0)));
    assert.equal(rows[0][0], 0); // the first triangle starts at 0 Hz
    assert.ok(rows[79][199] > 0); // the last reaches up to Nyquist
  });

  test('a text export has no features: one line', () => {
    assert.throws(() => featureConfig(TEXT_MANIFEST), /^Error: this export is not a Whisper speech model/);
  });
});

describe('audio', () => {
  const wav = (bits, samples, rate = 16000, channels = 1) => {
    const file = new WaveFile();
    file.fromScratch(channels, rate, bits, samples);
    return file.toBuffer();
  };

  test('integer samples are scaled by 2^(bits - 1), as libsndfile reads them', () => {
    assert.deepEqual(Array.from(decodeWav(wav('16', [-32768, -1, 0, 16384, 32767])).samples),
      [-1, -1 / 32768, 0, 0.5, 32767 / 32768].map(Math.fround));
    assert.deepEqual(Array.from(decodeWav(wav('8', [0, 128, 255])).samples), [-1, 0, 127 / 128].map(Math.fround));
  });

  test('channels are averaged; another rate is resampled to the length it should have', () => {
    const { samples, sampleRate } = decodeWav(wav('32f', [[0.5, 0.25], [0.25, -0.25]], 22050, 2));
    assert.deepEqual([Array.from(samples), sampleRate], [[0.375, 0], 22050]);
    assert.equal(resample(new Float32Array(22050), 22050, 16000).length, 16000);
  });

  test('what is not a WAV file is one line naming it', () => {
    assert.throws(() => decodeWav(new Uint8Array(0), 'x.wav'), /^Error: x.wav is empty \(0 bytes\)/);
    assert.throws(() => decodeWav(new TextEncoder().encode('ID3 an mp3'), 'x.mp3'), /^Error: x.mp3 is not a WAV file; convert/);
    const cut = wav('16', [1, 2, 3]).slice(0, 20);
    assert.throws(() => decodeWav(cut, 'cut.wav'), /^Error: cut.wav is a damaged or unsupported WAV file/);
  });
});

describe('whisper', () => {
  const settings = whisperSettings({ features: {}, speech: SPEECH });

  test('the prompt is init_tokens\' (Python): language given, detected, translate, English-only', () => {
    assert.deepEqual(initTokens(settings, 'de', 'transcribe'), [322, 324, 326, 330]);
    assert.deepEqual(initTokens(settings, null, 'transcribe'), [322, DETECT, 326, 330]);
    assert.deepEqual(initTokens(settings, 'german', 'translate'), [322, 324, 325, 330]);
    assert.deepEqual(initTokens(settings, '<|en|>', null), [322, 323, 326, 330]);
    const english = { ...settings, lang_to_id: undefined, task_to_id: undefined, is_multilingual: false };
    assert.deepEqual(initTokens(english, null, null), [322, 330]);
    assert.equal(languageId(settings, 'EN'), 323);
    assert.throws(() => languageId(settings, 'fr'), /^Error: language "fr" is not a language of this Whisper model; its languages are en, de/);
  });

  test('max new tokens: up to max_length past the prompt (transformers\' rule), a request checked', () => {
    assert.equal(maxNewTokens(settings, 4, null, 64), 60);
    assert.equal(maxNewTokens(settings, 4, 10, 64), 10);
    assert.throws(() => maxNewTokens(settings, 4, 61, 64), /exceed Whisper's 64 positions/);
  });

  test('a text export is refused in one line, before any audio is read', async () => {
    await assert.rejects(transcribe({}, { manifest: TEXT_MANIFEST }, new Float32Array(16000)),
      /^Error: this export is not a speech model \(its encoder reads token ids\)/);
    await assert.rejects(decodeFeatures({}, { manifest: TEXT_MANIFEST }, [], {}), /reads token ids, not audio features/);
    await assert.rejects(transcribe({}, { manifest: { ...TEXT_MANIFEST, features: {} } }, new Float32Array(1)),
      /^Error: this export has no Whisper decoding settings/);
  });

  test('bad options are one line', async () => {
    const model = { manifest: { ...TEXT_MANIFEST, features: { chunk_length: 4 }, speech: SPEECH } };
    await assert.rejects(transcribe({}, model, new Float32Array(16000), { task: 'summarise' }), /^Error: task must be one of/);
    await assert.rejects(transcribe({}, model, new Float32Array(16000), { beams: 2 }), /^Error: unknown transcribe option "beams"/);
    await assert.rejects(transcribe({}, model, 'talk.wav'), /^Error: audio must be a WAV file's bytes/);
    await assert.rejects(transcribe({}, model, new Float32Array(5 * 16000), { maxSeconds: 4.5 }),
      /^Error: the audio is 5.0 s long, over the limit of 4.5 s \(maxSeconds\)/);
    const english = { manifest: { ...model.manifest, speech: { ...SPEECH, lang_to_id: undefined } } };
    await assert.rejects(transcribe({}, english, new Float32Array(16000), { task: 'translate' }),
      /^Error: this Whisper model is English-only: it cannot translate/);
    const stampless = { manifest: { ...model.manifest, speech: { ...SPEECH, no_timestamps_token_id: undefined } } };
    await assert.rejects(transcribe({}, stampless, new Float32Array(16000), { timestamps: true }),
      /^Error: this Whisper model has no timestamp tokens/);
    await assert.rejects(transcribe({}, model, new Float32Array(16000), { prompt: { text: 'seven' } }),
      /^Error: prompt must be text or an array of token ids/);
    await assert.rejects(transcribe({}, model, new Float32Array(16000), { prompt: 'seven' }),
      /^Error: this export has no tokenizer: give the prompt as token ids/);
    const sized = { manifest: { ...model.manifest, config: { max_len: 64, tgt_vocab_size: 532 } } };
    await assert.rejects(transcribe({}, sized, new Float32Array(16000), { prompt: [5, 532] }),
      /^Error: prompt id 532 is out of range for the model's vocabulary of 532 ids/);
    const unprompted = { manifest: { ...model.manifest, speech: { ...SPEECH, prev_sot_token_id: null } } };
    await assert.rejects(transcribe({}, unprompted, new Float32Array(16000), { prompt: [7] }),
      /^Error: this Whisper model has no <\|startofprev\|>/);
  });

  test('an initial prompt is <|startofprev|> and its ids (Python\'s prompt_prefix)', () => {
    assert.deepEqual(promptPrefix(settings, [7, 8]), [328, 7, 8]);
    assert.deepEqual(promptPrefix(settings, [328, 7]), [328, 7]);
  });
});

describe('long form', () => {
  const BEGIN = 331; // <|0.00|>
  test('a window\'s ids are cut at each timestamp pair, as Python\'s split_segments', () => {
    // <|0.00|> a b <|1.00|><|1.20|> c <|2.00|>: two segments, seek to the last pair (1.00 s: 100 frames)
    const ids = [BEGIN, 7, 8, BEGIN + 50, BEGIN + 60, 9, BEGIN + 100];
    assert.deepEqual(splitSegments(ids, BEGIN, 4, 400), { segments: [
      { start: 4, end: 5, tokens: [BEGIN, 7, 8, BEGIN + 50] },
      { start: 5.2, end: 6, tokens: [BEGIN + 60, 9, BEGIN + 100] }], advance: 400 }); // ends on a lone one: a whole window
    const paired = splitSegments([BEGIN, 7, BEGIN + 50, BEGIN + 50], BEGIN, 0, 400);
    assert.deepEqual([paired.segments.length, paired.advance], [1, 100]);
    assert.deepEqual(splitSegments([7, 8], BEGIN, 0, 400), { segments: [{ start: 0, end: 4, tokens: [7, 8] }], advance: 400 });
  });

  test('a conditioned window\'s prompt is <|startofprev|>, the text before it (Python\'s window_prompt), the init tokens', () => {
    const settings = whisperSettings({ features: {}, speech: SPEECH });
    const segments = [{ tokens: [BEGIN, 7, BEGIN + 9, BEGIN + 9] }, { tokens: [BEGIN + 10, 8, BEGIN + 20] }];
    assert.deepEqual(previousText(segments, BEGIN, 0), [BEGIN, 7, BEGIN + 9, BEGIN + 10, 8, BEGIN + 20]);
    assert.deepEqual(previousText(segments, BEGIN, 2), [8, BEGIN + 20]);
    const init = [322, 324, 326];
    assert.deepEqual(windowPrompt(settings, init, segments, true, [], 8), [328, BEGIN + 10, 8, BEGIN + 20, ...init]); // 8 / 2 - 1 ids
    assert.deepEqual(windowPrompt(settings, init, segments, false, [328, 5], 8), [328, 5, ...init]);
    assert.deepEqual(windowPrompt(settings, init, [], true, [328, 5], 8), [328, 5, ...init]);
  });

  test('subtitles are Python\'s to_srt / to_vtt: hours, minutes, milliseconds, negative times as 0', () => {
    const segments = [{ start: -0.01, end: 1.5, text: ' seven ' }, { start: 3723.004, end: 3723.9, text: 'nine' }];
    assert.equal(toSrt(segments), '1\n00:00:00,000 --> 00:00:01,500\nseven\n\n2\n01:02:03,004 --> 01:02:03,900\nnine\n\n');
    assert.equal(toVtt(segments.slice(1)), 'WEBVTT\n\n01:02:03.004 --> 01:02:03.900\nnine\n\n');
  });

  test('a window\'s compression ratio is Python\'s (zlib through pako; ids of 2 or 3 bytes by the vocabulary)', () => {
    // tfm_export.runtime.speech.longform.compression_ratio of the same ids
    const range = Array.from({ length: 100 }, (_, i) => i);
    assert.equal(compressionRatio(Array(20).fill([50258, 50259, 50359]).flat(), 51865), 7.0588235294117645);
    assert.equal(compressionRatio([7, 8, 9, 300, 301], 532), 0.5555555555555556);
    assert.equal(compressionRatio(range, 51865), 1.3793103448275863);
  });

  test('word timestamps: Python\'s dynamic time warping (ties to a time step) and word grouping', async () => {
    // tfm_export.runtime.speech.alignment.dtw and words of the same inputs
    assert.deepEqual(dtw([[0, 1, 1, 2], [1, 0, 1, 1], [2, 1, 1, 0]].map((r) => Float64Array.from(r))),
      [[0, 1, 2, 2], [0, 1, 2, 3]]);
    assert.deepEqual(dtw([[1, 1, 1], [1, 1, 1]].map((r) => Float64Array.from(r))), [[0, 1, 1], [0, 1, 2]]);
    assert.deepEqual(Array.from(medianFilter(Float32Array.from([5, 1, 9, 3, 7, 2, 8, 4]), 3)), [1, 5, 3, 7, 3, 7, 4, 8]);
    const vocab = { 1: ' three', 2: ',', 3: ' (', 4: 'one', 5: ')', 6: ' four' };
    const decode = (ids) => ids.map((i) => vocab[i]).join('');
    assert.deepEqual(words(decode, [1, 2, 3, 4, 5, 6], [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 100), [
      { word: ' three,', start: 0, end: 0.2 }, { word: ' (one)', start: 0.2, end: 0.5 }, { word: ' four', start: 0.5, end: 0.6 }]);
    const model = { manifest: { ...TEXT_MANIFEST, features: { chunk_length: 4 }, speech: SPEECH } };
    await assert.rejects(transcribe({}, model, new Float32Array(16000), { wordTimestamps: true }),
      /^Error: this export has no alignment.onnx, which word timestamps need/);
  });
});
