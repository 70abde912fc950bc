#!/usr/bin/env bash
# Exact tiling of the U-Nets and UpConv7 with real weights (scripts/fetch-models): Real-CUGAN x2,
# x3 and x4 (valid convs, crops, 2x2 stride-2 convs and transposed convs, four
# squeeze-and-excitation means each), waifu2x CUnet x2 and x1, and UpConv7 x2 (valid convs and a
# 4x4 stride-2 transposed conv), each run as its program runs it (`loomc run --restore`) on a
# generated 240x300 frame: untiled, and over tiles (both axes tiled; the U-Nets one pass per
# mean, then the output's, handing values on between passes through the host, and once with
# every pass from the window: --carry-mib 0) on dc; and Real-CUGAN x2 over tiles chosen from the
# memory of a device cut below its untiled arena. Every tiled output must be the untiled output byte for byte.
# Exits 77 (skipped) when the models cannot be fetched.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loomc="$1"
model_dir="$("$root/scripts/fetch-models" 2>/dev/null | tail -n 1)" || { echo "models unavailable: skipped"; exit 77; }
models_root="$(dirname "$model_dir")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/in"
/usr/bin/python3 - "$tmp/in/input_0.pb" <<'PY'
import sys
import numpy as np
from onnx import numpy_helper
x = np.random.default_rng(20261129).random((1, 3, 240, 300), dtype=np.float32)
open(sys.argv[1], "wb").write(numpy_helper.from_array(x, "in0").SerializeToString())
PY
printf 'base = "edge"\n[memory]\ncapacity_mib = 160\n' >"$tmp/edge-160mib.toml"
failed=0
passed=0
check() {
  local model="$1" name="$2" rows="$3"
  shift 3
  local path="$models_root/$model.param"
  if [ ! -d "$tmp/untiled-$model" ]; then
    "$loomc" run "$path" --restore --device dc --inputs "$tmp/in" --outputs "$tmp/untiled-$model" >/dev/null
  fi
  local report
  report="$("$loomc" run "$path" --restore --inputs "$tmp/in" --outputs "$tmp/$name" "$@")"
  echo "$model $name: ${report#*; }"
  local grid
  grid="$(sed -n 's/.*; [0-9]* tiles (\([0-9]*x[0-9]*\)).*/\1/p' <<<"$report")"
  if [[ -z "$grid" || "${grid%x*}" -lt "$rows" || "${grid#*x}" -lt 2 ]]; then
    echo "$model $name: tiled ${grid:-not at all}, wanted at least ${rows}x2"
    failed=$((failed + 1))
  elif cmp "$tmp/untiled-$model/output_0.pb" "$tmp/$name/output_0.pb"; then
    echo "$model $name: identical to the untiled output"
    passed=$((passed + 1))
  else
    echo "$model $name: differs from the untiled output"
    failed=$((failed + 1))
  fi
}
check realcugan-se/up2x-conservative tile48 2 --device dc --tile 48
check realcugan-se/up2x-conservative tile48-recomputed 2 --device dc --tile 48 --carry-mib 0
check realcugan-se/up3x-denoise3x tile48 2 --device dc --tile 48
check realcugan-se/up4x-no-denoise tile48 2 --device dc --tile 48
check waifu2x-cunet/noise1_scale2.0x_model tile48 2 --device dc --tile 48
check waifu2x-cunet/noise2_model tile48 1 --device dc --tile 48
check waifu2x-upconv7/scale2.0x_model tile48 2 --device dc --tile 48
check realcugan-se/up2x-conservative auto160mib 1 --device "$tmp/edge-160mib.toml" --tile auto
echo "$passed passed, $failed failed"
exit $((failed > 0))
