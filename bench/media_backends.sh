#!/usr/bin/env bash
# Loom's two media back ends against the programs of their own libraries (issue 30): the 10 s 480p
# clip of bench/pipeline.sh (H.264 + AAC) decoded and encoded again with x264 at CRF 18, preset
# medium, audio copied, no model in between (so that the media I/O is all that is timed), in this
# one script:
#
#  1. ffmpeg -i clip -c:v libx264 -crf 18 -preset medium -c:a copy        FFmpeg's own program
#  2. loomd run (decode -> encode), backend = "ffmpeg" on both sides
#  3. gst-launch-1.0 filesrc ! decodebin ! x264enc pass=qual quantizer=18 speed-preset=medium !
#     matroskamux: GStreamer's own program (video only: a gst-launch line that also copies the
#     audio through parsebin stalls at preroll, its parsed video's fakesink holding the demuxer;
#     the audio copy is a few hundred packets)
#  4. loomd run, backend = "gstreamer" on both sides
#  5. the two mixed (GStreamer decoding, FFmpeg encoding; and the reverse)
#
# Frames over each command's whole wall time; the ratios are each back end against its own
# library's program (1.0: no cost of its own). Usage: bench/media_backends.sh [BUILD_DIR]
# Environment: SECONDS_CLIP (10), FPS (24), SIZE (640x480), PYTHON.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
secs="${SECONDS_CLIP:-10}"
fps="${FPS:-24}"
size="${SIZE:-640x480}"
python="${PYTHON:-/usr/bin/python3}"

# shellcheck source=bench/clip.sh
source "$root/bench/clip.sh"
die() { echo "media_backends.sh: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
[[ -x "$build/loomd" ]] || die "$build/loomd is missing (make build)"
command -v gst-launch-1.0 >/dev/null || die "gst-launch-1.0 is missing (scripts/bootstrap installs it)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

clip="$tmp/clip.mkv"
make_clip "$clip" "$size" "$fps" "$secs"
frames=$(count_frames "$clip")
echo "clip: $size, $secs s at $fps fps, $frames frames, AAC audio; cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
  "FFmpeg $(ffmpeg -version | head -1 | awk '{print $3}'), GStreamer $(gst-launch-1.0 --gst-version | head -1 | awk '{print $NF}')"

cat > "$tmp/transcode.toml" <<'TOML'
[pipeline]
name = "transcode"
queue_policy = "block"

[[stage]]
name = "decode"
type = "decode"
hwaccel = "none"

[[stage]]
name = "encode"
type = "encode"
input = "decode"
codec = "libx264"
crf = 18
preset = "medium"
TOML

loomd_run() {  # decode-backend encode-backend output
  "$build/loomd" run "$tmp/transcode.toml" --input "$clip" --output "$3" --summary /dev/null \
    --set "decode.backend=$1" --set "encode.backend=$2" 2>/dev/null
}
declare -A wall
timed() {  # name command...
  local t0 t1
  t0=$(now)
  "${@:2}" >/dev/null
  t1=$(now)
  wall[$1]=$("$python" -c "print($t1 - $t0)")
}

# Warm-up: the libraries and plugins in the page cache.
loomd_run ffmpeg gstreamer "$tmp/warm.mkv"
timed ffmpeg ffmpeg -v error -y -i "$clip" -map 0 -c:v libx264 -crf 18 -preset medium -c:a copy "$tmp/ffmpeg.mkv"
timed loomd_ffmpeg loomd_run ffmpeg ffmpeg "$tmp/loomd-ff.mkv"
timed gst gst-launch-1.0 -q filesrc location="$clip" ! decodebin ! x264enc pass=qual quantizer=18 speed-preset=medium ! \
  matroskamux ! filesink location="$tmp/gst.mkv"
timed loomd_gst loomd_run gstreamer gstreamer "$tmp/loomd-gg.mkv"
timed loomd_gst_ffmpeg loomd_run gstreamer ffmpeg "$tmp/loomd-gf.mkv"
timed loomd_ffmpeg_gst loomd_run ffmpeg gstreamer "$tmp/loomd-fg.mkv"

for f in ffmpeg loomd-ff gst loomd-gg loomd-gf loomd-fg; do
  n=$(count_frames "$tmp/$f.mkv")
  [[ "$n" == "$frames" ]] || die "$f.mkv holds $n frames, not $frames"
  [[ "$f" == gst ]] && continue
  a=$(ffprobe -v error -select_streams a -show_entries stream=codec_name -of csv=p=0 "$tmp/$f.mkv")
  [[ "$a" == "aac" ]] || die "$f.mkv has no AAC audio ($a)"
done

"$python" - "$frames" "${wall[ffmpeg]}" "${wall[loomd_ffmpeg]}" "${wall[gst]}" "${wall[loomd_gst]}" \
  "${wall[loomd_gst_ffmpeg]}" "${wall[loomd_ffmpeg_gst]}" <<'PY'
import sys
n = int(sys.argv[1])
ff, lf, gs, lg, lgf, lfg = map(float, sys.argv[2:8])
print()
print("| run | wall s | fps (frames / total wall) |")
print("|---|---:|---:|")
for name, s in [("ffmpeg -c:v libx264 -crf 18 -preset medium -c:a copy", ff),
                ("loomd run, FFmpeg back end (decode and encode)", lf),
                ("gst-launch-1.0 decodebin ! x264enc ! matroskamux (video only)", gs),
                ("loomd run, GStreamer back end (decode and encode)", lg),
                ("loomd run, GStreamer decode, FFmpeg encode", lgf),
                ("loomd run, FFmpeg decode, GStreamer encode", lfg)]:
    print(f"| {name} | {s:.2f} | {n / s:.1f} |")
print()
print(f"loomd run (FFmpeg) / ffmpeg, wall: {lf / ff:.3f}")
print(f"loomd run (GStreamer) / gst-launch-1.0, wall: {lg / gs:.3f}")
print(f"loomd run GStreamer / FFmpeg back end, wall: {lg / lf:.3f}")
PY
