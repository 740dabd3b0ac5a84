"""The Ray Serve config file of `tfm-export serve --write-config`, and settings as plain data.

Ray-free, so writing a config does not need the `ray` extra on the machine that writes it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from .batcher import EngineConfig
from .engine import ServeSettings

DEPLOYMENT = "Translator"
APP_NAME = "tfm-export"


def settings_to_dict(settings: ServeSettings) -> dict[str, Any]:
    return dataclasses.asdict(settings)


def settings_from_dict(data: dict[str, Any]) -> ServeSettings:
    return ServeSettings(**{**data, "engine": EngineConfig(**data.get("engine", {}))})


CONFIG_TEMPLATE = """\
# Ray Serve config for tfm-export (`serve deploy {path}` on a running Ray cluster).
# Each replica runs its own in-flight batcher over the export folder, which every node must be able
# to read at `folder`. Edit num_replicas, or replace it with the autoscaling_config below.
proxy_location: EveryNode
http_options:
  host: {host}  # the address the Ray proxies bind; put authentication in front or set api_key
  port: {port}
applications:
  - name: {app}
    route_prefix: /
    import_path: tfm_export.serve.ray_app:app_builder
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
    path.write_text(CONFIG_TEMPLATE.format(path=path.name, host=host, port=port, app=APP_NAME, args=args,
                                           deployment=DEPLOYMENT, replicas=replicas), encoding="utf-8")
