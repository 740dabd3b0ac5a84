"""Load any supported checkpoint as a tfm_export Checkpoint.

The contract (see `base.Importer`): each source format is one importer with a `name` (its
--layout value), `reads` ("file" or "folder"), `detect(source) -> bool` and
`load(source, options) -> Checkpoint`. `IMPORTERS` is the one table: `load_any` walks it in order
and takes the first importer whose `detect` accepts the source, or the one `--layout` names.
Every importer then runs through the same pipeline, `base.run`: load -> validate -> Checkpoint,
where validate is the shared final check (`model.checkpoint.check_checkpoint`): the weights fit
the config exactly (no missing, unexpected or mis-shaped names) and none is NaN or infinite.

A `Source` reads a file once, whichever importer asks (weights_only, or full unpickling of a code
pickle with --trust-pickle). Converters map the other framework's names onto ours with
`common.KeyMap`, which also proves that every source weight was used.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, ConfigError, shorten
from ..model.checkpoint import Checkpoint
from ..manifest import is_export_folder
from . import nn_transformer, speech_tutorial, tutorial
from .base import OWN_ARCHITECTURE, Importer, StateDictImporter, recognised, run
from .hf import HFImporter
from .native import NativeImporter
from .source import Source

log = logging.getLogger(__name__)

# Every source format, in detection order.
IMPORTERS: dict[str, Importer] = {importer.name: importer for importer in (
    NativeImporter(), StateDictImporter("tutorial", tutorial), StateDictImporter("nn_transformer", nn_transformer),
    # the speech tutorial's frames are 80 Kaldi filterbank bins (its fbank_dim): declared so, transcribe reads audio
    StateDictImporter("speech_tutorial", speech_tutorial, frontend="kaldi-fbank"), HFImporter())}
IMPORTERS["marian"] = IMPORTERS["hf"]  # the name of the folder layout before the other families came
LAYOUTS = tuple(IMPORTERS)
# Options that the weights of other layouts cannot tell (keys of load_any's `options`).
IMPORT_OPTIONS = ("heads", "src_pad_id", "tgt_pad_id", "bos_id", "eos_id", "norm_first", "activation", "max_len",
                  "frontend", "fbank")
# Key signatures we recognise but cannot convert -> why, and what to do instead.
RECOGNISED_UNSUPPORTED = {
    "encoder_layers.0.self_attn.q_proj.weight":
        "a bare state_dict of a tfm-export model without its config; pass {config} "
        "(the model's TransformerConfig as JSON)",
    "encoder.transformer_layers.0.attention.W_q.weight":
        "the W_q/W_k/W_v variant of the from-scratch tutorial, which is not supported: as published, its "
        "masked_fill(mask == 0, -1e-20) sets masked scores to about 0 instead of excluding them, so its "
        "decoder sees future tokens and no cached decoder can match it",
}


def load_any(path: str | os.PathLike, layout: str | None = None, trust_pickle: bool = False,
             options: dict[str, Any] | None = None) -> Checkpoint:
    """Read `path` (a checkpoint file or a model folder) of any supported layout.

    `layout`: one of LAYOUTS; default: detected (our format, a folder's config.json, a state_dict's
    key names). `trust_pickle`: allow unpickling a whole module (runs code from the file).
    `options`: what weights cannot tell, keyed like the CLI options: heads, src_pad_id, tgt_pad_id,
    bos_id, eos_id, norm_first, activation, max_len, and for a frames model frontend (importers.frontend:
    kaldi-fbank or none) and fbank (a dict of filterbank.Filterbank fields) (and config, a TransformerConfig
    dict, for a bare state_dict of our own model); None values count as not given. `Checkpoint.meta` records
    the layout, the options given and what was detected.
    """
    source, options = Source(Path(path), trust_pickle), dict(options or {})
    if layout is not None and layout not in IMPORTERS:
        raise ConfigError(f"unknown layout {layout!r}; supported: {', '.join(LAYOUTS)}")
    importer = IMPORTERS[layout] if layout is not None else _detect(source, options)
    return run(importer, source, options, name=layout)


def _detect(source: Source, options: dict[str, Any]) -> Importer:
    """The first importer of the path's kind (file or folder) that recognises it."""
    folder = source.path.is_dir()
    if "config" in options and not folder:  # --config describes a bare state_dict of our own model
        return IMPORTERS["tfm-export"]
    for importer in IMPORTERS.values():
        if (importer.reads == "folder") == folder and importer.detect(source):
            log.info("detected layout %s", importer.name)
            return importer
    if folder and is_export_folder(source.path):  # an export folder given as the model
        raise CheckpointError(f"{source.path} is an export already; pass the checkpoint or model folder it was "
                              f"exported from (`tfm-export validate {source.path}` checks it)")
    if folder:
        raise CheckpointError(f"{source.path} has no config.json; pass a checkpoint file or a Hugging Face "
                              f"model folder")
    for signature, reason in RECOGNISED_UNSUPPORTED.items():
        if signature in source.state:
            raise CheckpointError(f"{source.path} is {reason}", options={"config": None} if "{config}" in reason else None)
    converters = [i.name for i in IMPORTERS.values() if isinstance(i, StateDictImporter)]
    what = f"cannot tell the layout of {source.path} from its keys ({shorten(sorted(source.state), 3)})"
    looks = recognised(source.data, source.state)
    if looks is not None:  # no layout can work: point at the path that will
        raise CheckpointError(f"{what}: it is {looks}; {OWN_ARCHITECTURE}")
    raise CheckpointError(f"{what}; pass {{layout}}, one of {', '.join(converters)}, when it is one of them; "
                          f"else {OWN_ARCHITECTURE}", options={"layout": None})


def load_model(path: str | os.PathLike, layout: str | None = None, config_file: str | os.PathLike | None = None,
               trust_pickle: bool = False, origin: dict[str, Any] | None = None, **options: Any) -> Checkpoint:
    """`load_any` with its options as keywords (None: not given) and a TransformerConfig JSON file for a
    bare state_dict of our own model (`config_file`): what every command that loads a model calls. `origin`:
    where `path` came from (importers.hub.resolve_model), kept in `meta["origin"]` for the manifest's source."""
    from ..files import read_json_object

    given = {k: v for k, v in options.items() if k in IMPORT_OPTIONS and v is not None}
    if config_file is not None:
        given["config"] = read_json_object(Path(config_file), ConfigError, "pass the model's config JSON file",
                                           "write the model's TransformerConfig as a JSON object")
    checkpoint = load_any(path, layout=layout, trust_pickle=trust_pickle, options=given)
    if origin:
        checkpoint.meta["origin"] = dict(origin)
    return checkpoint
