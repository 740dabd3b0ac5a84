"""The server on Ray Serve: 2 replicas, one replica's actor killed under load, every request answered
(Ray restarts the replica, the client retries) with the tokens of serial decoding."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

from helpers import free_port  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.serve.batcher import EngineConfig  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402

pytestmark = pytest.mark.slow


def translate_with_retry(url: str, ids: list[int], steps: int, attempts: int = 30) -> list[int]:
    """A client's retry: a replica that died mid-request answers 5xx or drops the connection."""
    for _ in range(attempts):
        try:
            reply = httpx.post(url, json={"ids": [ids], "max_new_tokens": steps}, timeout=30)
            if reply.status_code == 200:
                return reply.json()["translations"][0]["ids"]
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no answer after {attempts} attempts")


def test_two_replicas_survive_a_killed_replica(static_export):
    from ray import serve

    from tfm_export.serve import ray_app

    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        settings = ServeSettings(str(static_export), engine=EngineConfig(max_batch=4), threads=1)
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(ray_app.application(settings, replicas=2), name=ray_app.APP_NAME, route_prefix="/")
        url = f"http://127.0.0.1:{port}/v1/translate"
        rng = random.Random(4)
        requests = [([rng.randrange(4, 60) for _ in range(rng.randrange(1, 30))], rng.randrange(1, 65))
                    for _ in range(120)]
        answered = threading.Semaphore(0)
        killer = threading.Thread(target=_kill_one_replica, args=(answered, 16), daemon=True)  # mid-load
        killer.start()

        def client(request: tuple[list[int], int]) -> list[int]:
            tokens = translate_with_retry(url, *request)
            answered.release()
            return tokens

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(client, requests))
        load_ended = time.monotonic()
        killer.join()
        assert killer.killed_at < load_ended  # type: ignore[attr-defined]  # killed mid-load
        serial = open_export(static_export, "cpu")
        assert answers == [serial.generate_ids([ids], n)[0] for ids, n in requests]
    finally:
        serve.shutdown()
        ray.shutdown()


def _kill_one_replica(answered: threading.Semaphore, after: int) -> None:
    for _ in range(after):  # the kill waits for load, not for a clock: a fast machine could finish first
        answered.acquire()
    replicas = [a for a in ray.util.list_named_actors(all_namespaces=True) if "SERVE_REPLICA" in a["name"]]
    handle = ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"])
    ray.kill(handle, no_restart=True)  # the Serve controller notices and starts a replacement
    threading.current_thread().killed_at = time.monotonic()  # type: ignore[attr-defined]
