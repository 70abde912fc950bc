#!/usr/bin/env bash
# Operator-library benchmark (issue 4): Real-ESRGAN animevideov3 x4, real weights, fp32, one
# frame, T threads, Loom's host kernels against ONNX Runtime on the same weights and the same
# input, in this one script.
#
#  1. Accuracy at each ACCURACY_SHAPES shape: Loom and ORT against a float64 reference of the
#     same graph (scripts/reference.py): max|y - ref| / max|ref|, target <= 1e-4 for both.
#  2. Speed at each TIME_SHAPES shape: median ms per frame of each, the ratio, and GFLOPS (direct
#     convolution count) against the FMA peak of T threads measured by the Loom binary.
#
# Usage: bench/realesrgan.sh [BUILD_DIR]   (default build)
# Environment (an empty shape list skips that part): THREADS (2), ITERS (5), ACCURACY_SHAPES ("1x3x64x64"),
#   TIME_SHAPES ("1x3x240x320 1x3x480x720"), PYTHON (/usr/bin/python3), LOOM_CACHE.
# Prints a table and one JSON line per shape; exits 1 when accuracy or the 1.5x target fails.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
threads="${THREADS:-2}"
iters="${ITERS:-5}"
accuracy_shapes="${ACCURACY_SHAPES-1x3x64x64}"
time_shapes="${TIME_SHAPES-1x3x240x320 1x3x480x720}"
python="${PYTHON:-/usr/bin/python3}"
cache="${LOOM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom}"
model="realesr-animevideov3-x4"
loom_bin="$build/bench/loom_bench_realesrgan"

die() {
  echo "realesrgan.sh: error: $*" >&2
  exit 1
}
[[ -x "$loom_bin" ]] || die "$loom_bin is missing (make build)"
[[ -x "$python" ]] || python="$(command -v python3)"

model_dir="$("$root/scripts/fetch-models" | tail -n 1)"
ort_dir="$("$root/scripts/setup-ort" | tail -n 1)"
mkdir -p "$cache/onnx"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
param="$model_dir/$model.param"
bin="$model_dir/$model.bin"

onnx_for() {
  local out="$cache/onnx/$model-$1.onnx"
  [[ -s "$out" ]] || "$python" "$root/scripts/ncnn2onnx.py" "$param" "$bin" "$out" --shape "$1" >/dev/null ||
    die "export at $1 failed"
  echo "$out"
}

make_input() {
  "$python" - "$1" "$2" <<'EOF'
import sys
import numpy as np
shape = [int(d) for d in sys.argv[1].split("x")]
np.random.default_rng(20261122).random(shape, dtype=np.float32).astype("<f4").tofile(sys.argv[2])
EOF
}

status=0
for shape in $accuracy_shapes; do
  onnx="$(onnx_for "$shape")"
  make_input "$shape" "$tmp/in.f32"
  "$loom_bin" --param "$param" --bin "$bin" --shape "$shape" --input "$tmp/in.f32" --output "$tmp/loom.f32" \
    --threads "$threads" --warmup 0 --iters 1 >/dev/null || die "Loom failed at $shape"
  LOOM_ORT_DIR="$ort_dir" node "$root/bench/ort/run.mjs" --model "$onnx" --shape "$shape" --input "$tmp/in.f32" \
    --output "$tmp/ort.f32" --threads "$threads" --warmup 0 --iters 1 >/dev/null || die "ORT failed at $shape"
  "$python" "$root/scripts/reference.py" "$onnx" --input "$tmp/in.f32" --shape "$shape" --output "$tmp/ref.f64" \
    >/dev/null || die "reference failed at $shape"
  "$python" - "$shape" "$tmp/loom.f32" "$tmp/ort.f32" "$tmp/ref.f64" <<'EOF' || status=1
import sys
import numpy as np
ref = np.fromfile(sys.argv[4], dtype="<f8")
ok = True
for name, path in (("loom", sys.argv[2]), ("ort", sys.argv[3])):
    y = np.fromfile(path, dtype="<f4").astype(np.float64)
    if y.size != ref.size:
        sys.exit(f"{name}: {y.size} values, reference {ref.size}")
    rel = np.abs(y - ref).max() / np.abs(ref).max()
    print(f"accuracy {sys.argv[1]:>12} {name:>4}: max|y-ref|/max|ref| = {rel:.2e} (target 1e-4)")
    ok = ok and rel <= 1e-4
sys.exit(0 if ok else 1)
EOF
done

printf '%-12s %12s %12s %8s %10s %10s %10s\n' shape "loom ms" "ort ms" "ratio" "loom GF/s" "ort GF/s" "peak GF/s"
for shape in $time_shapes; do
  onnx="$(onnx_for "$shape")"
  make_input "$shape" "$tmp/in.f32"
  loom_json="$("$loom_bin" --param "$param" --bin "$bin" --shape "$shape" --input "$tmp/in.f32" \
    --threads "$threads" --warmup 1 --iters "$iters")" || die "Loom failed at $shape"
  ort_json="$(LOOM_ORT_DIR="$ort_dir" node "$root/bench/ort/run.mjs" --model "$onnx" --shape "$shape" \
    --input "$tmp/in.f32" --threads "$threads" --warmup 1 --iters "$iters")" || die "ORT failed at $shape"
  "$python" - "$shape" "$loom_json" "$ort_json" <<'EOF' || status=1
import json
import sys
shape, loom, ort = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
gflop = loom["conv_gflop"]
ratio = ort["ms_median"] / loom["ms_median"]
print(f"{shape:<12} {loom['ms_median']:12.1f} {ort['ms_median']:12.1f} {ratio:7.2f}x "
      f"{gflop / loom['ms_median'] * 1e3:10.1f} {gflop / ort['ms_median'] * 1e3:10.1f} "
      f"{loom['fma_peak_gflops']:10.1f}")
print(json.dumps({"shape": shape, "threads": loom["threads"], "isa": loom["isa"], "loom_ms": loom["ms_median"],
                  "ort_ms": ort["ms_median"], "ort_version": ort.get("ort_version"), "ratio": ratio,
                  "fma_peak_gflops": loom["fma_peak_gflops"], "conv_gflop": gflop}))
sys.exit(0 if ratio >= 1.5 else 1)
EOF
done
exit "$status"
