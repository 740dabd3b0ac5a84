# The server image: this checkout's wheel, installed plainly (the runtime-only install: no PyTorch).
#
#   docker build -t tfm-export-server .
#   docker run --rm -p 8080:8080 -v "$PWD/model_onnx:/model:ro" -e TFM_EXPORT_API_KEY=change-me tfm-export-server
#
# The export folder is mounted read-only at /model. Inside the container the server must bind 0.0.0.0
# to be reachable through -p, and `tfm-export serve` binds anything but loopback only with an API key:
# the image reads it from TFM_EXPORT_API_KEY and refuses to start without one; clients send it.
# Another command replaces the default one, e.g. the browser page (no key; keep it on a trusted network):
#   docker run --rm -p 8000:8000 -v "$PWD/model_onnx:/model:ro" tfm-export-server \
#     tfm-export serve-web /model --host 0.0.0.0 --port 8000

FROM python:3.11-slim AS wheel
WORKDIR /src
# What setup.py packs into the wheel (tfm_export/resources.py's BUNDLES) and the package itself.
COPY pyproject.toml setup.py MANIFEST.in README.md constraints.txt ./
COPY tfm_export tfm_export
COPY models/num2words-de models/num2words-de
COPY runtimes runtimes
RUN pip wheel --no-cache-dir --no-deps -w /wheels .

FROM python:3.11-slim
COPY --from=wheel /wheels /wheels
COPY --from=wheel /src/constraints.txt /tmp/constraints.txt
RUN pip install --no-cache-dir -c /tmp/constraints.txt /wheels/*.whl \
    && rm -rf /wheels /tmp/constraints.txt \
    && useradd --create-home --uid 10001 tfm
USER tfm
WORKDIR /home/tfm
EXPOSE 8080
# sh -c: the key comes from the environment at run time, never from the image.
CMD ["sh", "-c", "exec tfm-export serve /model --host 0.0.0.0 --port 8080 --api-key \"${TFM_EXPORT_API_KEY:?set TFM_EXPORT_API_KEY: serving on 0.0.0.0 needs an API key}\""]
