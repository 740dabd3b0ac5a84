"""What a server runs: its settings, the engine opened from them, request checks, and uvicorn.

Kept apart from serve.app so Ray Serve replicas and benchmarks build the same engine the same way.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..errors import InputError
from ..runtime.options.generation import GenerationConfig
from .batcher import ENGINES, EngineConfig, RequestBatcher
from .windows import WindowBatcher
from .web import is_loopback

log = logging.getLogger(__name__)

API_KEY_ENV = "TFM_EXPORT_API_KEY"

# A Whisper export's engines: its windows in flight (serve.windows); request-level keeps the server's
# engine for /healthz while each window decodes on its recording's worker (serve.transcriber).
SPEECH_ENGINES = {"inflight": WindowBatcher, "request": RequestBatcher}


class LimitError(InputError):
    """A request over one of the server's size limits (HTTP 413): sources per request (max_texts),
    tokens per source (max_len, max_src_len), decoder rows per request (max_rows); `options` names
    the limit. Any other value out of range is an InputError naming the field (HTTP 422)."""


# batching -> (engine, whether it needs the static-cache decoder); "single" is one request at a time;
# "auto" is resolved by resolve_batching before anything opens the export.
BATCHING = {"inflight": ("inflight", True), "request": ("request", False), "single": ("request", False)}
BATCHING_CHOICES = ("auto", *BATCHING)


@dataclass(frozen=True)
class ServeSettings:
    """One server's model, batching and limits (plain data: Ray ships it to every replica)."""

    folder: str  # the export folder
    device: str = "cpu"  # cpu, cuda, cuda:N or auto
    # auto (in-flight when the export has decoder_static.onnx, else request) | inflight | request | single
    batching: str = "auto"
    engine: EngineConfig = field(default_factory=EngineConfig)
    max_texts: int = 32  # sources per request; more is 413
    threads: int | None = None  # ORT intra-op threads (None: ORT's default)
    spin: bool = False  # idle ORT threads spin between ops (off: sessions run by turns, see cli.serve_cmd)
    api_key: str | None = None  # when set, every request but /healthz, /languages and the docs needs it
    cors_origins: tuple[str, ...] = ()  # web pages' origins allowed to call (serve.cors); none: no CORS
    # Cache rows one source may take: num_beams, sampled num_return_sequences (LibreTranslate's
    # alternatives + 1); more is 422 (the schema's maximum for those fields).
    max_beams: int = 8
    # Decoder rows one request may take, all its sources together: sources x rows per source (the
    # larger of num_beams and num_return_sequences). Each row is a row of decoder cache and a share of
    # every step, so this bounds one request's memory and time; more is 413. The default takes
    # max_texts sources at a Marian export's default 4 beams.
    max_rows: int = 128
    # Whisper exports (serve.audio): the largest upload (OpenAI's limit), the longest recording, the
    # recordings transcribed at once (each on a worker thread: it reads the file, computes features, encodes
    # each window and, without in-flight windows, decodes it), where uploads spool.
    max_upload_mb: float = 25.0
    max_audio_seconds: float = 3600.0
    # None: engine.max_batch with in-flight windows (a worker mostly waits for its window's rows), else 2
    audio_workers: int | None = None
    upload_dir: str | None = None  # None: the system's temporary folder

    def __post_init__(self) -> None:
        if self.batching not in BATCHING_CHOICES:
            raise InputError(f"unknown {{batching}}; use one of {', '.join(BATCHING_CHOICES)}",
                             options={"batching": self.batching})
        for name in ("max_beams", "max_rows", "audio_workers"):
            if (getattr(self, name) or 1) < 1:
                raise InputError(f"{{{name}}} must be at least 1, got {getattr(self, name)}", options={name: None})
        for name in ("max_upload_mb", "max_audio_seconds"):
            if not getattr(self, name) > 0:
                raise InputError(f"{{{name}}} must be above 0, got {getattr(self, name)}", options={name: None})


def has_static_decoder(folder: str) -> bool:
    """The export has decoder_static.onnx (made with --cuda-graph or --static-slots): in-flight batching."""
    from ..manifest import load_manifest
    from ..runtime.states.static import GRAPH_NAME

    return GRAPH_NAME in load_manifest(Path(folder), verify_hashes=False).graphs


def is_speech(folder: str) -> bool:
    """The export reads audio features (Whisper): its server runs serve.audio, not the text routes."""
    from ..manifest import load_manifest

    return load_manifest(Path(folder), verify_hashes=False).features is not None


def resolve_batching(settings: ServeSettings) -> ServeSettings:
    """`auto` made concrete: in-flight when the export supports it (text jobs, or a Whisper export's windows:
    serve.windows), else request-level batching (a Whisper export's windows then decode on their workers)."""
    if settings.batching != "auto":
        return settings
    return dataclasses.replace(settings, batching="inflight" if has_static_decoder(settings.folder) else "request")


def audio_workers(settings: ServeSettings) -> int:
    """Recordings transcribed at once: --audio-workers, by default one per in-flight row, else 2."""
    if settings.audio_workers is not None:
        return settings.audio_workers
    return settings.engine.max_batch if resolve_batching(settings).batching == "inflight" else 2


