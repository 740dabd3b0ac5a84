"""`make image`: the server image (./Dockerfile) built with Docker or podman, with or without an image registry.

Where a registry serves python:3.11-slim, the Dockerfile is built as it is (WHEELS=pypi: pip fetches the wheels
during the build). Where none does, the base image is a Debian root file system made by debootstrap from Debian's
packages and imported, and every wheel (this checkout's, and its dependencies' for the base's python and C
library) is downloaded on the host into a wheelhouse that the build installs with no network (WHEELS=local).
The root file system and the wheelhouse are cached outside the clone (TFM_EXPORT_IMAGE_CACHE, default
/var/cache/tfm-export-image), each keyed on what made it, so later builds on the machine reuse them; deleting the
folder makes the next build fetch everything again. Where no engine runs and we are root with apt-get, podman,
runc and debootstrap are installed from Debian's packages (as the Makefile installs espeak-ng).

    python3 tools/build_image.py [--tag T] [--base auto|registry|debootstrap] [--wheel WHEEL] [--engine E]

Exit status 0 with the image built; 3 when no container engine runs here and none can be installed.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_BASE = "docker.io/library/python:3.11-slim"
REGISTRY_HOST = ("registry-1.docker.io", 443)
MIRROR = "http://deb.debian.org/debian"
DEBIAN_PACKAGES = "python3,python3-venv"  # the base needs python3 and its venv module, nothing more
EXTRAS = "audio"  # the server's dependencies are the plain install's; `audio` decodes Whisper uploads
# tokenizer.json exports (Whisper's) need `tokenizers`, which pyproject.toml does not list yet (the Dockerfile too).
ALSO = ("tokenizers",)
STAGED = ROOT / "build" / "image-wheels"  # the wheelhouse as the build context sees it (.dockerignore keeps it)
NO_ENGINE = 3
# Debian's packages for podman where no engine runs. runc: crun, podman's default runtime, fails on cgroup v1
# hosts ("cgroups in hybrid mode not supported"); containernetworking-plugins: rootful networking for -p.
APT_PACKAGES = ("podman", "runc", "containernetworking-plugins", "debootstrap")
# Trimmed from the root file system: package caches and manuals (python:3.11-slim leaves them out too).
ROOTFS_EXCLUDES = ("./var/cache/apt/archives/*.deb", "./var/lib/apt/lists/*", "./usr/share/man/*",
                   "./usr/share/locale/*", "./usr/share/info/*")


def log(message: str) -> None:
    print(f"[image] {message}", file=sys.stderr, flush=True)


def run(cmd: list, env: dict | None = None, timeout: float = 1800, check: bool = True,
        capture: bool = True) -> subprocess.CompletedProcess:
    """cmd with output captured; with `check`, exits with cmd's output and status unless it succeeds."""
    done = subprocess.run([str(c) for c in cmd], env=env, capture_output=capture, text=True, timeout=timeout)
    if check and done.returncode != 0:
        sys.exit(f"[image] {' '.join(map(str, cmd[:4]))} ... exited {done.returncode}:\n"
                 f"{(done.stdout or '')[-4000:]}{(done.stderr or '')[-4000:]}")
    return done


def key(*parts: str | bytes) -> str:
    """A short stable digest of what made a cached thing."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """TFM_EXPORT_IMAGE_CACHE, else /var/cache/tfm-export-image where writable, else the user's cache."""
    chosen = os.environ.get("TFM_EXPORT_IMAGE_CACHE")
    if chosen:
        path = Path(chosen)
    elif os.access("/var/cache", os.W_OK):
        path = Path("/var/cache/tfm-export-image")
    else:
        path = Path.home() / ".cache" / "tfm-export-image"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Engine:
    """docker or podman, with the configuration file our podman calls read (None: the engine's own)."""
    name: str
    conf: str | None = None

    def cmd(self, *args) -> list[str]:
        return [self.name, *map(str, args)]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf:
            env["CONTAINERS_CONF"] = self.conf
        if self.name == "docker":
            env["DOCKER_BUILDKIT"] = "1"  # only BuildKit skips the Dockerfile's unused wheel stage
        return env

    def run(self, *args, timeout: float = 1800, check: bool = True) -> subprocess.CompletedProcess:
        return run(self.cmd(*args), env=self.env(), timeout=timeout, check=check)

    def has_image(self, tag: str) -> bool:
        return self.run("image", "inspect", tag, timeout=60, check=False).returncode == 0


def podman_conf() -> str:
    """A containers.conf for podman here: runc on cgroup v1 hosts, and the host's file-descriptor limit
    (podman's default raises RLIMIT_NOFILE, which sandboxes refuse: "setrlimit ... Operation not permitted")."""
    lines = ["[containers]", "default_ulimits = []"]
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists() and shutil.which("runc"):
        lines += ["[engine]", 'runtime = "runc"']
    path = cache_dir() / f"containers-{key(*lines)}.conf"
    if not path.exists():
        write_atomically(path, "\n".join(lines) + "\n")
    return str(path)


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.rename(path)


