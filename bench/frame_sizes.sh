#!/usr/bin/env bash
# Any frame size on any device: every restoration family's x2 model on 1920x1080 frames through
# `loomd run` on `edge` (8 GiB), where the engine picks what fits the device's memory (frames in
# flight, then tiles) and logs it, against the same frames on `dc` (32 GiB) with whole frames
# and one frame in flight, the unsplit path: the plan chosen, frames per second over the whole
# run's wall time, peak RSS, and the ratio of the two. The outputs (ffv1) are compared frame for
# frame, so a plan that changed a pixel shows.
#
# With TILE=N the same frames also run on dc over tiles of N input pixels, one frame in flight:
# the cost of exact tiling against whole frames, for the U-Nets (Real-CUGAN, CUnet) with one
# pass over a frame's tiles per squeeze-and-excitation mean before the output's pass
# (executor/tiled.hpp); those frames too must be the whole-frame run's.
#
# Usage: bench/frame_sizes.sh [BUILD_DIR]   (default build)
# Environment: SIZE (1920x1080), FRAMES (3), MODELS (a grep -E filter on the names below),
#   THREADS (the device's host threads; default: one per core), MODEL_DIR (the models folder,
#   default ~/.cache/loom/models as scripts/fetch-models fills it), DC (1: also run on dc; 0: not),
#   EDGE (1: run on edge; 0: not), TILE (0: no tiled run; N: the tiled run's step, with DC=1),
#   TILE_CARRY_MIB (the tiled run's restore.tile_carry_mib; default the engine's: values handed
#   on between the passes in device memory where it has room, else through the host; 0: every
#   pass from the window). The tiled line says where ("@device" or "@host").
# Prints one line per model and device, and one JSON line per model.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
size="${SIZE:-1920x1080}"
frames="${FRAMES:-3}"
filter="${MODELS:-.}"
models_dir="${MODEL_DIR:-${LOOM_MODEL_DIR:-$HOME/.cache/loom/models}}"
dc="${DC:-1}"
edge="${EDGE:-1}"
tile="${TILE:-0}"
carry=()
[ -n "${TILE_CARRY_MIB:-}" ] && carry=(--set "restore.tile_carry_mib=$TILE_CARRY_MIB")
threads=()
[ -n "${THREADS:-}" ] && threads=(--threads "$THREADS")

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# One family each, x2: Real-ESRGAN animevideov3, Real-CUGAN, waifu2x CUnet and UpConv7.
models=(
  "animevideov3 x2|realesr-animevideov3/realesr-animevideov3-x2.param"
  "Real-CUGAN up2x|realcugan-se/up2x-conservative.param"
  "CUnet x2|waifu2x-cunet/scale2.0x_model.param"
  "UpConv7 x2|waifu2x-upconv7/noise0_scale2.0x_model.param"
)

clip="$tmp/in.mkv"
ffmpeg -v error -f lavfi -i "testsrc2=size=$size:rate=24" -frames:v "$frames" -c:v ffv1 "$clip"
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "frame_sizes: $size, $frames frames, $(nproc) cores ($cpu)"

# Runs one model on one device; prints "wall_s fps rss_peak_mib in_flight tiles window isa passes
# p50_s" (p50_s: the restore stage's median frame latency, the steady state beside the wall time)
# and keeps the output as $tmp/<tag>.mkv.
run_one() {
  local model="$1" device="$2" tag="$3"
  shift 3
  local out="$tmp/$tag.mkv" sum="$tmp/$tag.json"
  local t0 t1
  t0="$(date +%s.%N)"
  "$build/loomd" run "$root/configs/pipelines/restore-x2.toml" \
    --input "$clip" --output "$out" --device "$device" "${threads[@]}" --models "$models_dir" \
    --cache-dir "$tmp/cache" --summary "$sum" --set "restore.model=\"$models_dir/$model\"" \
    --set 'encode.codec="ffv1"' --set 'decode.hwaccel="none"' "$@" > "$tmp/$tag.log" 2>&1 ||
    { echo "$tag FAILED: $(grep 'error:' "$tmp/$tag.log" | tail -1)" >&2; echo "FAILED"; return 0; }
  t1="$(date +%s.%N)"
  /usr/bin/python3 - "$sum" "$t0" "$t1" "$frames" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
wall = float(sys.argv[3]) - float(sys.argv[2])  # the whole process: start-up and compile included
r = {x["name"]: x for x in s["stages"]}["restore"]
window = "x".join(str(v) for v in r.get("tile_window", [])) or "-"
print(f"{wall:.2f} {int(sys.argv[4]) / wall:.4f} {s['memory']['rss_peak_mib']:.0f} {r.get('in_flight')} "
      f"{r.get('tiles', 0)} {window} {s['device'].get('host_isa', '?')} {r.get('tile_passes', 1)}"
      f"/{r.get('tile_carried_mib', 0):.0f}MiB{'@' + r['tile_carried_in'] if 'tile_carried_in' in r else ''} "
      f"{r.get('latency_ms_p50', 0) / 1000:.2f}")
EOF
}