def check_batching(settings: ServeSettings) -> ServeSettings:
    """`settings`, when the export has what its batching needs (InputError naming the fix otherwise)."""
    from ..runtime.states.static import GRAPH_NAME
    from .module_exports import check_servable

    check_servable(settings.folder, settings.batching)  # a module export: encoder-only, no in-flight rows
    if BATCHING[settings.batching][1] and not has_static_decoder(settings.folder):
        raise InputError(f"{settings.folder} has no {GRAPH_NAME}.onnx, which {{batching}} needs; re-export "
                         f"with --static-slots N (or --cuda-graph), or leave --batching at auto to serve it with "
                         f"request-level batching", options={"batching": "inflight"})
    return settings


def open_engine(settings: ServeSettings) -> Any:
    """Open the export (with its static-cache decoder for in-flight batching) and build the engine."""
    from ..runtime import RuntimeOptions, open_export

    settings = check_batching(resolve_batching(settings))
    kind, needs_static = BATCHING[settings.batching]
    options = RuntimeOptions(intra_op_threads=settings.threads, spin_wait=settings.spin, cuda_graph=needs_static,
                             static_search=not needs_static)
    model = open_export(settings.folder, settings.device, options)
    default_beams = max(model.generation.num_beams, model.generation.num_return_sequences)
    for name in ("max_beams", "max_rows"):  # else every request that keeps the defaults would be refused
        if default_beams > getattr(settings, name):
            raise InputError(f"{settings.folder} decodes with {default_beams} beams by default, more than "
                             f"{{{name}}} {getattr(settings, name)}; raise it", options={name: None})
    config = settings.engine
    if settings.batching == "single":
        config = dataclasses.replace(config, max_batch=1, window_ms=0)
    return (SPEECH_ENGINES if model.manifest.features is not None else ENGINES)[kind](model, config)


@dataclass(frozen=True)
class Limits:
    """What one server accepts from one request, given its model: what prepare_sources enforces and
    the OpenAPI schema declares (serve.contract)."""

    max_texts: int  # sources per request
    src_len: int  # tokens per source
    src_limit: str  # the setting that sets src_len: max_src_len or max_len
    src_vocab: int  # source ids are 0 .. src_vocab - 1
    max_new_tokens: int  # tokens per source (the static decoder's slots when it has fewer than max_len)
    max_beams: int  # rows per source: the server's max_beams, within what beam search can pick from
    max_rows: int  # decoder rows per request: sources x rows per source


