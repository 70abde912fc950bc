#!/usr/bin/env bash
# The memory-plan targets on the real models: animevideov3 x2/x3/x4 compiled at 240x320 from
# their ncnn files; the arena must be within 5% of the liveness lower bound and at least 2x
# below one buffer per tensor. Exits 77 (skipped) when the models cannot be fetched.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loomc="$1"
model_dir="$("$root/scripts/fetch-models" 2>/dev/null | tail -n 1)" || { echo "models unavailable: skipped"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for scale in 2 3 4; do
  "$loomc" compile "$model_dir/realesr-animevideov3-x$scale.param" --shape data=1x3x240x320 -o "$tmp/x$scale.loom" >/dev/null
  "$loomc" inspect "$tmp/x$scale.loom" --json >"$tmp/x$scale.json"
done
exec /usr/bin/python3 - "$tmp" <<'PY'
import json, sys
passed = failed = 0
for scale in (2, 3, 4):
    plan = json.load(open(f"{sys.argv[1]}/x{scale}.json"))["plan"]
    arena, bound, naive = plan["arena_bytes"], plan["lower_bound"], plan["naive"]
    ok = arena <= bound * 1.05 and naive >= 2 * arena
    print(f"x{scale}: arena {arena / 2**20:.2f} MiB, bound {bound / 2**20:.2f} MiB, naive {naive / 2**20:.2f} MiB "
          f"({arena / bound:.3f} of the bound, {naive / arena:.1f}x below naive): {'ok' if ok else 'FAIL'}")
    passed, failed = passed + ok, failed + (not ok)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