def answering_engine(only: str | None = None) -> Engine | None:
    """The first of docker and podman that is installed and answers `info`."""
    for name in (only,) if only else ("docker", "podman"):
        if not shutil.which(name):
            continue
        engine = Engine(name, podman_conf() if name == "podman" else None)
        if engine.run("info", timeout=120, check=False).returncode == 0:
            return engine
    return None


def can_install() -> bool:
    return shutil.which("apt-get") is not None and os.geteuid() == 0


def find_engine(only: str | None = None, install: bool = True) -> Engine | None:
    """An engine that runs here, installing podman from Debian's packages where none does and we may."""
    engine = answering_engine(only)
    if engine is None and install and only != "docker" and can_install():
        log(f"no container engine answers; installing {' '.join(APT_PACKAGES)} with apt-get")
        apt_install(APT_PACKAGES)
        engine = answering_engine("podman")
    return engine


def apt_install(packages: tuple[str, ...]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env, timeout=600)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env, timeout=900)


def registry_serves(engine: Engine, image: str) -> bool:
    """Whether `image` is here or can be pulled: a quick connection test first, so machines without a
    registry do not wait for the engine's retries."""
    if engine.has_image(image):
        return True
    try:
        socket.create_connection(REGISTRY_HOST, timeout=5).close()
    except OSError:
        log(f"no registry reachable ({REGISTRY_HOST[0]}): building the base image with debootstrap")
        return False
    pulled = engine.run("pull", image, timeout=600, check=False)
    if pulled.returncode != 0:
        log(f"cannot pull {image}: building the base image with debootstrap\n{pulled.stderr[-1000:]}")
    return pulled.returncode == 0


def debian_suite() -> str:
    """The host's Debian release (its python is the image's), else bookworm (python 3.11, as python:3.11-slim)."""
    release = Path("/etc/os-release")
    fields = dict(line.split("=", 1) for line in release.read_text().splitlines() if "=" in line) \
        if release.exists() else {}
    if fields.get("ID") == "debian" and fields.get("VERSION_CODENAME"):
        return fields["VERSION_CODENAME"].strip('"')
    return "bookworm"


def debootstrap_base(engine: Engine, cache: Path) -> str:
    """The base image made by debootstrap: from the engine's store, else imported from the cached root file
    system, else debootstrapped (under a minute), cached, then imported."""
    suite, arch = debian_suite(), platform.machine()
    made = key(suite, arch, MIRROR, DEBIAN_PACKAGES, *ROOTFS_EXCLUDES)
    tag = f"{'localhost/' if engine.name == 'podman' else ''}tfm-export-base:{suite}-{made}"
    if engine.has_image(tag):
        log(f"base image {tag}: present")
        return tag
    tarball = cache / f"rootfs-{suite}-{made}.tar"
    if not tarball.exists():
        if shutil.which("debootstrap") is None and can_install():
            apt_install(("debootstrap",))
        with tempfile.TemporaryDirectory(dir=cache, prefix=".rootfs-") as stage:
            started = time.perf_counter()
            rootfs = Path(stage) / "rootfs"
            run(["debootstrap", "--variant=minbase", f"--include={DEBIAN_PACKAGES}", suite, rootfs, MIRROR],
                timeout=1200)
            partial = Path(stage) / "rootfs.tar"
            run(["tar", "-C", rootfs, *(f"--exclude={pattern}" for pattern in ROOTFS_EXCLUDES), "-cf", partial, "."])
            partial.rename(tarball)
            log(f"debootstrap {suite}: {time.perf_counter() - started:.0f} s, "
                f"{tarball.stat().st_size / 2**20:.0f} MiB, cached in {tarball}")
    engine.run("import", tarball, tag, timeout=600)
    log(f"base image {tag}: imported from {tarball}")
    return tag


def target_python(engine: Engine, base: str) -> tuple[str, str, str]:
    """(python X.Y, glibc X.Y, machine) inside `base`: what the wheels must be built for."""
    probe = "import platform, sys; print('%d.%d' % sys.version_info[:2], platform.libc_ver()[1], platform.machine())"
    out = engine.run("run", "--rm", "--network", "none", base, "python3", "-c", probe, timeout=300).stdout
    version, libc, machine = out.split()
    return version, libc, machine


def platform_tags(libc: str, machine: str) -> list[str]:
    """Every manylinux tag a glibc `libc` accepts (pip takes --platform literally, without older ones)."""
    major, minor = map(int, libc.split(".")[:2])
    if major != 2:
        sys.exit(f"[image] unexpected glibc {libc} in the base image")
    aliases = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}
    tags = [f"manylinux_2_{n}_{machine}" for n in range(minor, 4, -1)]
    return tags + [f"{aliases[n]}_{machine}" for n in aliases if n <= minor]


