"""Random Hugging Face Whisper folders, saved as the published ones are (tests only).

    whisper_folder(layout, folder)   WhisperForConditionalGeneration with random weights (seeded), its
                                     generation_config.json, tokenizer files and preprocessor_config.json
    speech_folder(folder, layout)    whisper_folder plus what a published folder has besides: timestamp
                                     tokens, the language and task maps
    LAYOUTS                          tiny, base, large-v3-turbo: their depths, heads and mel bins, narrow

The tokenizer is a small byte-level BPE (the `tokenizers` library) with Whisper's special tokens in
Whisper's order: <|endoftext|>, <|startoftranscript|>, the language tokens (multilingual only),
<|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|>, loaded
and saved by WhisperTokenizerFast.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import NamedTuple

import torch

CORPUS = [f"{n} is spelled out in words, said aloud and heard." for n in range(200)] + [
    "The quick brown fox jumps over the lazy dog.", "Whisper transcribes speech into text."]
LANGUAGES = ("en", "de", "fr", "es")  # a few of Whisper's 99 (large-v3: 100)
BPE_VOCAB = 300


class Layout(NamedTuple):
    """One published Whisper checkpoint's structure, narrow: d_model 64, 4 heads, ffn 4 x d_model."""

    encoder_layers: int
    decoder_layers: int
    n_mels: int
    multilingual: bool
    source_positions: int  # max_source_positions: frames / 2 (1500 published; fewer keeps tests quick)


LAYOUTS = {
    "tiny": Layout(4, 4, 80, True, 1500),          # openai/whisper-tiny: 4 + 4 layers, 80 mels, 3000 frames
    "base.en": Layout(6, 6, 80, False, 200),       # openai/whisper-base.en: 6 + 6, English-only vocabulary
    "large-v3-turbo": Layout(32, 4, 128, True, 200),  # openai/whisper-large-v3-turbo: 32 + 4, 128 mels
}


def layout_of(layout: "str | Layout") -> Layout:
    """A LAYOUTS name, or a Layout of the test's own."""
    return LAYOUTS[layout] if isinstance(layout, str) else layout


