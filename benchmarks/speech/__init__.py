"""Whisper benchmarks, a module per scenario: `whisper-speed` (whisper_speed: against faster-whisper, transformers and
Optimum, over the backends of backends; whisper_measures its RTF and step measures), `word-timestamps`
(word_timestamps: what word timestamps cost) and `served-speech` (served: serve's in-flight windows); inputs has
what they share (recordings, folders, exports, WER); batched_sides holds the sides of `speech-batched`
(benchmarks/speech_batched.py)."""
