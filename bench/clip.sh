# Sourced by the benchmarks that restore a clip (pipeline.sh, gstreamer.sh): the one test clip they
# share and the frame count of a file.

# make_clip OUT SIZE FPS SECONDS: FFmpeg's mandelbrot source as H.264 (CRF 20, 4:2:0) with a
# 440 Hz AAC track.
make_clip() {
  ffmpeg -v error -f lavfi -i "mandelbrot=size=$2:rate=$3,trim=duration=$4" \
    -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=$4" \
    -c:v libx264 -crf 20 -pix_fmt yuv420p -c:a aac -shortest "$1"
}

# count_frames FILE: the video frames FFmpeg decodes from FILE.
count_frames() {
  ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$1"
}
