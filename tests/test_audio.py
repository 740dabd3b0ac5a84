"""The audio front end (tfm_export.audio): decoding, mixing and resampling, and log-mel features equal to
transformers' WhisperFeatureExtractor (built from a dict here, nothing downloaded) within 1e-4.

Real speech comes from espeak-ng (`make test` installs it where it can; those cases skip without it). Each
parity case prints its largest difference: `pytest -rP tests/test_audio.py` shows the figures.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile
from transformers import WhisperFeatureExtractor

from tfm_export.audio import (FeatureConfig, feature_windows, load_audio, load_feature_config, log_mel,
                              log_mel_batch, log_mel_spectrogram, mel_filters)
from tfm_export.errors import ConfigError, InputError

RATE = 16000
TOLERANCE = 1e-4
# Whisper's preprocessor_config.json (openai/whisper-tiny; large-v3 differs only in feature_size 128)
PREPROCESSOR = {"chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 80,
                "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right",
                "padding_value": 0.0, "processor_class": "WhisperProcessor", "return_attention_mask": False,
                "sampling_rate": 16000}
ESPEAK = shutil.which("espeak-ng")
needs_espeak = pytest.mark.skipif(ESPEAK is None, reason="espeak-ng is not installed (make test installs it as root)")


@pytest.fixture(scope="module", params=[80, 128], ids=["80mels", "128mels"])
def extractors(request):
    """(transformers' extractor, our FeatureConfig) from the same preprocessor_config dict."""
    data = {**PREPROCESSOR, "feature_size": request.param}
    return WhisperFeatureExtractor(**data), FeatureConfig.from_preprocessor_config(data)


def reference(extractor, samples, **options) -> np.ndarray:
    return extractor(samples, sampling_rate=RATE, return_tensors="np", **options).input_features


def numpy_reference(extractor, samples) -> np.ndarray:
    """transformers' own numpy path (the one it takes without torch), over the 30 s window."""
    window = np.pad(samples[:480000], (0, max(0, 480000 - len(samples))))
    return extractor._np_extract_fbank_features(window[None], "cpu")[0]


def assert_close(ours: np.ndarray, theirs: np.ndarray, case: str, tolerance: float = TOLERANCE,
                 path: str = "") -> None:
    assert ours.dtype == np.float32 and ours.shape == theirs.shape, (ours.shape, theirs.shape)
    worst = float(np.abs(ours - theirs).max())
    print(f"{case}: n_mels {ours.shape[-2]}, max |ours - WhisperFeatureExtractor{path}| = {worst:.2e}")
    assert worst < tolerance, f"{case}: {worst}"


def seconds(n: float, rate: int = RATE) -> np.ndarray:
    return np.arange(int(n * rate)) / rate


def tones(duration: float, rate: int = RATE, freqs=(300.0, 1200.0)) -> np.ndarray:
    """A few sines with a slow envelope: something that is neither flat nor one bin."""
    t = seconds(duration, rate)
    return sum(0.3 / (i + 1) * np.sin(2 * np.pi * f * t) for i, f in enumerate(freqs)) * (0.6 + 0.4 * np.sin(t))


SIGNALS = {
    "sine 440 Hz, 5 s": lambda rng: 0.5 * np.sin(2 * np.pi * 440 * seconds(5)),
    "tones and noise, 12 s": lambda rng: tones(12) + rng.normal(0, 0.02, 12 * RATE),
    "white noise, 7 s": lambda rng: rng.normal(0, 0.1, 7 * RATE),
    "silence, 3 s": lambda rng: np.zeros(3 * RATE),
    "100 samples": lambda rng: rng.normal(0, 0.1, 100),
    "exactly 30 s": lambda rng: tones(30),
    "45 s (truncated to 30 s)": lambda rng: rng.normal(0, 0.1, 45 * RATE) * np.linspace(0, 1, 45 * RATE),
    "loud clipped square": lambda rng: np.sign(np.sin(2 * np.pi * 100 * seconds(2))),
}


# -- features ---------------------------------------------------------------------------------------------


def test_mel_filters_are_transformers_slaney_filters(extractors):
    extractor, config = extractors
    ours = mel_filters(config.n_mels, config.n_fft, config.sampling_rate)  # (n_mels, n_freqs)
    np.testing.assert_allclose(ours, extractor.mel_filters.T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(SIGNALS))
def test_synthetic_signals_match_transformers(extractors, name):
    extractor, config = extractors
    samples = SIGNALS[name](np.random.default_rng(0)).astype(np.float32)
    ours = log_mel(samples, config)
    assert ours.shape == config.shape == (config.n_mels, 3000)
    assert_close(ours, reference(extractor, samples)[0], name)  # its default path: torch.stft in float32
    # its numpy path (a private method) computes in float64 as we do: agreement is then to float32 rounding
    if hasattr(extractor, "_np_extract_fbank_features"):
        assert_close(ours, numpy_reference(extractor, samples), name, 1e-5, " numpy path")


def test_a_batch_matches_transformers_row_by_row(extractors):
    extractor, config = extractors
    rng = np.random.default_rng(1)
    batch = [tones(2).astype(np.float32), rng.normal(0, 0.3, 40 * RATE).astype(np.float32), np.zeros(800, np.float32)]
    ours = log_mel_batch(batch, config)
    assert ours.shape == (3, config.n_mels, 3000)  # (batch, n_mels, frames)
    assert_close(ours, reference(extractor, batch), "batch of 2 s, 40 s, 50 ms")


def test_long_recordings_window_by_window(extractors):
    extractor, config = extractors
    samples = (tones(75) + np.random.default_rng(2).normal(0, 0.01, 75 * RATE)).astype(np.float32)
    whole = log_mel_spectrogram(samples, config)  # (n_mels, 7500): one max over the recording
    # transformers' long-form input: the whole recording, unpadded
    assert_close(whole, reference(extractor, samples, padding="longest", truncation=False)[0], "75 s, whole")
    windows = list(feature_windows(samples, config))
    assert [start for start, _ in windows] == [0, 3000, 6000]
    assert all(window.shape == config.shape for _, window in windows)
    np.testing.assert_array_equal(windows[1][1], whole[:, 3000:6000])
    np.testing.assert_array_equal(windows[2][1][:, :1500], whole[:, 6000:])
    assert not windows[2][1][:, 1500:].any()  # padded with 0.0, as transformers' generate pads a last segment


def speak(path, text: str) -> None:
    subprocess.run([ESPEAK, "-w", str(path), text], check=True, capture_output=True, timeout=60)


@needs_espeak
def test_speech_matches_transformers(extractors, tmp_path):
    extractor, config = extractors
    speak(tmp_path / "speech.wav", "The quick brown fox jumps over the lazy dog. Speech is now an input.")
    assert soundfile.info(str(tmp_path / "speech.wav")).samplerate != RATE  # espeak-ng speaks at 22.05 kHz
    samples = load_audio(tmp_path / "speech.wav", RATE)
    assert 1.5 * RATE < len(samples) < 10 * RATE and np.abs(samples).max() > 0.05
    ours = log_mel(samples, config)
    assert_close(ours, reference(extractor, samples)[0], "espeak-ng speech")
    if hasattr(extractor, "_np_extract_fbank_features"):
        assert_close(ours, numpy_reference(extractor, samples), "espeak-ng speech", 1e-5, " numpy path")


@needs_espeak
def test_long_speech_matches_transformers(extractors, tmp_path):
    extractor, config = extractors
    speak(tmp_path / "long.wav", " ".join(["Whisper reads thirty seconds of speech at a time."] * 14))
    samples = load_audio(tmp_path / "long.wav", RATE)
    assert len(samples) > 30 * RATE
    assert_close(log_mel(samples, config), reference(extractor, samples)[0], "espeak-ng speech over 30 s")
    assert_close(log_mel_spectrogram(samples, config),
                 reference(extractor, samples, padding="longest", truncation=False)[0], "espeak-ng speech, whole")


def test_bad_samples_are_one_line_errors():
    config = FeatureConfig()
    for samples, expected in [(np.zeros((2, 100)), "one mono channel"), (np.zeros(0), "no samples"),
                              (np.array([0.0, np.nan]), "NaN or infinite"), (np.array(["a"]), "real numbers")]:
        with pytest.raises(InputError, match=expected) as info:
            log_mel(samples, config)
        assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="100 samples long, shorter than one feature frame"):
        log_mel_spectrogram(np.zeros(100), config)  # the whole-recording features pad nothing
    with pytest.raises(InputError, match="batch is empty"):
        log_mel_batch([], config)


