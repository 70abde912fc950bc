"""The loomrestore element from the command line, as its users meet it: gst-inspect-1.0 documents
every property; gst-launch-1.0 lines restore videotestsrc frames into a raw file (every frame, at
twice the size) and into an H.264 Matroska file (frame count, size and every frame's pts read
back with ffprobe); a .loom compiled by loomc restores the frames of its size as the model does,
and another size fails naming it; a missing model fails the line with a message naming it. The
plugin is found in the build folder through GST_PLUGIN_PATH (set by ctest).
Usage: gstreamer_cli.py LOOMC"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import check, run  # noqa: E402
from tiny_model import write_tiny_x2  # noqa: E402

LOOMC = sys.argv[1]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        write_tiny_x2(tmp)
        restore = f"loomrestore model=tiny models-dir={tmp} cache-dir={tmp}/cache"

        inspect = run(["gst-inspect-1.0", "loomrestore"]).stdout
        for prop in ["model", "device", "precision", "in-flight", "tile", "kb", "trace", "models-dir", "cache-dir",
                     "frames", "sim-fps", "h2d-bytes", "d2h-bytes", "I420", "NV12", "P010_10LE", "I420_10LE", "RGB", "BGR"]:
            check(prop in inspect, f"gst-inspect-1.0 loomrestore does not list {prop}")

        src = "videotestsrc num-buffers=10 ! video/x-raw,format=I420,width=64,height=48,framerate=25/1"
        raw = os.path.join(tmp, "out.yuv")
        run(["gst-launch-1.0", "-q"] + f"{src} ! {restore} ! filesink location={raw}".split())
        check(os.path.getsize(raw) == 10 * 128 * 96 * 3 // 2,
              f"raw output holds {os.path.getsize(raw)} bytes, not 10 frames of 128x96")

        mkv = os.path.join(tmp, "out.mkv")
        run(["gst-launch-1.0", "-q"] +
            f"{src} ! {restore} ! x264enc speed-preset=ultrafast ! matroskamux ! filesink location={mkv}".split())
        probe = json.loads(run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries",
                                "stream=width,height:frame=pts_time", "-of", "json", mkv]).stdout)
        sizes = [(s["width"], s["height"]) for s in probe["streams"]]
        pts = sorted(float(f["pts_time"]) for f in probe["frames"])
        check(sizes == [(128, 96)], f"the Matroska file's video is {sizes}, not 128x96")
        check(len(pts) == 10, f"{len(pts)} frames in the Matroska file, not 10")
        for i, t in enumerate(pts):
            check(abs(t - i * 0.04) < 0.0015, f"frame {i} at {t} s, not {i * 0.04:.2f} s")

        # A compiled .loom file: frames of its size restore as the model does; another size is
        # refused naming the size it was compiled for.
        loom = os.path.join(tmp, "tiny.loom")
        run([LOOMC, "compile", os.path.join(tmp, "tiny.param"), "--shape", "data=1x3x48x64", "--device", "edge",
             "-o", loom])
        raw_loom = os.path.join(tmp, "out-loom.yuv")
        run(["gst-launch-1.0", "-q"] +
            f"{src} ! loomrestore model={loom} cache-dir={tmp}/cache ! filesink location={raw_loom}".split())
        with open(raw, "rb") as a, open(raw_loom, "rb") as b:
            check(a.read() == b.read(), "the compiled model's frames differ from the model's")
        other = src.replace("width=64", "width=80")
        bad = run(["gst-launch-1.0", "-q"] + f"{other} ! loomrestore model={loom} ! fakesink".split(), ok=False)
        check(bad.returncode != 0 and "is compiled for 64x48 frames; the stream is 80x48" in bad.stderr + bad.stdout,
              f"a compiled model at another size: {bad.stderr}")

        bad = run(["gst-launch-1.0", "-q"] + f"{src} ! loomrestore model=nosuch models-dir={tmp} ! fakesink".split(),
                  ok=False)
        check(bad.returncode != 0, "a missing model did not fail the line")
        check("model nosuch not found" in bad.stderr + bad.stdout, f"the error does not name the model:\n{bad.stderr}")
    print("gstreamer cli: ok")


if __name__ == "__main__":
    main()
