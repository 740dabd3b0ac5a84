"""The same server on Ray Serve: each replica runs serve.app with its own engine (in-flight batching when
the export has its static decoder, else request-level: serve.engine.resolve_batching, as one process).

    tfm-export serve FOLDER --ray --replicas 2          # a local Ray instance, until Ctrl+C
    tfm-export serve FOLDER --write-config serve.yaml   # for `serve deploy serve.yaml` on a cluster

Ray is the `ray` extra (`pip install tfm-export[ray]`); nothing else imports this module.
"""

from __future__ import annotations

import logging
from typing import Any

from ray import serve

from .app import create_app
from .engine import ServeSettings
from .ray_config import APP_NAME, DEPLOYMENT, settings_from_dict, settings_to_dict

log = logging.getLogger(__name__)


@serve.ingress()
class Translator:
    """One replica: the FastAPI app of serve.app, built on the replica (its lifespan opens the model): the
    text routes, or a Whisper export's audio routes (serve.audio: uploads come through Ray's HTTP proxy)."""

    def __init__(self, settings: dict[str, Any]):
        self.settings = settings_from_dict(settings)

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(self.settings)


def application(settings: ServeSettings, replicas: int = 1, cpus_per_replica: float = 1.0) -> Any:
    """A Ray Serve application of `replicas` Translator replicas."""
    deployment = serve.deployment(Translator, name=DEPLOYMENT, num_replicas=replicas,
                                  ray_actor_options={"num_cpus": cpus_per_replica})
    return deployment.bind(settings_to_dict(settings))


def app_builder(args: dict[str, Any]) -> Any:
    """The config file's import_path: `args` are ServeSettings' fields (replicas come from the config)."""
    return application(settings_from_dict(args))


def run(settings: ServeSettings, replicas: int, host: str, port: int) -> Any:
    """Start Ray (or join RAY_ADDRESS) and deploy; returns the app's handle (Ray keeps serving)."""
    serve.start(http_options={"host": host, "port": port})
    return serve.run(application(settings, replicas), name=APP_NAME, route_prefix="/")