def specials(multilingual: bool) -> list[str]:
    langs = [f"<|{code}|>" for code in LANGUAGES] if multilingual else []
    return ["<|endoftext|>", "<|startoftranscript|>", *langs, "<|translate|>", "<|transcribe|>", "<|startoflm|>",
            "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]


def build_tokenizer(folder: Path, multilingual: bool):
    """A byte-level BPE (GPT-2's pre-tokenizer) with Whisper's special tokens after it, saved in `folder`."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(CORPUS, vocab_size=BPE_VOCAB, min_frequency=2, show_progress=False)
    stage = folder / ".bpe"
    stage.mkdir(parents=True, exist_ok=True)
    model = json.loads(bpe.to_str())["model"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    (stage / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
    (stage / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    tok = transformers.WhisperTokenizer(str(stage / "vocab.json"), str(stage / "merges.txt"),
                                        unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                                        eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": specials(multilingual)[1:]})
    tok.save_pretrained(folder)
    for path in stage.iterdir():
        path.unlink()
    stage.rmdir()
    return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def whisper_folder(layout: "str | Layout", folder: Path, seed: int = 0, d_model: int = 64, heads: int = 4,
                   std: float = 0.2) -> Path:
    """A random Whisper folder of `layout` (LAYOUTS): weights drawn with `std` (wider than transformers'
    0.02, so that greedy tokens depend on the features; at 0.5 the encoder's residual stream grows so large that
    float32 rounding alone moves its outputs by 3e-4)."""
    import transformers

    shape, folder = layout_of(layout), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(folder, shape.multilingual)
    eot, sot = tok.convert_tokens_to_ids(["<|endoftext|>", "<|startoftranscript|>"])
    config = transformers.WhisperConfig(
        vocab_size=len(tok), num_mel_bins=shape.n_mels, encoder_layers=shape.encoder_layers,
        decoder_layers=shape.decoder_layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
        encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model, d_model=d_model,
        max_source_positions=shape.source_positions, max_target_positions=64, pad_token_id=eot,
        bos_token_id=eot, eos_token_id=eot, decoder_start_token_id=sot, init_std=std,
        begin_suppress_tokens=None, suppress_tokens=None)
    torch.manual_seed(seed)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot, max_length=64,
        suppress_tokens=[tok.convert_tokens_to_ids("<|nospeech|>")], begin_suppress_tokens=[eot],
        no_timestamps_token_id=tok.convert_tokens_to_ids("<|notimestamps|>"), is_multilingual=shape.multilingual,
        alignment_heads=[[shape.decoder_layers - 1, 0], [shape.decoder_layers - 1, heads - 1]])  # as published
    model.save_pretrained(folder)
    seconds = shape.source_positions * 2 // 100  # 100 frames a second (hop 160 at 16 kHz)
    extractor = transformers.WhisperFeatureExtractor(feature_size=shape.n_mels, chunk_length=seconds)
    (folder / "preprocessor_config.json").write_text(json.dumps(extractor.to_dict(), indent=2) + "\n")
    return folder


def reference_features(model, samples):
    """The (n_mels, frames) features `transcribe` computes from `samples` (16 kHz float32): short audio padded
    to one window, long audio all its frames (generate's long form)."""
    from tfm_export.audio import FeatureConfig, log_mel, log_mel_spectrogram

    frames = 2 * model.config.max_source_positions
    config = FeatureConfig(n_mels=model.config.num_mel_bins, chunk_length=frames // 100)
    return log_mel_spectrogram(samples, config) if len(samples) > config.n_samples else log_mel(samples, config)


def generate_ids(model, samples, detect: bool = True, **kwargs) -> tuple[list[int], int | None]:
    """transformers' `generate` on `reference_features(samples)`: its ids with EOS removed (sequences;
    segments joined in the long form) and the first window's detected language."""
    frames = 2 * model.config.max_source_positions
    x = torch.from_numpy(reference_features(model, samples)[None])
    with torch.no_grad():
        out = model.generate(x, return_segments=True, **kwargs)
        detected = int(model.detect_language(x[:, :, :frames])[0]) if detect else None
    eos = model.generation_config.eos_token_id
    return [t for t in out["sequences"][0].tolist() if t != eos], detected


def speech_folder(folder, layout: "str | Layout" = "tiny"):
    """whisper_folder(layout) plus its timestamp tokens (<|0.00|> to the window's end) and, multilingual,
    the language and task maps of a published folder."""
    import transformers

    whisper_folder(layout, folder)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = transformers.WhisperForConditionalGeneration.from_pretrained(str(folder), local_files_only=True)
    stamps = layout_of(layout).source_positions + 1  # 0.02 s apart (two frames each): 1501 for 30 s
    tok.add_tokens([f"<|{i * 0.02:.2f}|>" for i in range(stamps)])
    torch.manual_seed(1)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    with torch.no_grad():  # timestamps as likely as text now and then
        model.model.decoder.embed_tokens.weight[-stamps:].normal_(0, 0.2)
    gen = model.generation_config
    if layout_of(layout).multilingual:
        gen.lang_to_id = {f"<|{c}|>": tok.convert_tokens_to_ids(f"<|{c}|>") for c in LANGUAGES}
        gen.task_to_id = {t: tok.convert_tokens_to_ids(f"<|{t}|>") for t in ("transcribe", "translate")}
    gen.prev_sot_token_id = tok.convert_tokens_to_ids("<|startofprev|>")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def generate_segments(model, features, **kwargs) -> tuple[dict, list[dict]]:
    """transformers' long-form `generate(return_segments=True)` on one audio's (n_mels, frames) features: its
    output, and its segments (start, end, tokens), each with the measures of its window as transformers' own
    functions give them: "seek" (the window's time offset in mel frames, from `_retrieve_segment`),
    "avg_logprob" (`_retrieve_avg_logprobs` on the window's scores and ids, EOS included), "compression_ratio" (`_retrieve_compression_ratio`),
    "no_speech_prob" (WhisperNoSpeechDetection's), "temperature" (the try that stayed): read where
    `_need_fallback` computes them. Thresholds that never fire make it compute them all; greedy, temperature 0."""
    from transformers.models.whisper import generation_whisper as gw

    mixin = gw.WhisperGenerationMixin
    need_fallback, retrieve_segment = mixin._need_fallback, mixin._retrieve_segment
    # Restored as found: _retrieve_segment is a staticmethod, and the plain function read off the class would
    # come back as a method (every later generate then fails).
    saved = {name: inspect.getattr_static(mixin, name) for name in ("_need_fallback", "_retrieve_segment")}
    measured, offsets = [], []  # (the window's outputs, its measures) per try; (outputs, seek) per segment cut

    def measure(self, seek_sequence, seek_outputs, index, logits_processor, config, vocab_size, temperature):
        no_speech = gw._get_attr_from_logit_processors(logits_processor, gw.WhisperNoSpeechDetection, "no_speech_prob")
        measured.append((seek_outputs[index], dict(
            temperature=temperature, compression_ratio=mixin._retrieve_compression_ratio(seek_sequence, vocab_size),
            avg_logprob=float(mixin._retrieve_avg_logprobs(seek_outputs[index]["scores"], seek_sequence, temperature)),
            no_speech_prob=float(no_speech[index]))))
        return need_fallback(self, seek_sequence, seek_outputs, index, logits_processor, config, vocab_size,
                             temperature)

    def cut(**kwargs):  # generate calls it by keywords
        offset = kwargs["time_offset"][kwargs["prev_idx"]]
        offsets.append((kwargs["seek_outputs"][kwargs["idx"]], round(float(offset) / 0.01)))
        return retrieve_segment(**kwargs)

    mixin._need_fallback, mixin._retrieve_segment = measure, staticmethod(cut)
    try:
        with torch.no_grad():
            out = model.generate(torch.from_numpy(features[None]), return_segments=True, return_timestamps=True,
                                 temperature=(0.0,), logprob_threshold=-1e9, no_speech_threshold=1.0, **kwargs)
    finally:
        for name, value in saved.items():
            setattr(mixin, name, value)
    segments = []
    for segment in out["segments"][0]:
        result = segment["result"]
        seek = next(s for r, s in offsets if r is result)
        measures = [m for r, m in measured if r is result][-1]
        segments.append({"seek": seek, "start": float(segment["start"]), "end": float(segment["end"]),
                         "tokens": segment["tokens"].tolist(), **measures})
    return out, segments
