#!/usr/bin/env bash
# Pipeline benchmark (issue 12): restore a 10 s 480p clip (FFmpeg's mandelbrot source, with an
# AAC audio track) with Real-ESRGAN animevideov3 x2, fp32, 2 threads, in this one script:
#
#  1. Loom: `loomd run configs/pipelines/restore-x2.toml` (decode, device-side YUV conversion,
#     the model with 3 frames in flight, conversion back, encode, audio copied): frames over the
#     command's whole wall time (start-up and compile-cache hit included), and the run alone.
#  2. The infer stage alone on frames of the same size, run as the pipeline runs the model (its
#     descriptor's padding and crop): `loomc bench --restore --frames N --in-flight 3`
#     (frames over its total wall time). Target: the pipeline at >= 90% of it.
#  3. The serial chain a user scripts today, same frames, same model (ONNX export at the
#     clip's static shape, ONNX Runtime's best form): ffmpeg decodes to raw RGB, ONNX Runtime
#     runs every frame (bench/ort/serial.mjs), ffmpeg encodes with the audio copied. Target:
#     Loom at >= 2x its wall time.
#  4. Memory: peak RSS of the 480p run and of one 4K frame (dc preset), RSS growth over the clip.
#
# Usage: bench/pipeline.sh [BUILD_DIR]    Environment: SECONDS_CLIP (10), FPS (24), SIZE (640x480),
#   THREADS (2), PRECISIONS ("fp32"; "fp32 fp16" adds the fp16 rows), SKIP_4K (unset), PYTHON,
#   LOOM_CACHE.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
secs="${SECONDS_CLIP:-10}"
fps="${FPS:-24}"
precisions="${PRECISIONS:-fp32}"
size="${SIZE:-640x480}"
threads="${THREADS:-2}"
python="${PYTHON:-/usr/bin/python3}"
cache="${LOOM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom}"
w="${size%x*}" h="${size#*x}"
export LOOM_THREADS="$threads"

