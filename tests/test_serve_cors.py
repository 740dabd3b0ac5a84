"""`tfm-export serve --cors-origin`: preflights and answers carry the CORS headers for the origins given
only, before the API key check; origins are checked; the Ray config carries them. (The browser page
calling a real server across origins: runtimes/web/test/browser.test.mjs.)"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from helpers import run_cli, run_cli_ok  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.serve.app import create_app  # noqa: E402
from tfm_export.serve.cors import check_origins  # noqa: E402
from tfm_export.serve.engine import ServeSettings  # noqa: E402

PAGE = "http://127.0.0.1:8000"  # the allowed page origin
KEY = "cors-test-key"


def preflight(client: TestClient, origin: str) -> Any:
    return client.options("/v1/translate", headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                    "Access-Control-Request-Headers": "authorization,content-type"})


def test_cors_allows_the_origins_given_and_no_other(bundled_export):
    settings = ServeSettings(str(bundled_export), batching="request", api_key=KEY, cors_origins=(PAGE,))
    with TestClient(create_app(settings)) as client:
        allowed = preflight(client, PAGE)  # no API key: preflights never carry one
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == PAGE
        assert "POST" in allowed.headers["access-control-allow-methods"]
        assert {"authorization", "content-type"} <= {
            h.strip().lower() for h in allowed.headers["access-control-allow-headers"].split(",")}
        other = preflight(client, "http://127.0.0.1:8001")
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
        body = {"texts": ["12"], "max_new_tokens": 3}
        answer = client.post("/v1/translate", json=body, headers={"Origin": PAGE, "Authorization": f"Bearer {KEY}"})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == PAGE
        assert answer.headers["access-control-expose-headers"] == "Retry-After"
        refused = client.post("/v1/translate", json=body, headers={"Origin": PAGE})  # the page can read the 401
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == PAGE
        stranger = client.post("/v1/translate", json=body, headers={"Origin": "http://evil.test",
                                                                     "Authorization": f"Bearer {KEY}"})
        assert stranger.status_code == 200 and "access-control-allow-origin" not in stranger.headers


def test_no_cors_by_default(bundled_export):
    with TestClient(create_app(ServeSettings(str(bundled_export), batching="request"))) as client:
        answer = preflight(client, PAGE)
        assert answer.status_code == 405 and "access-control-allow-origin" not in answer.headers


@pytest.mark.parametrize("origin", ["http://127.0.0.1:8000/", "127.0.0.1:8000", "http://host/page", "file://x"])
def test_an_origin_is_scheme_host_and_port(origin):
    with pytest.raises(InputError, match="is not an origin"):
        check_origins([origin])
    result = run_cli("serve", "no-such-folder", "--cors-origin", origin)
    assert result.exit_code == 1 and "is not an origin" in result.output
    check_origins(["http://127.0.0.1:8000", "https://[::1]:8443", "https://example.com", "*"])


def test_the_ray_config_carries_the_origins(bundled_export, tmp_path):
    yaml = pytest.importorskip("yaml")
    from tfm_export.serve.ray_config import settings_from_dict

    path = tmp_path / "serve.yaml"
    run_cli_ok("serve", bundled_export, "--write-config", path, "--cors-origin", PAGE, "--cors-origin",
               "https://app.example")
    settings = settings_from_dict(yaml.safe_load(path.read_text())["applications"][0]["args"])
    assert settings.cors_origins == (PAGE, "https://app.example")