# -- the config -------------------------------------------------------------------------------------------


def test_config_round_trips_and_loads_from_a_folder(tmp_path):
    config = FeatureConfig.from_preprocessor_config({**PREPROCESSOR, "feature_size": 128})
    assert config.n_mels == 128 and config.shape == (128, 3000)
    assert FeatureConfig.from_preprocessor_config(config.to_dict()) == config
    assert config.to_dict()["feature_size"] == 128 and "n_mels" not in config.to_dict()
    # transformers reads our dict the same way
    assert WhisperFeatureExtractor(**config.to_dict()).mel_filters.shape == (201, 128)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    assert load_feature_config(tmp_path) == FeatureConfig()
    assert FeatureConfig.from_preprocessor_config({}) == FeatureConfig()  # WhisperFeatureExtractor's defaults


@pytest.mark.parametrize("change, expected", [
    ({"feature_size": 0}, "n_mels must be a positive integer"),
    ({"hop_length": "160"}, "hop_length must be a positive integer"),
    ({"n_samples": 240000}, "n_samples is 240000 but chunk_length"),
    ({"dither": 0.5}, "dither 0.5 is not supported"),
    ({"feature_extractor_type": "SeamlessM4TFeatureExtractor"}, "is not WhisperFeatureExtractor"),
    ({"padding_value": float("nan")}, "padding_value must be a number"),
])
def test_bad_configs_are_config_errors(change, expected):
    with pytest.raises(ConfigError, match=expected):
        FeatureConfig.from_preprocessor_config({**PREPROCESSOR, **change})


