#!/usr/bin/env bash
# Issue #41's CPU rows in one go, for a quiet machine: the opus-mt layout's float32 step against CTranslate2
# (before and after the fixed-cost work), and float32 / int8 / int4 (accuracy levels 4 and 0) against
# CTranslate2 int8 at batch 1 and 16 (benchmarks/step_ab.py, interleaved fresh processes).
#
#   benchmarks/cpu41.sh WORK BEFORE_TREE OUT [--tiny]
#
# WORK: a new folder for the model and its exports; BEFORE_TREE: a folder holding the `tfm_export` package of
# the commit before #41 (`git archive b748823 tfm_export | tar -x -C BEFORE_TREE`); OUT: where the reports go.
# PY (default .venv/bin/python) runs everything; THREADS (default 2) is every backend's intra-op threads.
# The exports run side by side (they are independent); the timed runs run one at a time, nothing beside them.
set -euo pipefail
W=$1; BEFORE=$(cd "$2" && pwd); OUT=$3; TINY=${4:-}
R=$(cd "$(dirname "$0")/.." && pwd); PY=${PY:-$R/.venv/bin/python}; T=${THREADS:-2}
mkdir "$W"; mkdir -p "$OUT"; W=$(cd "$W" && pwd)
log() { echo "== $(date +%T) $*"; }

log "folder"
$PY "$R/benchmarks/opus_mt_folder.py" "$W/opus-hf" $TINY
export_with() {  # CHECKOUT NAME ARGS...: an export of the folder by that checkout's tfm_export
  local tree=$1 name=$2; shift 2
  PYTHONPATH=$tree $PY -m tfm_export "$W/opus-hf" -o "$W/$name" --no-validate "$@" >"$W/$name.log" 2>&1
}
log "exports (side by side)"
export_with "$R" after & export_with "$BEFORE" before & export_with "$R" int8 --quantize int8 &
export_with "$R" int4 --quantize int4 & export_with "$R" int4-acc0 --quantize int4 --int4-accuracy-level 0 &
wait
ls "$W"

log "float32 step against CTranslate2, before and after (interleaved)"
PYTHONPATH=$R $PY "$R/benchmarks/step_ab.py" "$W/opus-hf" --ct2-dir "$W/opus-ct2" \
  --side "before=$BEFORE:$W/before" --side "after=$R:$W/after" --num-beams 1,4 --batch 1 \
  --rounds "${ROUNDS:-6}" --repeat "${REPEAT:-9}" --threads "$T" --json "$OUT/step_ab.json" | tee "$OUT/step_ab.txt"

log "float32, int8, int4 (accuracy levels 4 and 0) against CTranslate2 float32 and int8, greedy, batch 1 and 16"
PYTHONPATH=$R $PY "$R/benchmarks/step_ab.py" "$W/opus-hf" --ct2-dir "$W/opus-ct2" --ct2-int8 \
  --side "float32=$R:$W/after" --variant "int8=$R:$W/int8" --variant "int4=$R:$W/int4" \
  --variant "int4-acc0=$R:$W/int4-acc0" --num-beams 1 --batch 1,16 --rounds "${ROUNDS2:-4}" \
  --repeat "${REPEAT2:-5}" --threads "$T" --json "$OUT/variants.json" | tee "$OUT/variants.txt"
log "done"
