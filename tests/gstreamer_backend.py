"""GStreamer as the decode and encode back end of `loomd run`, against the FFmpeg back end on the
same clips, frame for frame: Matroska (H.264 with B-frames, variable frame rate, AAC, subtitles,
BT.709 tags), MP4 (B-frames, an AAC edit list, BT.601 tags) and AVI (MPEG-4 part 2 with MP3).
For each, restored with a tiny x2 model into lossless FFV1 Matroska by FFmpeg/FFmpeg (the
reference), GStreamer/FFmpeg, FFmpeg/GStreamer and GStreamer/GStreamer (decode/encode):
  - every decoded output frame and its pts equal the reference's;
  - the audio packets equal the reference's, at the same times, and so do the subtitles, except
    where GStreamer's muxer cannot take them (SubRip from Matroska): a warning names the stream;
  - the colour tags equal the reference's;
  - the run's summary names the back ends.
Then the mistakes: a missing GStreamer element fails naming it, a GStreamer field with the
FFmpeg back end fails naming the field. Usage: gstreamer_backend.py LOOMD"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import check, run  # noqa: E402
from tiny_model import write_tiny_x2  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOMD = sys.argv[1]


def frames(path):
    """(pts, md5) of every decoded video frame."""
    out = run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:v:0", "-fps_mode", "passthrough", "-f", "framemd5",
               "-"]).stdout
    rows = [ln.split(",") for ln in out.splitlines() if ln and not ln.startswith("#")]
    return [(r[2].strip(), r[5].strip()) for r in rows]


def packets(path, stream):
    """The md5 of a stream's packets, and their pts, or None when there is no such stream."""
    probe = run(["ffprobe", "-v", "error", "-select_streams", stream, "-show_entries", "packet=pts_time", "-of",
                 "csv=p=0", path]).stdout.split()
    if not probe:
        return None
    md5 = run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:" + stream, "-c", "copy", "-f", "md5", "-"]).stdout
    return md5.strip(), [float(t) for t in probe]


def same_packets(a, b):
    """The same packets at the same times, to the millisecond Matroska stores (the two writers
    round a time that falls between two milliseconds each its own way)."""
    if a is None or b is None:
        return a is b
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(abs(x - y) <= 0.0011 for x, y in zip(a[1], b[1]))


def colour(path):
    s = json.loads(run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                        "stream=color_space,color_primaries,color_transfer,color_range", "-of", "json",
                        path]).stdout)["streams"][0]
    return s


def backends(node):
    """Every "backend" value in a summary, in order."""
    if isinstance(node, dict):
        return ([node["backend"]] if "backend" in node else []) + [b for k, v in node.items() if k != "backend"
                                                                   for b in backends(v)]
    if isinstance(node, list):
        return [b for v in node for b in backends(v)]
    return []


