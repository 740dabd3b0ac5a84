"""A Hugging Face Hub on 127.0.0.1 for the tests (no network): the calls huggingface_hub makes to download a
model, answered as huggingface.co answers them, so that its real download path runs against it.

- GET /api/models/{repo}[/revision/{rev}]: the commit sha and the file list (`siblings`);
- HEAD and GET /{repo}/resolve/{rev}/{file}: X-Repo-Commit, ETag (a git blob id; for LFS files, the weights,
  the sha256 as X-Linked-Etag with X-Linked-Size, as the Hub's redirect to its CDN carries them),
  Content-Length, and `Range: bytes=N-` answered with 206;
- errors with the Hub's X-Error-Code: RepoNotFound (404), GatedRepo (401 without the repo's token),
  RevisionNotFound (404), EntryNotFound (404, with X-Repo-Commit).

`cut` makes the next GETs of a file stop halfway through its body and close the connection.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".bin")  # stored in git LFS on the Hub, like every weights file


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> file -> content
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> sha
    token: str | None = None  # gated: only requests with this bearer token get through


class FakeHub:
    """The repos it serves, what it was asked (`requests`: method, path, Range header) and files to cut."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.cut: dict[str, int] = {}  # file name -> how many more GETs of it end halfway
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def publish(self, repo_id: str, folder: Path, ref: str = "main", token: str | None = None) -> str:
        """Commit the files of `folder` to `repo_id` and point `ref` at the commit; its sha."""
        files = {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}
        digest = hashlib.sha1(repo_id.encode())
        for name, content in files.items():
            digest.update(name.encode() + hashlib.sha256(content).digest())
        sha = digest.hexdigest()
        repo = self.repos.setdefault(repo_id, Repo())
        repo.commits[sha], repo.refs[ref], repo.token = files, sha, token or repo.token
        return sha

    def served(self, method: str, file: str) -> list[str | None]:
        """The Range headers of each `method` request for `file`."""
        return [r for m, path, r in self.requests if m == method and path.endswith(f"/{file}")]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            hub.requests.append((self.command, self.path.split("?")[0], self.headers.get("Range")))
            api = re.fullmatch(r"/api/models/([^/]+/[^/?]+)(?:/revision/([^/?]+))?(?:\?.*)?", self.path)
            resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/([^?]+)(?:\?.*)?", self.path)
            if api:
                self._api(api[1], api[2] or "main")
            elif resolve:
                self._resolve(resolve[1], resolve[2], resolve[3], body)
            else:
                self._send(404, b"", {"X-Error-Code": "EntryNotFound"})

        def _commit(self, repo_id: str, revision: str) -> tuple[str, dict[str, bytes]] | None:
            """The sha and files of `revision`, or None having answered the error."""
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._send(404, b"Repository not found", {"X-Error-Code": "RepoNotFound"})
                return None
            if repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
                self._send(401, b"Access to this model is restricted", {"X-Error-Code": "GatedRepo"})
                return None
            sha = repo.refs.get(revision) or (revision if revision in repo.commits else None)
            if sha is None:
                self._send(404, b"Invalid rev id", {"X-Error-Code": "RevisionNotFound"})
                return None
            return sha, repo.commits[sha]

        def _api(self, repo_id: str, revision: str) -> None:
            found = self._commit(repo_id, revision)
            if found:
                sha, files = found
                info = {"id": repo_id, "modelId": repo_id, "sha": sha, "private": False,
                        "siblings": [{"rfilename": name} for name in files]}
                self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})

        def _resolve(self, repo_id: str, revision: str, name: str, body: bool) -> None:
            found = self._commit(repo_id, revision)
            if not found:
                return
            sha, files = found
            if name not in files:
                self._send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": sha})
                return
            content = files[name]
            headers = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes",
                       "ETag": f'"{hashlib.sha1(b"blob %d" % len(content) + bytes(1) + content).hexdigest()}"'}
            if name.endswith(LFS_SUFFIXES):
                headers.update({"X-Linked-Etag": f'"{hashlib.sha256(content).hexdigest()}"',
                                "X-Linked-Size": str(len(content))})
            start = int(re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "bytes=0-")[1])
            status = 206 if self.headers.get("Range") else 200
            if status == 206:
                headers["Content-Range"] = f"bytes {start}-{len(content) - 1}/{len(content)}"
            part = content[start:]
            if body and hub.cut.get(name, 0) > 0:  # announce the whole part, send half, drop the connection
                hub.cut[name] -= 1
                self._send(status, part[: len(part) // 2], headers, length=len(part))
                self.close_connection = True
                return
            self._send(status, part if body else b"", headers, length=len(part))

        def _send(self, status: int, payload: bytes, headers: dict[str, str], length: int | None = None) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload) if length is None else length))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
                self.wfile.flush()

    return Handler