def build_wheel(out: Path) -> Path:
    """This checkout's wheel (no dependencies), built as pip builds it (isolated, setuptools from PyPI)."""
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, ROOT], timeout=900)
    (wheel,) = out.glob("tfm_export-*.whl")
    return wheel


def wheelhouse(cache: Path, wheel: Path, target: tuple[str, str, str]) -> Path:
    """The dependencies' wheels for `target`, downloaded once per pyproject.toml, constraints.txt and target."""
    version, libc, machine = target
    inputs = [(ROOT / name).read_bytes() for name in ("pyproject.toml", "constraints.txt")]
    folder = cache / f"wheels-cp{version.replace('.', '')}-{machine}-{key(*inputs, *target, EXTRAS, *ALSO)}"
    if folder.is_dir():
        log(f"wheelhouse {folder}: present")
        return folder
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=cache, prefix=".wheels-") as scratch:
        stage = Path(scratch) / "wheels"
        abi = f"cp{version.replace('.', '')}"
        run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", version,
             "--implementation", "cp", "--abi", abi, *(a for tag in platform_tags(libc, machine)
                                                       for a in ("--platform", tag)),
             "-c", ROOT / "constraints.txt", "-d", stage, f"{wheel}[{EXTRAS}]", *ALSO], timeout=1200)
        for own in stage.glob("tfm_export-*.whl"):  # the checkout's wheel is staged fresh each build
            own.unlink()
        stage.rename(folder)
    size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
    log(f"wheelhouse {folder}: {time.perf_counter() - started:.0f} s, {size:.0f} MiB")
    return folder


def stage_wheels(folder: Path, wheel: Path) -> None:
    """build/image-wheels: the wheelhouse (hard links where the cache is on the same disk) and the wheel."""
    shutil.rmtree(STAGED, ignore_errors=True)
    STAGED.mkdir(parents=True)
    for source in [*folder.glob("*.whl"), wheel]:
        try:
            os.link(source, STAGED / source.name)
        except OSError:
            shutil.copy2(source, STAGED / source.name)


def build(engine: Engine, tag: str, base: str, offline: bool) -> None:
    """The Dockerfile built as `tag` on `base`; offline: from the staged wheelhouse with no network."""
    args = ["build", "-t", tag, "-f", ROOT / "Dockerfile", "--build-arg", f"BASE={base}"]
    if offline:
        args += ["--build-arg", "WHEELS=local", "--build-arg", f"WHEELHOUSE={STAGED.relative_to(ROOT)}",
                 "--network", "none"]
    if engine.name == "podman":
        # docker format: OCI images have no HEALTHCHECK.
        args += ["--format", "docker", "--pull=never" if offline else "--pull=missing"]
    started = time.perf_counter()
    try:
        engine.run(*args, ROOT, timeout=1800)
    finally:  # the build stages' images (the Dockerfile labels them), not a layer cache worth its disk
        engine.run("image", "prune", "-f", "--filter", "label=tfm-export.stage", timeout=300, check=False)
    size = int(engine.run("image", "inspect", "-f", "{{.Size}}", tag, timeout=60).stdout)
    log(f"built {tag} with {engine.name} on {base} in {time.perf_counter() - started:.0f} s: {size / 2**20:.0f} MiB")


def choose_base(engine: Engine, wanted: str, cache: Path) -> tuple[str, bool]:
    """(base image, offline): the registry's python:3.11-slim where it is served (or asked for), else
    debootstrap's."""
    if wanted == "registry" or (wanted == "auto" and registry_serves(engine, REGISTRY_BASE)):
        return REGISTRY_BASE, False
    return debootstrap_base(engine, cache), True


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", default="tfm-export-server", help="the image's name (default: %(default)s)")
    parser.add_argument("--base", choices=("auto", "registry", "debootstrap"), default="auto",
                        help="auto: python:3.11-slim where a registry serves it, else debootstrap's Debian")
    parser.add_argument("--wheel", type=Path, default=None,
                        help="this checkout's wheel, already built (default: build it)")
    parser.add_argument("--engine", choices=("docker", "podman"), default=None,
                        help="default: docker where its daemon answers, else podman")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    engine = find_engine(args.engine)
    if engine is None:
        log("no docker or podman runs here, and podman cannot be installed (needs root and apt-get)")
        return NO_ENGINE
    cache = cache_dir()
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time on a machine: the cache and build/image-wheels
        base, offline = choose_base(engine, args.base, cache)
        if offline:
            with tempfile.TemporaryDirectory() as scratch:
                wheel = args.wheel or build_wheel(Path(scratch))
                stage_wheels(wheelhouse(cache, wheel, target_python(engine, base)), wheel)
        try:
            build(engine, args.tag, base, offline)
        finally:
            shutil.rmtree(STAGED, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
