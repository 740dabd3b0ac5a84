#!/usr/bin/env bash
# The Node and browser runtime tests, without pytest:
#   1. export the bundled model (models/num2words-de) to a temporary folder with the Python CLI
#      (skipped when TFM_EXPORT_DIR already names an export of it),
#   2. check runtimes/fixtures/expected.json against the Python runtime on that export,
#   3. `npm ci` in runtimes/node and runtimes/web when node_modules is missing or older than the lock,
#   4. node --test runtimes/node/test/ and runtimes/web/test/ (headless Chromium) with TFM_EXPORT_DIR.
# Missing node or chromium is reported as SKIPPED (exit 0); any failure exits non-zero.
# Environment: PYTHON (default .venv/bin/python), CHROMIUM (default: chromium on PATH, else /usr/bin/chromium).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUNTIMES="$ROOT/runtimes"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"

step() { printf '\n== %s\n' "$*"; STEP_START=$SECONDS; }
done_step() { echo "   ($((SECONDS - STEP_START)) s)"; }

if ! command -v node >/dev/null 2>&1; then
  echo "SKIPPED: node not found; install Node.js >= 18 to run the Node and browser runtime tests"
  exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [ -z "${TFM_EXPORT_DIR:-}" ]; then
  step "export models/num2words-de to $TMP/model_onnx"
  TFM_EXPORT_DIR="$TMP/model_onnx"
  if ! (cd "$ROOT" && "$PY" -m tfm_export export models/num2words-de/model.pt -o "$TFM_EXPORT_DIR" >"$TMP/export.log" 2>&1); then
    cat "$TMP/export.log"; exit 1
  fi
  done_step
fi
export TFM_EXPORT_DIR TFM_PYTHON="$PY" PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

step "fixture is what the Python runtime produces"
"$PY" "$RUNTIMES/make_fixture.py" --export-dir "$TFM_EXPORT_DIR"
done_step

for dir in node web; do
  if [ ! -f "$RUNTIMES/$dir/node_modules/.package-lock.json" ] \
     || [ "$RUNTIMES/$dir/package-lock.json" -nt "$RUNTIMES/$dir/node_modules/.package-lock.json" ]; then
    step "npm ci in runtimes/$dir"
    (cd "$RUNTIMES/$dir" && npm ci --no-audit --no-fund --loglevel=error)
    done_step
  fi
done

step "Node runtime (onnxruntime-node)"
(cd "$RUNTIMES/node" && node --test --test-reporter=spec test/)
done_step

CHROMIUM="${CHROMIUM:-$(command -v chromium || echo /usr/bin/chromium)}"
if [ -x "$CHROMIUM" ]; then
  export CHROMIUM
  step "browser runtime (onnxruntime-web in headless $CHROMIUM)"
  (cd "$RUNTIMES/web" && node --test --test-reporter=spec test/)
  echo "   screenshot: $RUNTIMES/web/test-output/screenshot.png"
  done_step
else
  echo "SKIPPED: chromium not found (apt-get install chromium); the browser runtime test did not run"
fi
echo "runtimes: all tests passed"
