"""Whisper's decoding rules as transformers' WhisperForConditionalGeneration.generate applies them. Torch-free.

- `WhisperSettings`: the Whisper keys of a folder's generation_config.json, typed (`from_dict`/`to_dict`
  for a manifest, `from_folder`).
- The prompt (`init_tokens`, `decoder_prompt`, `prompt_prefix`): `[<|startofprev|> prompt...]`,
  `<|startoftranscript|>`, the language, the task, `<|notimestamps|>` unless timestamps are asked, built as
  transformers' `_retrieve_init_tokens` builds them (its deprecated `forced_decoder_ids` included);
  `language_id` accepts "de", "german", "<|de|>" as transformers does.

What Whisper's generate does to the logits (its processors, language detection, no-speech probability) is
in runtime.speech.rules; the strategies that drive both through runtime.decode.loop are in
runtime.speech.search; segments and the long-form driver in runtime.speech.longform.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...errors import InputError, ManifestError, shorten
from ...files import read_json_object

TASKS = ("translate", "transcribe")  # transformers' TASK_IDS

# transformers' tokenization_whisper.LANGUAGES (code -> name) and its aliases (TO_LANGUAGE_CODE).
LANGUAGES = dict(zip(
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi "
    "ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd "
    "gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue".split(),
    ["english", "chinese", "german", "spanish", "russian", "korean", "french", "japanese", "portuguese", "turkish",
     "polish", "catalan", "dutch", "arabic", "swedish", "italian", "indonesian", "hindi", "finnish", "vietnamese",
     "hebrew", "ukrainian", "greek", "malay", "czech", "romanian", "danish", "hungarian", "tamil", "norwegian",
     "thai", "urdu", "croatian", "bulgarian", "lithuanian", "latin", "maori", "malayalam", "welsh", "slovak",
     "telugu", "persian", "latvian", "bengali", "serbian", "azerbaijani", "slovenian", "kannada", "estonian",
     "macedonian", "breton", "basque", "icelandic", "armenian", "nepali", "mongolian", "bosnian", "kazakh",
     "albanian", "swahili", "galician", "marathi", "punjabi", "sinhala", "khmer", "shona", "yoruba", "somali",
     "afrikaans", "occitan", "georgian", "belarusian", "tajik", "sindhi", "gujarati", "amharic", "yiddish", "lao",
     "uzbek", "faroese", "haitian creole", "pashto", "turkmen", "nynorsk", "maltese", "sanskrit", "luxembourgish",
     "myanmar", "tibetan", "tagalog", "malagasy", "assamese", "tatar", "hawaiian", "lingala", "hausa", "bashkir",
     "javanese", "sundanese", "cantonese"]))
TO_LANGUAGE_CODE = {**{name: code for code, name in LANGUAGES.items()},
                    "burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht", "letzeburgesch": "lb",
                    "pushto": "ps", "panjabi": "pa", "moldavian": "ro", "moldovan": "ro", "sinhalese": "si",
                    "castilian": "es", "mandarin": "zh"}


@dataclass(frozen=True)
class WhisperSettings:
    """Whisper's decoding settings (generation_config.json keys, transformers' names). Mappings stay dicts:
    equal settings compare equal, but the record is not hashable."""

    decoder_start_token_id: int  # <|startoftranscript|>: every decoder prompt's start
    eos_token_id: int  # <|endoftext|>; the timestamp rule bans the ids below it after a lone timestamp
    pad_token_id: int | None = None  # what finished rows feed (Whisper: the EOS id)
    no_timestamps_token_id: int | None = None  # <|notimestamps|>; the timestamp ids are the ids above it
    lang_to_id: dict[str, int] | None = None  # "<|de|>" -> id (multilingual models; None: English-only)
    task_to_id: dict[str, int] | None = None  # "transcribe"/"translate" -> id
    is_multilingual: bool | None = None  # False: no language or task may be asked for (None: not said)
    suppress_tokens: tuple[int, ...] = ()  # banned at every step (SuppressTokensLogitsProcessor)
    begin_suppress_tokens: tuple[int, ...] = ()  # banned at the first generated position (space, EOS)
    max_initial_timestamp_index: int | None = None  # the first timestamp is at most this many steps (x 0.02 s)
    prev_sot_token_id: int | None = None  # <|startofprev|>: starts an initial prompt or the previous text
    # Deprecated prompt pattern [[position, id|None], ...]: used when neither language nor task is given.
    forced_decoder_ids: tuple[tuple[int, int | None], ...] | None = None
    alignment_heads: tuple[tuple[int, int], ...] = ()  # (layer, head) pairs for token timestamps (kept, unused)
    max_length: int | None = None  # most decoder positions, prompt included (Whisper: 448)
    return_timestamps: bool = False  # the folder's default for predicting timestamps
    # Long-form defaults (None: off): temperature fallback and silence skipping (runtime.speech.longform).
    compression_ratio_threshold: float | None = None
    logprob_threshold: float | None = None
    no_speech_threshold: float | None = None
    condition_on_prev_tokens: bool | None = None

    @property
    def timestamp_begin(self) -> int:
        """The id of <|0.00|>: every id from here on is a timestamp (vocab + 1 when the model has none)."""
        return self.no_timestamps_token_id + 1 if self.no_timestamps_token_id is not None else 1 << 62

    @property
    def no_speech_token_id(self) -> int | None:
        """<|nospeech|> (<|nocaptions|>): transformers' no_timestamps_token_id - 1."""
        return None if self.no_timestamps_token_id is None else self.no_timestamps_token_id - 1

    def languages(self) -> list[str]:
        """The model's language tokens ("<|en|>", ...), in id order."""
        return sorted(self.lang_to_id or {}, key=lambda k: (self.lang_to_id or {})[k])

    def language_codes(self) -> list[str]:
        """The model's language codes ("en", ...), in id order: what `transcribe --language` takes; [] for an
        English-only model."""
        return [token.strip("<|>") for token in self.languages()]

    def translates(self) -> bool:
        """Whether the model translates speech into English (a multilingual model with the translate task)."""
        return bool(self.lang_to_id) and "translate" in (self.task_to_id or {})

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("suppress_tokens", "begin_suppress_tokens"):
            data[key] = list(data[key])
        for key in ("forced_decoder_ids", "alignment_heads"):
            data[key] = None if data[key] is None else [list(pair) for pair in data[key]]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "WhisperSettings":
        """From generation_config.json or `to_dict` (unknown keys ignored); a ManifestError without the
        start and EOS ids."""
        missing = [k for k in ("decoder_start_token_id", "eos_token_id") if data.get(k) is None]
        if missing:
            raise ManifestError(f"Whisper generation settings lack {', '.join(missing)}; "
                                "use the generation_config.json of a Whisper folder")
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known and v is not None}
        eos = values["eos_token_id"]
        values["eos_token_id"] = int(eos[0] if isinstance(eos, (list, tuple)) else eos)
        for key in ("suppress_tokens", "begin_suppress_tokens"):
            values[key] = tuple(int(t) for t in values.get(key) or ())
        for key in ("forced_decoder_ids", "alignment_heads"):
            if key in values:
                values[key] = tuple(tuple(pair) for pair in values[key])
        for key in ("lang_to_id", "task_to_id"):
            if key in values:
                values[key] = {str(k): int(v) for k, v in values[key].items()}
        return cls(**values)

    @classmethod
    def from_folder(cls, folder: str | Path) -> "WhisperSettings":
        path = Path(folder) / "generation_config.json"
        return cls.from_dict(read_json_object(path, ManifestError, "a Whisper folder has its generation settings there",
                                              "copy it again from the model's folder"))