def test_a_folder_without_the_config_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="preprocessor_config.json is missing"):
        load_feature_config(tmp_path)


# -- reading audio ----------------------------------------------------------------------------------------


def encode(samples: np.ndarray, rate: int, fmt: str, subtype: str) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


# (format, subtype, the least signal-to-error ratio in dB: lossless formats are within one 16-bit step)
FORMATS = [("WAV", "PCM_16", 80), ("FLAC", "PCM_16", 80), ("MP3", "MPEG_LAYER_III", 25), ("OGG", "VORBIS", 25),
           ("OGG", "OPUS", 20)]


@pytest.mark.parametrize("fmt, subtype, snr", FORMATS, ids=[f"{f}-{s}" for f, s, _ in FORMATS])
def test_each_format_reads_the_same_samples(tmp_path, fmt, subtype, snr):
    original = tones(3).astype(np.float32)
    data = encode(original, RATE, fmt, subtype)
    path = tmp_path / f"tones.{fmt.lower()}"
    path.write_bytes(data)
    from_path, from_bytes = load_audio(path), load_audio(data)
    np.testing.assert_array_equal(from_path, from_bytes)
    assert from_path.dtype == np.float32 and from_path.shape == original.shape
    if snr >= 80:
        np.testing.assert_allclose(from_path, original, rtol=0, atol=1.01 / 32768)  # 16-bit rounding only
    error = from_path - original
    ratio = 10 * np.log10(np.mean(original ** 2) / np.mean(error ** 2))
    print(f"{fmt} {subtype}: {ratio:.1f} dB signal to decoding error")
    assert ratio > snr


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampling_to_16_khz(rate):
    freqs = (440.0, 3000.0)  # below every source's Nyquist frequency (4 kHz at 8 kHz)
    samples = load_audio(encode(tones(2, rate, freqs), rate, "WAV", "FLOAT"), RATE)
    assert samples.dtype == np.float32 and len(samples) == 2 * RATE
    expected = tones(2, RATE, freqs)
    interior = slice(RATE // 10, -RATE // 10)  # away from the filter's start and end transients
    worst = np.abs(samples[interior] - expected[interior]).max()
    assert worst < 2e-3, f"{rate} Hz -> 16 kHz: {worst}"


@pytest.mark.parametrize("rate", [16000, 44100])
def test_stereo_mixes_to_the_mean(rate):
    left, right = 0.5 * np.sin(2 * np.pi * 440 * seconds(1, rate)), 0.25 * np.sin(2 * np.pi * 1000 * seconds(1, rate))
    samples = load_audio(encode(np.stack([left, right], axis=1), rate, "WAV", "FLOAT"), RATE)
    expected = (0.5 * np.sin(2 * np.pi * 440 * seconds(1)) + 0.25 * np.sin(2 * np.pi * 1000 * seconds(1))) / 2
    interior = slice(RATE // 10, -RATE // 10)
    assert len(samples) == RATE
    assert np.abs(samples[interior] - expected[interior]).max() < (1e-6 if rate == RATE else 2e-3)


def garbled_ogg() -> bytes:
    data = bytearray(encode(tones(1), RATE, "OGG", "VORBIS"))
    data[100:1500] = bytes(1400)
    return bytes(data)


def garbled_flac() -> bytes:
    rng = np.random.default_rng(3)
    data = bytearray(encode(rng.normal(0, 0.1, int(1.5 * RATE)), RATE, "FLAC", "PCM_16"))
    data[3000:6000] = rng.bytes(3000)
    return bytes(data)


BAD_AUDIO = {  # name: (the file's bytes, the one line expected after the file's name)
    "empty": (lambda: b"", r"is empty \(0 bytes\); pass a WAV, FLAC, MP3 or OGG recording"),
    "text": (lambda: "Hello, this is not a recording.\n".encode() * 20,
             r"is text, not audio; pass a WAV, FLAC, MP3 or OGG recording"),
    "json": (lambda: b'{"not": "audio", "\xc3\xa9t\xc3\xa9": 1}', r"is text, not audio"),
    "unknown-format": (lambda: b"\x00\x00\x00\x20ftypM4A " + bytes(400),
                       r"is MP4/M4A, which is not supported; convert it to WAV, FLAC, MP3 or OGG \(e.g. ffmpeg"),
    "random-bytes": (lambda: np.random.default_rng(4).bytes(5000),
                     r"is not audio in a known format; pass a WAV, FLAC, MP3 or OGG recording"),
    "corrupt-header": (lambda: encode(tones(1), RATE, "FLAC", "PCM_16")[:40],
                       r"is a damaged FLAC file \(.+\); re-encode or re-export it"),
    "corrupt-ogg": (garbled_ogg, r"is a damaged OGG file \(.+\); re-encode or re-export it"),
    "corrupt-data": (garbled_flac, r"is a damaged FLAC file: decoding failed \(.+\); re-encode or re-export it"),
    "no-samples": (lambda: encode(np.zeros(0), RATE, "WAV", "PCM_16"),
                   r"holds no audio samples; pass a recording that is not empty"),
    "nan": (lambda: encode(np.array([0.0, np.nan, 0.1]), RATE, "WAV", "FLOAT"), r"holds NaN or infinite samples"),
    "too-long": (lambda: encode(np.zeros(int(2.5 * RATE)), RATE, "WAV", "PCM_16"),
                 r"is 2\.5 s long, over the limit of 2 s \(max_seconds\); split the recording or raise max_seconds"),
}


@pytest.mark.parametrize("case", list(BAD_AUDIO))
def test_bad_audio_is_one_line_naming_the_file(tmp_path, case):
    make, expected = BAD_AUDIO[case]
    data = make()
    path = tmp_path / f"{case}.wav"  # the extension says nothing: the content is what is read
    path.write_bytes(data)
    for source, label in [(path, str(path)), (data, "upload.bin")]:
        with pytest.raises(InputError) as info:
            load_audio(source, max_seconds=2, name=None if source is path else "upload.bin")
        message = str(info.value)
        assert "\n" not in message and message.startswith(label), message
        assert re.search(expected, message), message


def test_missing_paths_folders_and_bad_rates(tmp_path):
    with pytest.raises(InputError, match="no such file; check the path"):
        load_audio(tmp_path / "nothing.wav")
    with pytest.raises(InputError, match="is a folder; pass an audio file"):
        load_audio(tmp_path)
    with pytest.raises(InputError, match="sampling_rate must be a positive integer"):
        load_audio(encode(tones(1), RATE, "WAV", "PCM_16"), 0)
    # the content decides, not the name: soundfile alone would take `.raw` for headerless audio
    (tmp_path / "speech.raw").write_bytes(encode(tones(1), RATE, "WAV", "PCM_16"))
    assert len(load_audio(tmp_path / "speech.raw")) == RATE
    # bytes name themselves when no name is given; max_seconds=None lifts the limit
    with pytest.raises(InputError, match="^the audio bytes is empty"):
        load_audio(b"")
    assert len(load_audio(encode(np.zeros(5 * RATE), RATE, "WAV", "PCM_16"), max_seconds=None)) == 5 * RATE


def test_the_audio_package_never_imports_torch():
    code = ("import sys, tfm_export.audio as a; a.load_audio; a.log_mel([0.0] * 1600, a.FeatureConfig()); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
