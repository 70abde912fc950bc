#!/usr/bin/env bash
# The auto-tuner (issue 15): for Real-ESRGAN animevideov3 x4 at 240x320 and 480x720 and a
# ResNet-50 (bench/gen_resnet50.py, random weights, 224x224), on the edge and dc presets:
#
#  1. `loomc tune` from an empty knowledge base: the model's simulated kernel time with the
#     default heuristic's tilings against the tuned ones (the peer: the unoptimised path), the
#     share of the Cube roofline of its 3x3 64->64 convolutions where it has them, and the wall
#     time of the tuning;
#  2. the same again with the knowledge base it filled (every launch a hit): the wall time;
#  3. search quality (bench/bench_tune.cpp) on every launch whose space can be costed whole: the
#     genetic / tree search against the exhaustive optimum and against random search with the
#     same budget, at 5% of each space's legal points and at the tuner's default cap (20000).
#
# Usage: bench/tune.sh [BUILD_DIR]   (default build)
# Environment: DEVICES ("edge dc"), THREADS (2), SEEDS (3), QUALITY (1: run part 3), PYTHON.
# Prints tables and one JSON line per model and device.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
devices="${DEVICES:-edge dc}"
threads="${THREADS:-2}"
seeds="${SEEDS:-3}"
quality="${QUALITY:-1}"
python="${PYTHON:-/usr/bin/python3}"
loomc="$build/loomc"
quality_bin="$build/bench/loom_bench_tune"

die() {
  echo "tune.sh: error: $*" >&2
  exit 1
}
[[ -x "$loomc" && -x "$quality_bin" ]] || die "$loomc or $quality_bin is missing (make build)"
[[ -x "$python" ]] || python="$(command -v python3)"

model_dir="$("$root/scripts/fetch-models" | tail -n 1)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" "$root/bench/gen_resnet50.py" "$tmp/resnet50.onnx" --size 224

x4="$model_dir/realesr-animevideov3-x4.param"
models=(
  "animevideov3-x4 240x320|$x4|--shape data=1x3x240x320"
  "animevideov3-x4 480x720|$x4|--shape data=1x3x480x720"
  "resnet50 224|$tmp/resnet50.onnx|"
)

echo "== tuning: simulated kernel time, default heuristic -> tuned, $threads threads"
printf "%-24s %-5s %12s %12s %8s %10s %10s %10s %9s\n" model device "default ms" "tuned ms" speedup "cold s" "warm s" "kb hits" "conv3x3"
for d in $devices; do
  for entry in "${models[@]}"; do
    IFS='|' read -r name path shape <<<"$entry"
    kb="$tmp/$d-${name// /_}.kb"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$loomc" tune "$path" $shape --device "$d" --kb "$kb" --threads "$threads" --json >"$tmp/cold.json"
    t1=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$loomc" tune "$path" $shape --device "$d" --kb "$kb" --threads "$threads" --json >"$tmp/warm.json"
    t2=$(date +%s.%N)
    "$python" - "$tmp/cold.json" "$tmp/warm.json" "$name" "$d" "$t0" "$t1" "$t2" <<'EOF'
import json, sys
cold, warm = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
name, dev = sys.argv[3], sys.argv[4]
t0, t1, t2 = map(float, sys.argv[5:8])
# The 3x3 64->64 convolutions (animevideov3's body): their share of the Cube roofline, tuned.
roof = [l["cube_roofline"] for l in cold["launches"]
        if l["kernel"] == "conv" and "[64,64,3,3]" in l["key"]]
conv = f"{100 * max(roof):.1f}%" if roof else "-"
print(f"{name:<24} {dev:<5} {cold['default_ms']:12.3f} {cold['tuned_ms']:12.3f} {cold['speedup']:7.2f}x "
      f"{t1 - t0:10.2f} {t2 - t1:10.2f} {warm['kb_hits']:>4}/{len(warm['launches']):<5} {conv:>9}")
print(json.dumps({"model": name, "device": dev, "default_ms": cold["default_ms"], "tuned_ms": cold["tuned_ms"],
                  "speedup": cold["speedup"], "cold_s": t1 - t0, "warm_s": t2 - t1, "warm_kb_hits": warm["kb_hits"],
                  "launches": len(warm["launches"]), "trials": cold["trials"],
                  "evaluations_per_s": cold["evaluations_per_s"], "conv3x3_64_roofline": max(roof) if roof else None}),
      file=sys.stderr)
EOF
  done
done

[[ "$quality" == 1 ]] || exit 0
echo
echo "== search quality against the exhaustive optimum (within 3%), random search at the same budget"
for d in $devices; do
  for entry in "animevideov3-x4 240x320|$x4|--shape data=1x3x240x320" "resnet50 224|$tmp/resnet50.onnx|"; do
    IFS='|' read -r name path shape <<<"$entry"
    for cap in 0 20000; do
      # shellcheck disable=SC2086
      "$quality_bin" "$path" $shape --device "$d" --seeds "$seeds" --trials "$cap" | tail -n 1 | sed "s|^[^:]*:|$name:|"
    done
  done
done