for entry in "${models[@]}"; do
  name="${entry%%|*}"
  model="${entry#*|}"
  echo "$name" | grep -Eq "$filter" || continue
  [ -f "$models_dir/$model" ] || { echo "$name: $models_dir/$model is missing (scripts/fetch-models)"; continue; }
  tag="$(echo "$name" | tr ' ' '_')"
  json="{\"model\":\"$name\",\"size\":\"$size\",\"frames\":$frames"
  if [ "$edge" = 1 ]; then
    read -r e_wall e_fps e_rss e_flight e_tiles e_window isa e_passes _ < <(run_one "$model" edge "$tag-edge")
    if [ "$e_wall" = FAILED ]; then
      echo "$json,\"edge\":\"failed\"}"
      continue
    fi
    plan="$e_flight in flight"
    [ "$e_tiles" != 0 ] && plan="$e_tiles tiles of $e_window, passes/handed on $e_passes"
    echo "$name on edge ($isa): $e_fps fps ($e_wall s for $frames frames), peak RSS $e_rss MiB, $plan"
    json="$json,\"isa\":\"$isa\",\"edge\":{\"fps\":$e_fps,\"wall_s\":$e_wall,\"rss_mib\":$e_rss,\"in_flight\":$e_flight,\"tiles\":$e_tiles,\"passes_handed_on\":\"$e_passes\"}"
  fi
  if [ "$dc" = 1 ]; then
    read -r d_wall d_fps d_rss _ _ _ isa _ d_p50 < <(run_one "$model" dc "$tag-dc" --set restore.tile=-1 --set restore.in_flight=1)
    [ "$d_wall" = FAILED ] && { echo "$json,\"dc\":\"failed\"}"; continue; }
    echo "$name on dc ($isa), whole frames, 1 in flight: $d_fps fps ($d_wall s), peak RSS $d_rss MiB"
    json="$json,\"dc\":{\"fps\":$d_fps,\"wall_s\":$d_wall,\"rss_mib\":$d_rss}"
    if [ "$edge" = 1 ]; then
      same="$(cmp -s <(ffmpeg -v error -i "$tmp/$tag-edge.mkv" -f rawvideo -) <(ffmpeg -v error -i "$tmp/$tag-dc.mkv" -f rawvideo -) && echo yes || echo NO)"
      ratio="$(/usr/bin/python3 -c "print(f'{$d_wall / $e_wall:.3f}')")"
      echo "$name: edge / dc speed $ratio; same frames: $same"
      json="$json,\"edge_over_dc\":$ratio,\"same_frames\":\"$same\""
    fi
    if [ "$tile" != 0 ]; then
      read -r t_wall t_fps t_rss _ t_tiles t_window _ t_passes t_p50 < <(run_one "$model" dc "$tag-tiled" --set "restore.tile=$tile" --set restore.in_flight=1 "${carry[@]}")
      [ "$t_wall" = FAILED ] && { echo "$json,\"tiled\":\"failed\"}"; continue; }
      same="$(cmp -s <(ffmpeg -v error -i "$tmp/$tag-dc.mkv" -f rawvideo -) <(ffmpeg -v error -i "$tmp/$tag-tiled.mkv" -f rawvideo -) && echo yes || echo NO)"
      ratio="$(/usr/bin/python3 -c "print(f'{$t_wall / $d_wall:.3f}')")"
      steady="$(/usr/bin/python3 -c "print(f'{$t_p50 / $d_p50:.3f}' if $d_p50 > 0 else '-')")"
      echo "$name on dc over $t_tiles tiles of $t_window, passes/handed on $t_passes: $t_fps fps ($t_wall s), peak RSS $t_rss MiB; tiled / whole time $ratio (steady state: median frame $t_p50 s / $d_p50 s = $steady); same frames: $same"
      json="$json,\"tiled\":{\"fps\":$t_fps,\"wall_s\":$t_wall,\"rss_mib\":$t_rss,\"tiles\":$t_tiles,\"window\":\"$t_window\",\"passes_handed_on\":\"$t_passes\",\"p50_s\":$t_p50},\"tiled_over_whole\":$ratio,\"tiled_over_whole_p50\":\"$steady\",\"tiled_same_frames\":\"$same\""
    fi
  fi
  echo "$json}"
done