def main():
    with tempfile.TemporaryDirectory() as tmp:
        write_tiny_x2(tmp)
        config = os.path.join(ROOT, "configs", "pipelines", "restore-x2.toml")
        base = [LOOMD, "run", config, "--models", tmp, "--cache-dir", os.path.join(tmp, "cache"),
                "--set", "restore.model=tiny", "--set", "decode.hwaccel=none", "--set", "encode.codec=ffv1"]
        with open(os.path.join(tmp, "subs.srt"), "w") as f:
            f.write("1\n00:00:00,200 --> 00:00:00,900\nHello\n\n2\n00:00:01,000 --> 00:00:01,600\nAgain\n")
        src = ["-f", "lavfi", "-i", "testsrc2=size=96x64:rate=25", "-f", "lavfi", "-i", "sine=sample_rate=48000"]
        clips = {
            "mkv": src + ["-i", os.path.join(tmp, "subs.srt"), "-t", "2", "-map", "0", "-map", "1", "-map", "2",
                          "-vf", "setpts='(N*0.04+N*N*0.0005)/TB'", "-fps_mode", "vfr", "-c:v", "libx264", "-bf", "2",
                          "-c:a", "aac", "-c:s", "srt", "-colorspace", "bt709", "-color_primaries", "bt709",
                          "-color_trc", "bt709"],
            "mp4": src + ["-t", "1.5", "-c:v", "libx264", "-bf", "2", "-c:a", "aac", "-colorspace", "smpte170m",
                          "-color_primaries", "smpte170m", "-color_trc", "smpte170m"],
            "avi": src[:4] + ["-f", "lavfi", "-i", "sine=sample_rate=44100", "-t", "1.5", "-c:v", "mpeg4",
                              "-qscale:v", "3", "-c:a", "libmp3lame"],
        }
        for ext, args in clips.items():
            clip = os.path.join(tmp, "in." + ext)
            run(["ffmpeg", "-v", "error", "-y"] + args + [clip])
            outs, logs = {}, {}
            for dec in ("ffmpeg", "gstreamer"):
                for enc in ("ffmpeg", "gstreamer"):
                    out = os.path.join(tmp, f"{ext}-{dec}-{enc}.mkv")
                    summary = out + ".json"
                    logs[(dec, enc)] = run(base + ["--input", clip, "--output", out, "--summary", summary,
                                                   "--set", f"decode.backend={dec}",
                                                   "--set", f"encode.backend={enc}"]).stderr
                    with open(summary) as f:
                        named = backends(json.load(f))
                    check(named == [dec, enc], f"{ext} {dec}/{enc}: the summary names the back ends {named}")
                    outs[(dec, enc)] = out
            ref = outs[("ffmpeg", "ffmpeg")]
            ref_frames = frames(ref)
            check(len(ref_frames) >= 25, f"{ext}: the reference has {len(ref_frames)} frames")
            ref_audio, ref_subs, ref_colour = packets(ref, "a:0"), packets(ref, "s:0"), colour(ref)
            check(ref_audio is not None, f"{ext}: the reference has no audio")
            for (dec, enc), out in outs.items():
                what = f"{ext}, decode {dec}, encode {enc}"
                got = frames(out)
                check(len(got) == len(ref_frames), f"{what}: {len(got)} frames, the reference {len(ref_frames)}")
                for i, (a, b) in enumerate(zip(got, ref_frames)):
                    check(a == b, f"{what}: frame {i} is {a} (pts, md5), the reference's {b}")
                check(same_packets(packets(out, "a:0"), ref_audio), f"{what}: the audio packets differ from the reference's")
                if enc == "gstreamer" and ref_subs is not None:
                    # GStreamer's Matroska demuxer gives SubRip as Pango markup, which its muxer
                    # does not take: named in a warning, not dropped silently.
                    check(packets(out, "s:0") is None and "cannot hold the source's stream text/x-raw" in logs[(dec, enc)],
                          f"{what}: the subtitles are neither copied nor named in a warning:\n{logs[(dec, enc)]}")
                else:
                    check(same_packets(packets(out, "s:0"), ref_subs),
                          f"{what}: the subtitle packets differ from the reference's")
                check(colour(out) == ref_colour, f"{what}: colour tags {colour(out)}, the reference's {ref_colour}")
            print(f"{ext}: 4 runs equal, {len(ref_frames)} frames")

        clip = os.path.join(tmp, "in.mkv")
        bad = run(base + ["--input", clip, "--output", os.path.join(tmp, "bad.mkv"), "--set", "encode.backend=gstreamer",
                          "--set", "encode.encoder=nosuchencoder"], ok=False)
        check(bad.returncode != 0 and "nosuchencoder" in bad.stderr, f"a missing encoder: {bad.stderr}")
        bad = run(base + ["--input", clip, "--output", os.path.join(tmp, "bad.mkv"),
                          "--set", "decode.pipeline=videotestsrc"], ok=False)
        check(bad.returncode != 0 and "pipeline" in bad.stderr and "backend" in bad.stderr,
              f"a GStreamer field with the FFmpeg back end: {bad.stderr}")
        check(not any(n.startswith("bad") or ".partial-" in n for n in os.listdir(tmp)), "a refused run left a file")
    print("gstreamer backend: ok")


if __name__ == "__main__":
    main()
