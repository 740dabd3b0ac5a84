"""The Ray Serve config file of `tfm-export serve --write-config`, and settings as plain data.

Ray-free, so writing a config does not need the `ray` extra on the machine that writes it.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..files import write_file_atomically
from .engine import ServeSettings

DEPLOYMENT = "Translator"
APP_NAME = "tfm-export"
IMPORT_PATH = "tfm_export.serve.ray_app:app_builder"  # in every config written here: marks it as ours


def settings_to_dict(settings: ServeSettings) -> dict[str, Any]:
    """Every field of `settings` as JSON-ready data (nested dataclasses as dicts)."""
    return dataclasses.asdict(settings)


def settings_from_dict(data: dict[str, Any]) -> ServeSettings:
    """settings_to_dict's inverse, also for the data after a JSON round trip (the config file, Ray's arguments):
    driven by ServeSettings' fields and their types, so a new field needs no code here. Left-out fields take
    their defaults; unknown ones are an InputError (a config written by another version)."""
    return _build(ServeSettings, data)


def _build(cls: type, data: dict[str, Any]) -> Any:
    if not isinstance(data, dict):
        raise InputError(f"{cls.__name__} takes a mapping of its fields, got {type(data).__name__}")
    hints, names = typing.get_type_hints(cls), [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise InputError(f"unknown {cls.__name__} field(s) {', '.join(unknown)} (known: {', '.join(names)}); "
                         f"write the config again with this version's `tfm-export serve --write-config`")
    return cls(**{name: _typed(hints[name], value) for name, value in data.items()})


def _typed(hint: Any, value: Any) -> Any:
    """`value` as a field of type `hint` holds it: JSON has lists where the frozen settings keep tuples, and
    dicts where they keep dataclasses."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None:
        return None
    if origin in (typing.Union, types.UnionType):  # the settings' unions are `X | None`
        kinds = [a for a in args if a is not type(None)]
        return _typed(kinds[0], value) if len(kinds) == 1 else value
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    if origin is tuple and isinstance(value, (list, tuple)):
        items = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        return tuple(_typed(item, v) for item, v in zip(items, value, strict=True))
    if origin is list and isinstance(value, (list, tuple)):
        return [_typed(args[0], v) for v in value]
    return value


CONFIG_TEMPLATE = """\
# Ray Serve config for tfm-export (`serve deploy {path}` on a running Ray cluster).
# Each replica runs its own engine over the export folder (batching "auto": in-flight when the export
# has decoder_static.onnx, else request-level), which every node must be able
# to read at `folder`; a Whisper export's replicas serve OpenAI's audio routes (the max_upload_mb,
# max_audio_seconds, audio_workers and upload_dir args; upload_dir, when set, must exist on every node).
# Edit num_replicas, or replace it with the autoscaling_config below.
proxy_location: EveryNode
http_options:
  host: {host}  # the address the Ray proxies bind; put authentication in front or set api_key
  port: {port}
applications:
  - name: {app}
    route_prefix: /
    import_path: {import_path}
    args: {args}
    deployments:
      - name: {deployment}
        num_replicas: {replicas}
        # autoscaling_config: {{min_replicas: 1, max_replicas: 8, target_ongoing_requests: 16}}
        ray_actor_options:
          num_cpus: 1  # the cores one replica's ONNX Runtime may use (see `threads` in args)
"""


def write_config(path: Path, settings: ServeSettings, replicas: int, host: str, port: int) -> None:
    """A Ray Serve config file (YAML; `args` is written as JSON, which YAML reads)."""
    args = json.dumps(settings_to_dict(settings))
    text = CONFIG_TEMPLATE.format(path=path.name, host=host, port=port, app=APP_NAME, args=args,
                                  deployment=DEPLOYMENT, replicas=replicas, import_path=IMPORT_PATH)
    write_file_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"),
                          ("a Ray Serve config tfm-export wrote", _ours))


def _ours(path: Path) -> bool:
    """A config `write_config` wrote (it names our app builder), so replacing it loses nothing else."""
    try:
        return IMPORT_PATH in path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
