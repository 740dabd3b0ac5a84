"""What is left of the Whisper benchmarks' package: speech-batched's sides (batched_sides) and the old names they
and benchmarks/speech_batched.py import (backends, inputs), until both move (#59). The scenarios are
benchmarks/whisper.py, speech_served.py, speech_batched.py, live.py and js_speech.py."""
