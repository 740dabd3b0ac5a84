#!/usr/bin/env bash
# The GPU section of BENCHMARKS.md: `tfm-export bench --device cuda` on transformer-base and on an
# opus-mt-sized Marian folder, batch 1 and 16, greedy and beam 4, with the CUDA-graph and float16
# exports as --also rows of the same run, then an ORT profile of one decoder step.
#
#     benchmarks/gpu.sh OUT_DIR [REPEAT]
#
# Needs a CUDA GPU, onnxruntime-gpu and the `export` extra; writes OUT_DIR/<model>-beam<N>.json and
# OUT_DIR/profile-<model>.txt. Every export goes to a temporary folder that is removed at the end.
set -euo pipefail
out=${1:?usage: benchmarks/gpu.sh OUT_DIR [REPEAT]}
repeat=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

tfm-export init "$work/base.pt" --preset base --seed 0
python "$here/opus_mt_folder.py" "$work/opus"
for model in ${MODELS:-base opus}; do
  weights=$work/base.pt
  [ "$model" = opus ] && weights=$work/opus
  # Three exports of one model: the growing cache (IOBinding), + the static decoder (CUDA graphs),
  # and float16 with CUDA graphs. Validation runs on the CPU, so the three run side by side.
  tfm-export "$weights" -o "$work/$model-f32" --no-validate &
  tfm-export "$weights" -o "$work/$model-graph" --cuda-graph --static-slots 128 --no-validate &
  tfm-export "$weights" -o "$work/$model-f16" --dtype float16 --cuda-graph --static-slots 128 --no-validate &
  wait
  for beams in 1 4; do
    tfm-export bench "$work/$model-f32" --model "$weights" --device cuda --batch 1,16 --src-len 32 \
      --new-tokens 64 --num-beams "$beams" --repeat "$repeat" --also "$work/$model-graph" \
      --also "$work/$model-f16" --json "$out/$model-beam$beams.json"
  done
  for variant in f32 f16; do
    python "$here/profile_decoder.py" "$work/$model-$variant" --device cuda --steps 200 \
      > "$out/profile-$model-$variant.txt"
  done
done