def limits(model: Any, settings: ServeSettings) -> Limits:
    cfg = model.config
    cap = settings.engine.max_src_len  # the server's own limit, when tighter than the model's
    src_len, src_limit = (cap, "max_src_len") if cap and cap < cfg.max_len else (cfg.max_len, "max_len")
    # Beam search picks 2 x num_beams candidates per row from the vocabulary (transformers' rule).
    beams = min(settings.max_beams, max(1, cfg.tgt_vocab_size // 2))
    return Limits(settings.max_texts, src_len, src_limit, cfg.src_vocab_size,
                  model.steps_for(GenerationConfig()), beams, settings.max_rows)


def rows_per_source(config: GenerationConfig) -> int:
    """Decoder rows one source takes: a beam search's beams, or the sequences sampled."""
    return max(config.num_beams, config.num_return_sequences)


def prepare_sources(model: Any, settings: ServeSettings, texts: Sequence[str] | None,
                    ids: Sequence[Sequence[int]] | None, max_new_tokens: int | None,
                    options: Mapping[str, Any] | None = None, source_lang: str | None = None,
                    target_lang: str | None = None) -> tuple[list[list[int]], int, GenerationConfig]:
    """Checked sources, their token budget and decoding settings (`options`: GenerationConfig fields
    over the export's defaults; `source_lang`/`target_lang`: codes of the tokenizer's languages, see
    runtime.api.encode); InputError naming the option or valid codes otherwise, LimitError naming the
    size limit. An empty text (one that encodes as "" does) has the source [], nothing to decode:
    serve.translation answers it with an empty translation at once."""
    from ..runtime.sources import source_batch

    if (texts is None) == (ids is None):
        raise InputError("give exactly one of {texts} or ids", options={"texts": None})
    given = texts if texts is not None else ids
    if not given:
        raise InputError("{texts} is empty; send at least one source", options={"texts": None})
    bounds = limits(model, settings)
    if len(given) > bounds.max_texts:
        raise LimitError(f"{len(given)} sources exceed the limit of {bounds.max_texts} per request "
                         f"({{max_texts}}); split the request", options={"max_texts": None})
    if source_lang is not None or target_lang is not None:
        check_codes(model, source_lang, target_lang)
    # ids are used as given: their language tokens are the caller's (target_lang still forces the
    # first generated token on models that start the target with it)
    if texts is not None:
        if not model.manifest.tokenizer:  # the runtime's own message names --ids, which a request has not
            raise InputError("this export has no tokenizer, so it takes no {texts}; send token ids instead: "
                             '"ids": [[...], ...] (POST /v1/translate)', options={"texts": None})
        with naming("texts"):
            sources = encode_texts(model, texts, source_lang, target_lang)
    else:
        sources = [list(source) for source in ids]
    for n, source in enumerate(sources, 1):
        if texts is not None and not source:  # an empty text: nothing to check or decode
            continue
        if len(source) > bounds.src_len:
            raise LimitError(f"source {n} has {len(source)} tokens, more than the {{{bounds.src_limit}}} of "
                             f"{bounds.src_len}; shorten or split it (\"split_sentences\": true translates it sentence by "
                             f"sentence)", options={bounds.src_limit: None})
        with naming("ids" if ids is not None else "texts"):
            source_batch([source], model.config)  # empty, out-of-vocabulary or non-int64 ids: InputError
    options = {**model.language_options(target_lang), **dict(options or {})}
    config = model.generation_config(**options, max_new_tokens=max_new_tokens)
    check_beams(config, bounds, settings, model.config.tgt_vocab_size)
    rows = len(sources) * rows_per_source(config)
    if rows > bounds.max_rows:
        raise LimitError(f"{len(sources)} sources x {rows_per_source(config)} rows each (num_beams, "
                         f"num_return_sequences) = {rows} decoder rows exceed the limit of {bounds.max_rows} per "
                         f"request ({{max_rows}}, a server setting: tfm-export serve --max-rows); send fewer "
                         f"sources or beams", options={"max_rows": None})
    with naming("max_new_tokens"):
        steps = token_budget(model, config, max_new_tokens)
    return sources, steps, config


@contextmanager
def naming(field: str) -> Iterator[None]:
    """The runtime's InputErrors that name no option, naming the request `field` they are about (the
    422's `field`)."""
    try:
        yield
    except InputError as exc:
        if exc.options or isinstance(exc, LimitError):
            raise
        raise InputError(str(exc), options={field: None}) from None


def encode_texts(model: Any, texts: Sequence[str], source_lang: str | None,
                 target_lang: str | None) -> list[list[int]]:
    """Each text's source ids; [] for an empty one: "", or blanks that encode as "" does (a
    tokenizer that drops them). A model's translation of nothing but EOS (and language tokens) is
    whatever its decoder makes of no input, up to max_new_tokens of it: an empty text is an empty
    translation instead, without decoding."""
    sources, nothing = [], None
    for text in texts:
        source = model.encode(text, source_lang, target_lang)  # a text it cannot encode: InputError
        if not text.strip():
            nothing = nothing if nothing is not None else model.encode("", source_lang, target_lang)
            source = [] if source == nothing else source
        sources.append(source)
    return sources


def token_budget(model: Any, config: GenerationConfig, asked: int | None) -> int:
    """Tokens per job: what the request asks (InputError when it does not fit a cache row), else the
    export's default capped to a row. Every job decodes within one row's budget: a static decoder may
    hold fewer slots than max_len (--static-slots), and the in-flight engine decodes beam groups in
    those rows too; a folder's default (max_length 512) is a ceiling, not a request to refuse."""
    if asked is not None:
        return model.steps_for(GenerationConfig(max_new_tokens=asked))
    room = model.steps_for(GenerationConfig())
    return min(config.max_new_tokens or room, room)


def check_codes(model: Any, source_lang: str | None, target_lang: str | None) -> None:
    """Language codes the export's tokenizer knows (InputError naming the valid ones)."""
    if not model.manifest.tokenizer:
        raise InputError("this export has no tokenizer, hence no language codes; drop {source_lang} and target_lang",
                         options={"source_lang": source_lang})
    languages = model.tokenizer.languages
    languages.source_token(source_lang), languages.target_token(target_lang)


def check_beams(config: GenerationConfig, bounds: Limits, settings: ServeSettings, vocab: int) -> None:
    """Rows per source within max_beams, and beams the vocabulary can feed: 422s naming the field
    (the schema's maximum for num_beams and num_return_sequences; serve.contract)."""
    for name in ("num_beams", "num_return_sequences"):
        value = getattr(config, name)
        if value > settings.max_beams:
            raise InputError(f"{{{name}}} exceeds this server's limit of {settings.max_beams} rows per "
                             f"source (max_beams, a server setting: tfm-export serve --max-beams)",
                             options={name: value})
    if config.num_beams > bounds.max_beams:
        raise InputError(f"{{num_beams}} is too many for a vocabulary of {vocab} ids: beam "
                         f"search picks 2 x num_beams candidates per step; use at most {bounds.max_beams}",
                         options={"num_beams": config.num_beams})


def check_bind(host: str, api_key: str | None) -> None:
    """Loopback is open; any other address needs an API key (other machines can reach it)."""
    if not is_loopback(host) and not api_key:
        raise InputError(f"binding {host} makes the server reachable from other machines; set {{api_key}} "
                         f"(or {API_KEY_ENV}) or bind 127.0.0.1", options={"api_key": None})
