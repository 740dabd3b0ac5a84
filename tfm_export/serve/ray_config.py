"""The Ray Serve config file of `tfm-export serve --write-config`, and settings as plain data.

Ray-free, so writing a config does not need the `ray` extra on the machine that writes it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..files import write_file_atomically
from .batcher import EngineConfig
from .engine import ServeSettings

DEPLOYMENT = "Translator"
APP_NAME = "tfm-export"
IMPORT_PATH = "tfm_export.serve.ray_app:app_builder"  # in every config written here: marks it as ours


def settings_to_dict(settings: ServeSettings) -> dict[str, Any]:
    return dataclasses.asdict(settings)


def settings_from_dict(data: dict[str, Any]) -> ServeSettings:
    # JSON (the config file, Ray's arguments) has lists where the frozen settings keep tuples
    return ServeSettings(**{**data, "engine": EngineConfig(**data.get("engine", {})),
                            "cors_origins": tuple(data.get("cors_origins", ()))})


CONFIG_TEMPLATE = """\
# Ray Serve config for tfm-export (`serve deploy {path}` on a running Ray cluster).
# Each replica runs its own engine over the export folder (batching "auto": in-flight when the export
# has decoder_static.onnx, else request-level), which every node must be able
# to read at `folder`. Edit num_replicas, or replace it with the autoscaling_config below.
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
