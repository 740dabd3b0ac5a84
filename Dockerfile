# The server image: this checkout's wheel with the `audio` extra (Whisper exports' uploads are decoded in the
# image), installed plainly: the runtime-only install, no PyTorch. `make image` builds it (tools/build_image.py:
# Docker or podman, online or offline); by hand, where a registry serves python:3.11-slim:
#
#   docker build -t tfm-export-server .
#   docker run --rm -p 127.0.0.1:8080:8080 -v "$PWD/model_onnx:/model:ro" -e TFM_EXPORT_API_KEY=change-me \
#     tfm-export-server
#
# The export folder is mounted read-only at /model. Inside the container the server must bind 0.0.0.0 to be
# reachable through -p, and `tfm-export serve` binds anything but loopback only with an API key: it reads the key
# from TFM_EXPORT_API_KEY (never from the image, never on the command line) and refuses to start without one.
# Another command replaces the default one, e.g. on a GPU (docs/deploying.md, "Container"):
#   docker run --gpus all ... tfm-export-server tfm-export serve /model --host 0.0.0.0 --device cuda
#
# Build arguments (docs/deploying.md):
#   BASE       the image every stage starts from: python3 with its venv module (python:3.11-slim; offline, a
#              Debian root file system made by debootstrap; for CUDA, a CUDA + cuDNN runtime image with python3)
#   WHEELS     pypi: the wheel stage builds this checkout's wheel and fetches the dependencies' wheels from PyPI;
#              local: every wheel is already in the build context's WHEELHOUSE folder (this checkout's and its
#              dependencies', for BASE's python), so the build needs no network (`--network none`)
#   WHEELHOUSE local: that folder, relative to the context (tools/build_image.py stages build/image-wheels)
ARG BASE=python:3.11-slim
ARG WHEELS=pypi

FROM ${BASE} AS wheels-pypi
# Stages are labelled so tools/build_image.py can remove what they leave behind (podman keeps them as images).
LABEL tfm-export.stage=wheels
WORKDIR /src
# What setup.py packs into the wheel (tfm_export/resources.py's BUNDLES) and the package itself.
COPY pyproject.toml setup.py MANIFEST.in README.md constraints.txt ./
COPY tfm_export tfm_export
COPY models/num2words-de models/num2words-de
COPY runtimes runtimes
RUN python3 -m venv /tmp/pip \
    && /tmp/pip/bin/pip wheel --no-cache-dir -q -c constraints.txt -w /wheels '.[audio]' tokenizers

FROM ${BASE} AS wheels-local
LABEL tfm-export.stage=wheels
ARG WHEELHOUSE=build/image-wheels
COPY ${WHEELHOUSE} /wheels

# Only the chosen stage is built (BuildKit and buildah skip the stages the final one does not use).
FROM wheels-${WHEELS} AS wheels

# The venv is built here and copied whole: the wheels never become a layer of the final image. `tokenizers`:
# Whisper and other tokenizer.json exports read it with that package, which pyproject.toml does not list yet.
FROM ${BASE} AS install
LABEL tfm-export.stage=install
COPY --from=wheels /wheels /wheels
COPY constraints.txt /constraints.txt
RUN python3 -m venv /opt/tfm-export \
    && /opt/tfm-export/bin/pip install --no-cache-dir -q --no-index --find-links /wheels -c /constraints.txt \
       'tfm-export[audio]' tokenizers

FROM ${BASE}
COPY --from=install /opt/tfm-export /opt/tfm-export
RUN useradd --create-home --uid 10001 tfm
ENV PATH=/opt/tfm-export/bin:$PATH PYTHONUNBUFFERED=1
USER tfm
WORKDIR /home/tfm
EXPOSE 8080
# /healthz needs no key. python3, not curl: neither base image has curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
# Exec form: tfm-export is PID 1 and gets SIGTERM itself (`docker stop`): it stops accepting, finishes the
# requests in flight and exits 0. The key comes from TFM_EXPORT_API_KEY (click's envvar for --api-key).
CMD ["tfm-export", "serve", "/model", "--host", "0.0.0.0", "--port", "8080"]
