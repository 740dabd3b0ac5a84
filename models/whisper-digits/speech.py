"""Spoken digit strings from espeak-ng, and the windows whisper-digits is trained and tested on.

Shared by the recipe (train.py) and the tests (tests/test_whisper_trained.py): both speak the same way, so
the held-out set the tests score is drawn exactly as the training data was, from strings never trained on.

    utterance(text, voice, speed, pitch) -> float32 samples at 16 kHz, silence trimmed
    Window                              -> samples of one 4 s window, its prompt and its target text
    compose(rng, bank, ...)             -> a training window: 1-3 utterances with pauses, timestamped
"""

from __future__ import annotations

import io
import random
import subprocess
import zlib
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

RATE = 16000
WINDOW_SECONDS = 4  # the encoder's window (chunk_length): 400 frames, 200 positions
WORDS = {  # digit -> word, per language; German digits are translated to the English words
    "en": "zero one two three four five six seven eight nine".split(),
    "de": "null eins zwei drei vier fünf sechs sieben acht neun".split(),
}
VOICES = {"en": ("en", "en-us", "en-gb-x-rp", "en-gb-scotland"), "de": ("de",)}
VARIANTS = ("", "+m1", "+m3", "+f1", "+f3", "+f4")  # espeak-ng voice variants: men and women
SPEEDS, PITCHES = (130, 190), (25, 75)  # words a minute, pitch: drawn uniformly
SILENCE = 0.01  # amplitude under which espeak-ng's leading and trailing samples are cut


def digits_heldout(digits: str) -> bool:
    """One digit string in five is never trained on (a stable hash, so recipe and tests agree)."""
    return zlib.crc32(digits.encode()) % 5 == 0


def words(digits: str, language: str) -> str:
    return " ".join(WORDS[language][int(d)] for d in digits)


def utterance(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """espeak-ng speaking `text`: float32 mono at 16 kHz, leading and trailing silence cut."""
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
                         check=True, capture_output=True).stdout
    samples, rate = soundfile.read(io.BytesIO(wav), dtype="float32")
    samples = soxr.resample(samples, rate, RATE).astype(np.float32)
    loud = np.flatnonzero(np.abs(samples) > SILENCE)
    return samples[loud[0]:loud[-1] + 1] if loud.size else samples


@dataclass(frozen=True)
class Spoken:
    """One utterance: its digits, language and how espeak-ng said it."""

    digits: str
    language: str
    voice: str
    speed: int
    pitch: int

    def text(self, task: str = "transcribe") -> str:
        return words(self.digits, "en" if task == "translate" else self.language)

    def samples(self) -> np.ndarray:
        return utterance(words(self.digits, self.language), self.voice, self.speed, self.pitch)

    def row(self) -> str:
        return "\t".join((self.digits, self.language, self.voice, str(self.speed), str(self.pitch)))

    @classmethod
    def from_row(cls, row: str) -> "Spoken":
        digits, language, voice, speed, pitch = row.rstrip("\n").split("\t")
        return cls(digits, language, voice, int(speed), int(pitch))


def draw(rng: random.Random, language: str, heldout: bool) -> Spoken:
    """A digit string of 2-5 digits (held out or not) and a random voice, speed and pitch."""
    while True:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(2, 5)))
        if digits_heldout(digits) == heldout:
            break
    voice = rng.choice(VOICES[language]) + rng.choice(VARIANTS)
    return Spoken(digits, language, voice, rng.randint(*SPEEDS), rng.randint(*PITCHES))


@dataclass
class Window:
    """One window's audio and what the model should write for it."""

    samples: np.ndarray  # float32 at 16 kHz, at most WINDOW_SECONDS long
    language: str
    task: str
    segments: list[tuple[float, float, str]]  # (start, end, text) of the utterances wholly inside
    resume: float | None  # where the next utterance starts when it is cut by the window's end

    @property
    def text(self) -> str:
        return " ".join(text for _, _, text in self.segments)


def compose(rng: random.Random, bank: dict[str, list[tuple[Spoken, np.ndarray]]], timestamps: bool) -> Window:
    """1-3 utterances of one language with pauses, laid into one window. Without timestamps only whole
    utterances are kept (the audio after the last one is silent); with them the window may cut the last
    one, which Whisper marks with its start time alone."""
    language = rng.choice(("en", "de"))
    task = "translate" if language == "de" and rng.random() < 0.3 else "transcribe"
    size = WINDOW_SECONDS * RATE
    audio, segments, resume = np.zeros(size, np.float32), [], None
    at = int(rng.uniform(0.0, 0.6) * RATE)
    for _ in range(rng.randint(1, 3)):
        spoken, samples = rng.choice(bank[language])
        end = at + len(samples)
        if end > size:
            if timestamps and at < size - int(0.1 * RATE):
                audio[at:] = samples[:size - at]
                resume = at / RATE
            break
        audio[at:end] = samples
        segments.append((at / RATE, end / RATE, spoken.text(task)))
        at = end + int(rng.uniform(0.15, 0.8) * RATE)
    noise = rng.uniform(0.0, 0.01) * np.random.default_rng(rng.getrandbits(32)).standard_normal(size)
    return Window((audio * rng.uniform(0.5, 1.5) + noise).astype(np.float32), language, task, segments, resume)


def write_eval_set(heldout: list[tuple[Spoken, np.ndarray]], folder) -> "Path":
    """The held-out utterances as `tfm-export --eval-file` takes them: WAV files and heldout.tsv of
    `file<TAB>words` lines; the TSV's path."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (spoken, samples) in enumerate(heldout):
        soundfile.write(str(folder / f"{i:03d}.wav"), samples, RATE)
        rows.append(f"{i:03d}.wav\t{spoken.text()}")
    (folder / "heldout.tsv").write_text("\n".join(rows) + "\n")
    return folder / "heldout.tsv"


if __name__ == "__main__":  # python models/whisper-digits/speech.py DIR: the held-out set as an eval file
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    spoken = [Spoken.from_row(row) for row in (here / "heldout.tsv").read_text().splitlines()]
    print(write_eval_set([(s, s.samples()) for s in spoken], sys.argv[1]))
