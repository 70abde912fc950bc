#!/usr/bin/env bash
# Tiled runs of real weights: animevideov3 x4 (scripts/fetch-models) on a generated 180x320
# frame through `loomc run`: untiled, over 32-pixel tiles (both axes tiled), and over tiles
# chosen from the memory of an edge device cut to 28 MiB (less than the untiled arena, 31.6 MiB); both
# tiled outputs must be the untiled output byte for byte. Exits 77 (skipped) when the models
# cannot be fetched.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loomc="$1"
model_dir="$("$root/scripts/fetch-models" 2>/dev/null | tail -n 1)" || { echo "models unavailable: skipped"; exit 77; }
model="$model_dir/realesr-animevideov3-x4.param"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/in"
/usr/bin/python3 - "$tmp/in/input_0.pb" <<'PY'
import sys
import numpy as np
from onnx import numpy_helper
x = np.random.default_rng(20261123).random((1, 3, 180, 320), dtype=np.float32)
open(sys.argv[1], "wb").write(numpy_helper.from_array(x, "data").SerializeToString())
PY
printf 'base = "edge"\n[memory]\ncapacity_mib = 28\n' >"$tmp/edge-28mib.toml"
"$loomc" run "$model" --inputs "$tmp/in" --outputs "$tmp/untiled"
failed=0
check() {
  local name="$1"
  shift
  local report
  report="$("$loomc" run "$model" --inputs "$tmp/in" --outputs "$tmp/$name" "$@")"
  echo "$report"
  local tiles
  tiles="$(sed -n 's/.*; \([0-9]*\) tiles (.*/\1/p' <<<"$report")"
  if [[ -z "$tiles" || "$tiles" -lt 2 ]]; then
    echo "$name: ran as one tile"
    failed=$((failed + 1))
  elif cmp "$tmp/untiled/output_0.pb" "$tmp/$name/output_0.pb"; then
    echo "$name: identical to the untiled output"
  else
    echo "$name: differs from the untiled output"
    failed=$((failed + 1))
  fi
}
check tile32 --tile 32
check auto28mib --tile auto --device "$tmp/edge-28mib.toml"
echo "$((2 - failed)) passed, $failed failed"
exit $((failed > 0))
