#!/usr/bin/env bash
# The GStreamer element against `loomd run` (issue 30): the 10 s 480p clip of bench/pipeline.sh
# (FFmpeg's mandelbrot source, H.264, AAC audio), Real-ESRGAN animevideov3 x2, fp32, 3 frames in
# flight, the same x264 settings (CRF 18, preset medium), in this one script:
#
#  1. `loomd run configs/pipelines/restore-x2.toml` (decode, restore, encode, audio copied):
#     frames over the command's whole wall time.
#  2. gst-launch-1.0 filesrc ! decodebin ! videoconvert ! loomrestore ! x264enc ! matroskamux !
#     filesink (video only, as users write it): frames over the command's whole wall time.
#     Target: within 10% of 1.
#  3. The element's own overhead per frame (everything but the model): videotestsrc frames of the
#     clip's size through loomrestore into fakesink, against the model alone on as many frames
#     (`loomc bench --restore --in-flight 3`: the restore engine's model on tensors, no media-engine
#     conversions); the difference over the frames, whole and without the start-up (a 2-frame run).
#
# Both runs are warmed first (the compile cache holds the model for this size: a user's second
# job). Usage: bench/gstreamer.sh [BUILD_DIR]   Environment: SECONDS_CLIP (10), FPS (24),
# SIZE (640x480), THREADS (2), PYTHON.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
secs="${SECONDS_CLIP:-10}"
fps="${FPS:-24}"
size="${SIZE:-640x480}"
threads="${THREADS:-2}"
python="${PYTHON:-/usr/bin/python3}"
w="${size%x*}" h="${size#*x}"
export LOOM_THREADS="$threads"
export GST_PLUGIN_PATH="$build/gstreamer${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"

# shellcheck source=bench/clip.sh
source "$root/bench/clip.sh"
die() { echo "gstreamer.sh: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
for b in loomd loomc gstreamer/libgstloom.so; do [[ -e "$build/$b" ]] || die "$build/$b is missing (make build)"; done
command -v gst-launch-1.0 >/dev/null || die "gst-launch-1.0 is missing (scripts/bootstrap installs it)"
model_dir="$("$root/scripts/fetch-models" | tail -n 1)"
param="$model_dir/realesr-animevideov3-x2.param"
models="$(dirname "$model_dir")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

clip="$tmp/clip.mkv"
make_clip "$clip" "$size" "$fps" "$secs"
frames=$(count_frames "$clip")
isa=$("$build/loomc" device-info --json 2>/dev/null | "$python" -c 'import json,sys; print(json.load(sys.stdin)["host_kernels"]["isa"])' || echo "?")
echo "clip: $size, $secs s at $fps fps, $frames frames, audio; cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "threads: $threads; kernels: $isa; GStreamer $(gst-launch-1.0 --gst-version | head -1 | awk '{print $NF}')"

loomd_run() {  # input output
  "$build/loomd" run "$root/configs/pipelines/restore-x2.toml" --input "$1" --output "$2" --models "$models" \
    --summary /dev/null 2>/dev/null
}
gst_run() {  # input output
  gst-launch-1.0 -q filesrc location="$1" ! decodebin ! videoconvert ! \
    loomrestore model=realesr-animevideov3-x2 "models-dir=$model_dir" in-flight=3 ! \
    x264enc pass=qual quantizer=18 speed-preset=medium ! matroskamux ! filesink location="$2" >/dev/null
}
ffmpeg -v error -i "$clip" -frames:v 2 -c:v libx264 "$tmp/first.mkv"
loomd_run "$tmp/first.mkv" "$tmp/w1.mkv"
gst_run "$tmp/first.mkv" "$tmp/w2.mkv"

t0=$(now); loomd_run "$clip" "$tmp/loomd.mkv"; t1=$(now)
g0=$(now); gst_run "$clip" "$tmp/gst.mkv"; g1=$(now)
gst_frames=$(count_frames "$tmp/gst.mkv")
loomd_frames=$(count_frames "$tmp/loomd.mkv")

# 3. The element alone (raw frames in, nothing encoded) against the engine alone.
element_run() {  # frames
  gst-launch-1.0 -q videotestsrc num-buffers="$1" pattern=ball ! "video/x-raw,format=I420,width=$w,height=$h" ! \
    loomrestore model=realesr-animevideov3-x2 "models-dir=$model_dir" in-flight=3 ! fakesink >/dev/null
}
s0=$(now); element_run 2; s1=$(now)  # start-up: the process, the plugin, the model from the compile cache
e0=$(now); element_run "$frames"; e1=$(now)
"$build/loomc" bench "$param" --shape "data=1x3x${h}x${w}" --frames "$frames" --in-flight 3 --restore --json \
  > "$tmp/engine.json"

"$python" - "$tmp" "$frames" "$loomd_frames" "$gst_frames" "$t0" "$t1" "$g0" "$g1" "$e0" "$e1" "$s0" "$s1" <<'PY'
import json, sys
tmp = sys.argv[1]
frames, loomd_frames, gst_frames = map(int, sys.argv[2:5])
t0, t1, g0, g1, e0, e1, s0, s1 = map(float, sys.argv[5:13])
eng = json.load(open(f"{tmp}/engine.json"))
loomd_s, gst_s, elem_s, eng_s = t1 - t0, g1 - g0, e1 - e0, eng["wall_ms"] / 1000
print()
print("| run | frames | wall s | fps (frames / total wall) |")
print("|---|---|---|---|")
print(f"| loomd run restore-x2 (decode, restore, x264 CRF 18 medium, audio copied) | {loomd_frames} | {loomd_s:.1f} | {loomd_frames / loomd_s:.3f} |")
print(f"| gst-launch-1.0 decodebin ! videoconvert ! loomrestore ! x264enc ! matroskamux | {gst_frames} | {gst_s:.1f} | {gst_frames / gst_s:.3f} |")
print(f"| gst-launch-1.0 videotestsrc ! loomrestore ! fakesink | {frames} | {elem_s:.1f} | {frames / elem_s:.3f} |")
print(f"| the model alone (loomc bench --restore: tensors, 3 in flight) | {eng['frames']} | {eng_s:.1f} | {eng['frames'] / eng_s:.3f} |")
print()
print(f"gst-launch wall / loomd run wall = {gst_s / loomd_s:.3f} (target within 10%: 0.90-1.10)")
# Everything but the model: the element line's time over the model's alone (the restore engine on
# tensors: no media-engine conversions, no GStreamer), whole, and without the start-up (a 2-frame
# run's wall, its 2 frames' model time taken out).
model_s = eng_s * frames / eng["frames"]
start_s = (s1 - s0) - 2 * model_s / frames
print(f"element overhead per frame, everything but the model (over {frames} frames): "
      f"{(elem_s - model_s) / frames * 1000:.1f} ms ({(elem_s / model_s - 1) * 100:+.1f}% of the model's time); "
      f"start-up {start_s:.2f} s; without it {(elem_s - start_s - model_s) / frames * 1000:.1f} ms "
      f"({((elem_s - start_s) / model_s - 1) * 100:+.1f}%)")
PY
