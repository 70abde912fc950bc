#!/usr/bin/env bash
# Subgraph tuning of real weights: animevideov3 x4 (scripts/fetch-models) at 240x320 on edge, where
# its maps overflow L2. `loomc tune --mode all` must choose and keep at least one split region and
# be no slower than op tuning alone; the tuned, split model it writes must give the untuned
# model's output byte for byte through `loomc run`. Exits 77 (skipped) when the models cannot be
# fetched.
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
x = np.random.default_rng(20261126).random((1, 3, 240, 320), dtype=np.float32)
open(sys.argv[1], "wb").write(numpy_helper.from_array(x, "data").SerializeToString())
PY
report="$("$loomc" tune "$model" --shape data=1x3x240x320 --device edge --mode all -o "$tmp/split.loom")"
echo "$report"
grep -q ' yes$' <<<"$report" || { echo "subgraph: no region kept"; exit 1; }
grep -q 'wrote .*[1-9][0-9]* split regions' <<<"$report" || { echo "subgraph: the model written has no region"; exit 1; }
"$loomc" run "$model" --shape data=1x3x240x320 --no-cache --inputs "$tmp/in" --outputs "$tmp/whole"
"$loomc" run "$tmp/split.loom" --inputs "$tmp/in" --outputs "$tmp/split"
cmp "$tmp/whole/output_0.pb" "$tmp/split/output_0.pb" || { echo "subgraph: the split model's output differs"; exit 1; }
echo "subgraph: ok"