# shellcheck source=bench/clip.sh
source "$root/bench/clip.sh"
die() { echo "pipeline.sh: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
for b in loomd loomc; do [[ -x "$build/$b" ]] || die "$build/$b is missing (make build)"; done
model_dir="$("$root/scripts/fetch-models" | tail -n 1)"
ort_dir="$("$root/scripts/setup-ort" | tail -n 1)"
param="$model_dir/realesr-animevideov3-x2.param"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

clip="$tmp/clip.mkv"
make_clip "$clip" "$size" "$fps" "$secs"
frames=$(count_frames "$clip")
echo "clip: $size, $secs s at $fps fps, $frames frames, audio; cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "threads: $threads"

# 1. Loom (the compile cache is warmed first by a run on the clip's first frame: a user's
#    second job of this size).
run_loom() {  # precision out summary
  local t0 t1
  t0=$(now)
  "$build/loomd" run "$root/configs/pipelines/restore-x2.toml" --input "$clip" --output "$2" \
    --models "$(dirname "$model_dir")" --set restore.precision="$1" --summary "$3" 2>/dev/null
  t1=$(now)
  echo "$t0 $t1"
}
ffmpeg -v error -i "$clip" -frames:v 1 -c:v libx264 "$tmp/first.mkv"
for p in $precisions; do
  "$build/loomd" run "$root/configs/pipelines/restore-x2.toml" --input "$tmp/first.mkv" --output "$tmp/w.mkv" \
    --models "$(dirname "$model_dir")" --set restore.precision=$p --summary /dev/null 2>/dev/null
  read -r t0 t1 < <(run_loom "$p" "$tmp/loom-$p.mkv" "$tmp/loom-$p.json")
  echo "$t0 $t1" > "$tmp/loom-$p.time"
  # 2. The infer stage alone.
  "$build/loomc" bench "$param" --shape "data=1x3x${h}x${w}" --frames "$frames" --in-flight 3 --precision "$p" --restore \
    --json > "$tmp/infer-$p.json"
done

# 3. The serial chain with ONNX Runtime.
onnx="$cache/onnx/realesr-animevideov3-x2-1x3x${h}x${w}.onnx"
mkdir -p "$cache/onnx"
[[ -s "$onnx" ]] || "$python" "$root/scripts/ncnn2onnx.py" "$param" "${param%.param}.bin" "$onnx" \
  --shape "1x3x${h}x${w}" >/dev/null
s0=$(now)
ffmpeg -v error -i "$clip" -f rawvideo -pix_fmt rgb24 "$tmp/in.rgb"
node "$root/bench/ort/serial.mjs" --model "$onnx" --width "$w" --height "$h" --input "$tmp/in.rgb" \
  --output "$tmp/out.rgb" --threads "$threads" --ort-dir "$ort_dir" > "$tmp/ort.json"
ffmpeg -v error -f rawvideo -pix_fmt rgb24 -s "$((2 * w))x$((2 * h))" -r "$fps" -i "$tmp/out.rgb" -i "$clip" \
  -map 0:v -map 1:a -c:v libx264 -crf 18 -pix_fmt yuv420p -c:a copy "$tmp/serial.mkv"
s1=$(now)

# 4. One 4K frame on edge (tiled when the untiled model does not fit).
if [[ -z "${SKIP_4K:-}" ]]; then
  ffmpeg -v error -f lavfi -i "mandelbrot=size=3840x2160:rate=24,trim=duration=0.04" -c:v libx264 -crf 20 \
    -pix_fmt yuv420p "$tmp/4k.mkv"
  "$build/loomd" run "$root/configs/pipelines/restore-x2.toml" --input "$tmp/4k.mkv" \
    --output "$tmp/4k-out.mkv" --models "$(dirname "$model_dir")" --set restore.precision=fp32 \
    --summary "$tmp/4k.json" 2>/dev/null || echo '{"status": "failed"}' > "$tmp/4k.json"
else
  echo '{"status": "skipped"}' > "$tmp/4k.json"
fi

"$python" - "$tmp" "$frames" "$s0" "$s1" $precisions <<'PY'
import json, sys
tmp, frames = sys.argv[1], int(sys.argv[2])
s0, s1 = map(float, sys.argv[3:5])
load = lambda n: json.load(open(f"{tmp}/{n}"))
rows = []
for prec in sys.argv[5:]:
    t0, t1 = map(float, open(f"{tmp}/loom-{prec}.time").read().split())
    cmd_s, summ, inf = t1 - t0, load(f"loom-{prec}.json"), load(f"infer-{prec}.json")
    infer_fps = inf["frames"] / (inf["wall_ms"] / 1000)
    st = {s["name"]: s for s in summ["stages"]}
    rows.append((prec, cmd_s, summ, infer_fps, st))
ort = load("ort.json")
serial_s = s1 - s0
print()
print("| run | frames | wall s | fps (frames / total wall) |")
print("|---|---|---|---|")
for prec, cmd_s, summ, infer_fps, st in rows:
    print(f"| Loom pipeline {prec} (loomd run, whole command) | {summ['frames']} | {cmd_s:.1f} | {summ['frames'] / cmd_s:.3f} |")
    print(f"| Loom pipeline {prec} (run only) | {summ['frames']} | {summ['wall_s']:.1f} | {summ['fps']:.3f} |")
    print(f"| Loom infer stage alone {prec} (loomc bench, 3 in flight) | {frames} | {frames / infer_fps:.1f} | {infer_fps:.3f} |")
print(f"| serial chain: ffmpeg decode + ONNX Runtime {ort['ort_version']} + ffmpeg encode | {ort['frames']} | {serial_s:.1f} | {ort['frames'] / serial_s:.3f} |")
print(f"| (ONNX Runtime alone inside it) | {ort['frames']} | {ort['wall_s']:.1f} | {ort['frames'] / ort['wall_s']:.3f} |")
print()
for prec, cmd_s, summ, infer_fps, st in rows:
    print(f"{prec}: pipeline (whole command) / infer stage alone = {summ['frames'] / cmd_s / infer_fps:.3f} "
          f"(target >= 0.90); run only: {summ['fps'] / infer_fps:.3f}")
    print(f"{prec}: serial chain wall / Loom wall = {serial_s / cmd_s:.2f}x (target >= 2x)")
    eng = summ["device"]["engines"]
    print(f"{prec}: simulated {summ['device']['sim_fps']:.1f} fps; engine utilisation: " +
          ", ".join(f"{k} {v['utilisation'] * 100:.1f}%" for k, v in eng.items() if v["tasks"]))
    print(f"{prec}: host link per frame {st['restore']['h2d_bytes_per_frame']:.0f} B up / "
          f"{st['restore']['d2h_bytes_per_frame']:.0f} B down (float RGB: {st['restore']['h2d_bytes_per_frame_float_rgb']:.0f}"
          f" / {st['restore']['d2h_bytes_per_frame_float_rgb']:.0f})")
    m = summ["memory"]
    print(f"{prec}: RSS start {m['rss_start_mib']:.0f} MiB, after {m['frames_at_warm']} frames "
          f"{m['rss_warm_mib']:.0f} MiB, end {m['rss_end_mib']:.0f} MiB (growth over the second half "
          f"{m['rss_growth_after_warm_mib']:+.1f} MiB), peak {m['rss_peak_mib']:.0f} MiB")
k4 = load("4k.json")
if "memory" in k4:
    r4 = {x["name"]: x for x in k4["stages"]}["restore"]
    print(f"4K frame (edge, fp32): status {k4['status']}, {k4['wall_s']:.1f} s, tiles {r4.get('tiles', 1)}, "
          f"RSS peak {k4['memory']['rss_peak_mib']:.0f} MiB")
else:
    print(f"4K frame: {k4['status']}")
PY
