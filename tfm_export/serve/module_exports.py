"""What a server makes of the exports of a user's own module (export.module_export, runtime.states.nocache).

A module export with a decoder (`decoder_nocache.onnx`: no KV cache, the whole prefix every step) is
served with request-level batching (serve.batcher.RequestBatcher): requests that come within
--window-ms are decoded together by `generate_ids` (greedy) or `generate` (beam search, sampling), i.e.
through the one decode driver on runtime.states.nocache's state, so a served answer is the direct call's.
In-flight batching is not offered: its rows are the static KV-cache rows of decoder_static.onnx, which
such a decoder has no counterpart of (a row joining mid-batch would need its own prefix length).

An encoder-only export has nothing to decode: the server refuses it at startup with one line that
points at `tfm-export run`.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..manifest import Manifest, load_manifest
from ..runtime.states.nocache import GRAPH_NAME, is_module_export

NATIVE, NOCACHE, ENCODER_ONLY = "native", "nocache", "encoder-only"


def export_kind(manifest: Manifest) -> str:
    """native (the one model config's cached decoder), nocache (a module export's decoder without a
    cache) or encoder-only (a module export without a decoder)."""
    if not is_module_export(manifest):
        return NATIVE
    return NOCACHE if GRAPH_NAME in manifest.graphs else ENCODER_ONLY


def folder_kind(folder: str) -> str:
    return export_kind(load_manifest(Path(folder), verify_hashes=False))


# (export kind, batching asked) -> the refusal, {folder} filled in; anything not here is served.
REFUSALS = {
    **{(ENCODER_ONLY, batching): "{folder} is an encoder-only export (no decoder): the server decodes, and "
                                 "there is nothing to decode; run it with `tfm-export run {folder} --ids ...` "
                                 "or open_export(FOLDER).run(ids)"
       for batching in ("auto", "inflight", "request", "single")},
    (NOCACHE, "inflight"): "{folder} has a decoder without a cache (decoder_nocache.onnx, a module export): "
                           "in-flight batching needs the cache rows of decoder_static.onnx; serve it with "
                           "{{batching}} auto or request (request-level batching)",
}

# export kind -> what `tfm-export serve` says when --batching auto picks request-level batching
AUTO_REQUEST_NOTES = {
    NATIVE: "{folder} has no decoder_static.onnx: serving with request-level batching; for in-flight batching "
            "re-export with --static-slots N (the most tokens a row generates)",
    NOCACHE: "{folder} has a decoder without a cache (decoder_nocache.onnx): serving with request-level "
             "batching (requests within --window-ms decoded together, each step over the whole prefix)",
}


def check_servable(folder: str, batching: str) -> None:
    """InputError (one line, naming the fix) when this export cannot be served with `batching`."""
    refusal = REFUSALS.get((folder_kind(folder), batching))
    if refusal is not None:
        named = {"batching": None} if "{{batching}}" in refusal else None  # rendered as the caller spells it
        raise InputError(refusal.format(folder=folder), options=named)


# ... and for a Whisper export (serve.windows needs the static decoder's rows for its windows)
SPEECH_REQUEST_NOTE = ("{folder} has no decoder_static.onnx: each window decodes alone on its recording's worker; "
                       "for in-flight batching of windows re-export with --static-slots {slots} (this model's "
                       "max_target_positions: a window's prompt and tokens)")


def auto_request_note(folder: str, speech: bool = False) -> str:
    manifest = load_manifest(Path(folder), verify_hashes=False)
    if speech:
        return SPEECH_REQUEST_NOTE.format(folder=folder, slots=manifest.config.max_len)
    return AUTO_REQUEST_NOTES[export_kind(manifest)].format(folder=folder)
