"""What computes a frames model's frames from audio: the manifest's filterbank, declared at import (issue #39).

The weights tell the frames' width (n_feats) but not how they were made, so the declaration comes from the
options: `frontend` (a key of FRONTENDS; default: the importer's, kaldi-fbank for the speech tutorial's
layout, none for the others) and `fbank`, a dict of tfm_export.filterbank.Filterbank fields over its
defaults (torchaudio.compliance.kaldi.fbank's). It lands in Checkpoint.meta["filterbank"], and from there
in the manifest. "none": the caller computes the frames (generate --features, generate_ids).
"""

from __future__ import annotations

from typing import Any, Callable

from ..config import TransformerConfig
from ..errors import ConfigError
from ..filterbank import Filterbank
from ..model.checkpoint import Checkpoint


def _kaldi_fbank(config: TransformerConfig, fields: dict[str, Any]) -> Filterbank:
    # as many mel bins as the model reads values per frame, less the energy column when there is one
    bins = config.n_feats - bool(fields.get("use_energy", False))
    return Filterbank.from_dict({"num_mel_bins": bins, **fields})


# --frontend's choices -> the declaration for a frames model's config and the --fbank fields (None: no
# filterbank, the frames come from the caller).
FRONTENDS: dict[str, Callable[[TransformerConfig, dict[str, Any]], Filterbank | None]] = {
    "kaldi-fbank": _kaldi_fbank, "none": lambda config, fields: None}


def declare_frontend(checkpoint: Checkpoint, options: dict[str, Any], default: str) -> Checkpoint:
    """`checkpoint` with meta["filterbank"] (a Filterbank's dict) for a frames model whose front end computes
    its frames from audio; the options of a model that reads no frames, or that contradict its n_feats,
    are one ConfigError."""
    given, fields = options.get("frontend"), dict(options.get("fbank") or {})
    config = checkpoint.config
    if config.source != "frames":
        if given is not None or fields:
            raise ConfigError(f"{{frontend}} and {{fbank}} declare how a frames model's frames are computed from "
                              f"audio; this model's encoder reads {config.source_kind.reads}, not frames: drop them",
                              options={"frontend": None, "fbank": None})
        return checkpoint
    frontend = given or default
    if frontend not in FRONTENDS:
        raise ConfigError(f"unknown front end {frontend!r}; one of {', '.join(FRONTENDS)}")
    if frontend == "none" and fields:
        raise ConfigError("{fbank} sets filterbank fields, but {frontend} declares no filterbank; drop one of them",
                          options={"fbank": None, "frontend": frontend})
    filterbank = FRONTENDS[frontend](config, fields)
    if filterbank is not None and filterbank.n_feats != config.n_feats:
        raise ConfigError(f"the filterbank gives {filterbank.n_feats} values per frame (num_mel_bins "
                          f"{filterbank.num_mel_bins}{' + energy' if filterbank.use_energy else ''}) but the model "
                          f"reads frames of {config.n_feats} (its front end's input); fix {{fbank}}",
                          options={"fbank": None})
    if filterbank is not None:
        checkpoint.meta["filterbank"] = filterbank.to_dict()
    return checkpoint