# ---- the prompt -------------------------------------------------------------------------------------

def language_id(settings: WhisperSettings, language: str) -> int:
    """The token id of `language`: a code ("de"), a name or alias ("german"), or the token ("<|de|>")."""
    if not settings.lang_to_id:
        raise InputError("this Whisper model is English-only: it takes no {language}", options={"language": language})
    text = language.lower()
    token = (text if text in settings.lang_to_id else f"<|{TO_LANGUAGE_CODE[text]}|>" if text in TO_LANGUAGE_CODE
             else f"<|{text}|>" if text in LANGUAGES else None)
    if token is None or token not in settings.lang_to_id:
        codes = shorten(settings.language_codes(), 12)
        raise InputError(f"{{language}} is not a language of this Whisper model; its languages are {codes}, given "
                         'as a code ("de"), an English name ("german") or a token ("<|de|>")',
                         options={"language": language})
    return settings.lang_to_id[token]


def needs_detection(settings: WhisperSettings, language: str | None, task: str | None = None) -> bool:
    """Whether the prompt's language comes from `detect_language` (none given, the model has languages)."""
    if language is not None or not settings.lang_to_id:
        return False
    forced = _forced_tokens(settings) if task is None else []
    return len(forced) == 0 or forced[0] is None


def _forced_tokens(settings: WhisperSettings) -> list[int | None]:
    """The deprecated forced_decoder_ids after <|startoftranscript|> (positions 1, 2, ... in order)."""
    pairs, out = list(settings.forced_decoder_ids or ()), []
    if pairs and pairs[0][0] == 1:
        while pairs and pairs[0][0] == len(out) + 1:
            out.append(pairs.pop(0)[1])
        if pairs:
            raise InputError(f"forced_decoder_ids {list(settings.forced_decoder_ids or ())} do not follow Whisper's "
                             "prompt pattern (positions 1, 2, ...); fix generation_config.json")
    return out


def init_tokens(settings: WhisperSettings, language: str | None = None, task: str | None = None,
                timestamps: bool = False, detected: int | None = None) -> list[int]:
    """<|startoftranscript|>, language, task, <|notimestamps|> as transformers' `_retrieve_init_tokens`;
    `detected`: the language id of `detect_language` when `needs_detection` (else ignored)."""
    if settings.is_multilingual is False and (language is not None or task is not None):
        raise InputError("this Whisper model is English-only: it takes no {language} or {task}",
                         options={"language": language, "task": task})
    tokens: list[int | None] = [settings.decoder_start_token_id]
    if language is None and task is None:
        tokens += _forced_tokens(settings)
    lang = language_id(settings, language) if language is not None else None
    if lang is None and needs_detection(settings, language, task):
        if detected is None:
            raise InputError("no {language} was given: detect it first (runtime.speech.rules.detect_language)",
                             options={"language": None})
        lang = detected
    if lang is not None:
        tokens[1:2] = [lang]
    task_ids = list((settings.task_to_id or {}).values())
    if task is not None:
        if task not in TASKS or task not in (settings.task_to_id or {}):
            raise InputError(f"{{task}} must be one of {', '.join(TASKS)}", options={"task": task})
        task_id = settings.task_to_id[task]  # type: ignore[index]
        tokens = [task_id if t in task_ids else t for t in tokens + [task_id]]
    elif language is not None and settings.task_to_id and not any(t in task_ids for t in tokens):
        tokens.append(settings.task_to_id["transcribe"])
    nts = settings.no_timestamps_token_id
    if not timestamps and nts is not None and tokens[-1] != nts:
        tokens.append(nts)
    elif timestamps and tokens[-1] == nts:
        tokens.pop()
    return [t for t in tokens if t is not None]


def prompt_prefix(settings: WhisperSettings, text_ids: Sequence[int]) -> list[int]:
    """An initial prompt's ids as transformers' tokenizer `get_prompt_ids` gives them: <|startofprev|> first."""
    if settings.prev_sot_token_id is None:
        raise InputError("this Whisper model has no <|startofprev|> (prev_sot_token_id): it takes no {prompt_ids}",
                         options={"prompt_ids": None})
    ids = [int(t) for t in text_ids]
    return ids if ids[:1] == [settings.prev_sot_token_id] else [settings.prev_sot_token_id, *ids]


def decoder_prompt(init: Sequence[int], prompt_ids: Sequence[int] | None = None) -> list[int]:
    """The forced decoder input of a window: the initial prompt (`prompt_prefix`), then `init_tokens`."""
    return [*(prompt_ids or ()), *init]


def max_new_tokens(settings: WhisperSettings, prompt_len: int, requested: int | None = None,
                   max_target_positions: int = 448) -> int:
    """How many tokens a window may generate after a `prompt_len` prompt (transformers'
    `_set_max_new_tokens_and_length`): `requested` when it fits (an InputError when it does not), else up to
    the generation config's max_length counted past the first max_target_positions // 2 - 1 prompt ids."""
    if requested is not None:
        if requested + prompt_len > max_target_positions:
            raise InputError(f"a {prompt_len}-token decoder prompt and {{max_new_tokens}} exceed Whisper's "
                             f"{max_target_positions} positions; shorten the prompt or ask for fewer tokens",
                             options={"max_new_tokens": requested})
        return requested
    limit = settings.max_length if settings.max_length is not None else max_target_positions
    total = min(limit + min(max_target_positions // 2 - 1, prompt_len), max_target_positions)
    return max(total - prompt_len, 0)
