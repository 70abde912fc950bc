#!/usr/bin/env python3
"""loomd run end to end on generated clips (FFmpeg's test sources), with the real animevideov3 x2.

Checks, on a 2 s clip with audio, a variable frame rate and BT.709 tags:
  - frame count, output size, the pts of every frame, colour tags: as the input's;
  - the audio stream copied bit-exact;
  - one frame against the model run alone (loomc run --restore) on the same decoded frame;
  - Real-CUGAN (restore-cugan-x2.toml): exactly 2x, its descriptor applied, a frame against
    the model run alone;
  - the JSON summary's counts;
then a truncated file and a file with flipped bytes (a counted, clear result, no crash),
cancellation mid-run (no output file, no temporary left), and config mistakes (file:line:col).

Usage: pipeline_e2e.py LOOMD LOOMC
Exits 77 (skipped) when the models cannot be fetched.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOMD, LOOMC = sys.argv[1], sys.argv[2]
W, H = 96, 64


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def probe_frames(path, stream="v:0"):
    out = run(["ffprobe", "-v", "error", "-select_streams", stream, "-show_entries",
               "frame=pts,width,height", "-of", "json", path])
    check(out.returncode == 0, f"ffprobe {path}: {out.stderr}")
    return json.loads(out.stdout)["frames"]


def probe_stream(path, stream="v:0"):
    out = run(["ffprobe", "-v", "error", "-select_streams", stream, "-show_streams", "-of", "json", path])
    check(out.returncode == 0, f"ffprobe {path}: {out.stderr}")
    streams = json.loads(out.stdout)["streams"]
    return streams[0] if streams else None


def md5_of(path, stream):
    out = run(["ffmpeg", "-v", "error", "-i", path, "-map", stream, "-c", "copy", "-f", "md5", "-"])
    check(out.returncode == 0, f"md5 of {path} {stream}: {out.stderr}")
    return out.stdout.strip()


def raw_frame(path, index, w, h):
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-vf", f"select=eq(n\\,{index})", "-vframes", "1",
                          "-f", "rawvideo", "-pix_fmt", "yuv420p", "-"], capture_output=True)
    check(out.returncode == 0 and len(out.stdout) == w * h * 3 // 2, f"frame {index} of {path}")
    b = np.frombuffer(out.stdout, np.uint8)
    y = b[:w * h].reshape(h, w).astype(np.float64)
    u = b[w * h:w * h + w * h // 4].reshape(h // 2, w // 2).astype(np.float64)
    v = b[w * h + w * h // 4:].reshape(h // 2, w // 2).astype(np.float64)
    return y, u, v


KR, KB = 0.2126, 0.0722  # BT.709
KG = 1 - KR - KB


def rgb_to_y(rgb):
    r, g, b = np.clip(rgb, 0, 1)
    return 16 + 219 * (KR * r + KG * g + KB * b)


def psnr(a, b, peak=255.0):
    mse = np.mean((a - b) ** 2)
    return 99.0 if mse == 0 else 10 * np.log10(peak * peak / mse)


def write_tensor(path, arr):
    from onnx import numpy_helper
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(arr.astype(np.float32), "data").SerializeToString())


def read_tensor(path):
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def main():
    for _a, _t in (("float", float), ("int", int), ("bool", bool), ("object", object)):
        if _a not in np.__dict__:
            setattr(np, _a, _t)
    if not shutil.which("ffmpeg"):
        print("ffmpeg not found: skipped")
        return 77
    fetch = run([os.path.join(ROOT, "scripts", "fetch-models")])
    if fetch.returncode != 0:
        print("models unavailable: skipped")
        return 77
    models = os.path.dirname(fetch.stdout.strip().splitlines()[-1])
    config = os.path.join(ROOT, "configs", "pipelines", "restore-x2.toml")
    tmp = tempfile.mkdtemp(prefix="loom-e2e-")
    try:
        base = [LOOMD, "run", config, "--models", models, "--cache-dir", os.path.join(tmp, "cache")]

        # A 2 s clip: 25 fps for the first second, then 12.5 fps (variable frame rate), with a
        # sine tone as AAC audio, tagged BT.709.
        clip = os.path.join(tmp, "in.mkv")
        gen = run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", f"gradients=size={W}x{H}:rate=25:duration=2:speed=0.05",
                   "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=2",
                   "-vf", "select='lt(n\\,25)+not(mod(n\\,2))',setpts=N/TB/25+gte(N\\,25)*(N-25)/TB/25",
                   "-fps_mode", "vfr", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-color_primaries", "bt709",
                   "-color_trc", "bt709", "-colorspace", "bt709", "-c:a", "aac", clip])
        check(gen.returncode == 0, f"ffmpeg: {gen.stderr}")
        frames_in = probe_frames(clip)
        check(len(frames_in) > 30, f"generated clip has {len(frames_in)} frames")

        out = os.path.join(tmp, "out.mkv")
        summary_path = os.path.join(tmp, "summary.json")
        r = run(base + ["--input", clip, "--output", out, "--summary", summary_path, "--set", "encode.codec=ffv1",
                        "--set", "restore.precision=fp32"])
        check(r.returncode == 0, f"loomd run failed ({r.returncode}): {r.stderr}")
        frames_out = probe_frames(out)
        check(len(frames_out) == len(frames_in), f"{len(frames_out)} frames out, {len(frames_in)} in")
        check(all(f["width"] == 2 * W and f["height"] == 2 * H for f in frames_out), "output size is not 2x")
        vin, vout = probe_stream(clip), probe_stream(out)
        tb_in = eval(vin["time_base"]) if "time_base" in vin else None
        tb_out = eval(vout["time_base"])
        pts_in = [round(f["pts"] * tb_in, 4) for f in frames_in]
        pts_out = [round(f["pts"] * tb_out, 4) for f in frames_out]
        check(pts_in == pts_out, f"pts differ: {pts_in[:8]}.. vs {pts_out[:8]}..")
        for tag in ("color_space", "color_primaries", "color_transfer", "color_range"):
            check(vin.get(tag) == vout.get(tag), f"{tag}: {vin.get(tag)} in, {vout.get(tag)} out")
        check(probe_stream(out, "a:0") is not None, "no audio stream in the output")
        check(md5_of(clip, "0:a") == md5_of(out, "0:a"), "audio stream not copied bit-exact")
        summary = json.load(open(summary_path))
        check(summary["status"] == "ok" and summary["frames"] == len(frames_in), f"summary: {summary['status']}")
        stages = {s["name"]: s for s in summary["stages"]}
        check(stages["restore"]["h2d_bytes_per_frame"] == W * H * 3 // 2, "H2D is not the YUV frame")
        # The output was read back and compared with its source: every frame, the audio, the tags.
        fid = stages["encode"].get("fidelity", {})
        check(fid.get("unexplained") == 0 and fid.get("checks", 0) >= 10 and fid.get("differences") == [],
              f"fidelity: {fid}")

        # Frame 10 through loomc alone (fp32) vs the pipeline's output (ffv1: lossless).
        k = 10
        # The decoded frame as float RGB by swscale (accurate rounding, full chroma
        # interpolation: what Loom's media engine matches within a code value).
        conv = subprocess.run(["ffmpeg", "-v", "error", "-i", clip, "-vf", f"select=eq(n\\,{k})", "-vframes", "1",
                               "-sws_flags", "bilinear+accurate_rnd+full_chroma_int", "-f", "rawvideo",
                               "-pix_fmt", "gbrpf32le", "-"], capture_output=True)
        check(conv.returncode == 0 and len(conv.stdout) == W * H * 12, f"frame {k} as float RGB")
        g, b, r = np.frombuffer(conv.stdout, np.float32).reshape(3, H, W)
        rgb = np.stack([r, g, b])[None].astype(np.float32)
        os.makedirs(os.path.join(tmp, "ref_in"))
        write_tensor(os.path.join(tmp, "ref_in", "input_0.pb"), rgb)
        param = os.path.join(models, "realesr-animevideov3", "realesr-animevideov3-x2.param")
        if not os.path.exists(param):
            param = os.path.join(models, "realesr-animevideov3-x2.param")
        rr = run([LOOMC, "run", param, "--restore", "--inputs", os.path.join(tmp, "ref_in"), "--outputs",
                  os.path.join(tmp, "ref_out")])
        check(rr.returncode == 0, f"loomc run: {rr.stderr}")
        ref = read_tensor(os.path.join(tmp, "ref_out", "output_0.pb"))[0]
        yo, _, _ = raw_frame(out, k, 2 * W, 2 * H)
        p = psnr(rgb_to_y(ref), yo)
        print(f"frame {k}: luma PSNR pipeline vs model alone = {p:.1f} dB")
        check(p >= 45, f"frame {k}: luma PSNR {p:.1f} dB < 45")

        # A tuner's knowledge base named by the infer stage (kb = PATH): the model as the pipeline
        # compiles it (its descriptor applied for the frame) tuned by loomc tune, then the same
        # job with its tilings: the same frames bit for bit, in less simulated time.
        kb = os.path.join(tmp, "tuned.kb")
        rt = run([LOOMC, "tune", param, "--restore", "--shape", f"data=1x3x{H}x{W}", "--device", "edge",
                  "--kb", kb, "--trials", "300"])
        check(rt.returncode == 0, f"loomc tune: {rt.stderr}")
        tuned, tsum = os.path.join(tmp, "tuned.mkv"), os.path.join(tmp, "tuned.json")
        r = run(base + ["--input", clip, "--output", tuned, "--summary", tsum, "--set", "encode.codec=ffv1",
                        "--set", "restore.precision=fp32", "--set", f"restore.kb={kb}"])
        check(r.returncode == 0, f"loomd run with kb: {r.stderr}")
        check(md5_of(out, "0:v") == md5_of(tuned, "0:v"), "tuned tilings changed the frames")
        ts = json.load(open(tsum))
        kb_info = {x["name"]: x for x in ts["stages"]}["restore"].get("kb", {})
        check(kb_info.get("records", 0) > 0, f"the knowledge base was not read: {kb_info}")
        check(ts["device"]["sim_ms"] < summary["device"]["sim_ms"],
              f"tuned job took {ts['device']['sim_ms']:.2f} simulated ms, untuned {summary['device']['sim_ms']:.2f}")
        print(f"kb: {kb_info['records']} records, simulated {summary['device']['sim_ms']:.1f} -> "
              f"{ts['device']['sim_ms']:.1f} ms")
        bad_kb = run(base + ["--input", clip, "--output", os.path.join(tmp, "nokb.mkv"), "--set",
                             f"restore.kb={os.path.join(tmp, 'missing.kb')}"])
        check(bad_kb.returncode != 0 and "kb" in bad_kb.stderr and "missing.kb" in bad_kb.stderr,
              f"a missing knowledge base: {bad_kb.stderr}")

        # A truncated file and one with flipped bytes: a clear result, never a crash.
        data = open(clip, "rb").read()
        trunc = os.path.join(tmp, "trunc.mkv")
        open(trunc, "wb").write(data[:len(data) * 6 // 10])
        bad_files = [trunc]
        for seed in range(7, 12):  # flipped bytes at five sets of places
            flipped = os.path.join(tmp, f"flipped{seed}.mkv")
            b = bytearray(data)
            rng = np.random.default_rng(seed)
            for i in rng.integers(len(b) // 4, len(b), 64):
                b[i] ^= 0xFF
            open(flipped, "wb").write(bytes(b))
            bad_files.append(flipped)
        for bad in bad_files:
            o = os.path.join(tmp, "bad-out.mkv")
            rb = run(base + ["--input", bad, "--output", o, "--summary", os.path.join(tmp, "bad.json")])
            check(rb.returncode in (0, 1), f"{bad}: exit {rb.returncode} (crash?): {rb.stderr[-2000:]}")
            if rb.returncode == 1:
                check(os.path.basename(bad) in rb.stderr, f"{bad}: the error does not name the file: {rb.stderr}")
                check(not os.path.exists(o), f"{bad}: failed run left {o}")
            else:
                s = json.load(open(os.path.join(tmp, "bad.json")))
                dec = {x["name"]: x for x in s["stages"]}["decode"]
                print(f"{os.path.basename(bad)}: {s['frames']} frames, {dec['decode_errors']} decode errors")
            if os.path.exists(o):
                os.remove(o)

        # Segments: cut on keyframes, each restored on its own, joined without re-encoding: the
        # same frames, pts and audio as one run.
        seg_clip = os.path.join(tmp, "seg.mkv")
        g = run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", f"gradients=size={W}x{H}:rate=25:duration=3:speed=0.05",
                 "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=3", "-c:v", "libx264",
                 "-g", "25", "-keyint_min", "25", "-sc_threshold", "0", "-bf", "2", "-c:a", "aac", seg_clip])
        check(g.returncode == 0, g.stderr)
        plan = run([LOOMD, "segments", seg_clip, "--count", "3", "--json"])
        check(plan.returncode == 0, plan.stderr)
        planned = json.loads(plan.stdout)
        segments = planned["segments"]
        check(len(segments) == 3 and segments[1]["start_frame"] == 25, f"plan: {segments}")
        check(planned["keyframes"] == planned["closed"] == planned["segment_starts"] == 3, f"plan: {planned}")
        one = os.path.join(tmp, "one.mkv")
        r1 = run(base + ["--input", seg_clip, "--output", one, "--set", "encode.codec=ffv1"])
        check(r1.returncode == 0, r1.stderr)
        parts = []
        for i, sg in enumerate(segments):
            part = os.path.join(tmp, f"part{i}.mkv")
            rp = run(base + ["--input", seg_clip, "--output", part, "--set", "encode.codec=ffv1",
                             "--set", f"decode.start_frame={sg['start_frame']}",
                             "--set", f"decode.frame_count={sg['frame_count']}"])
            check(rp.returncode == 0, f"segment {i}: {rp.stderr}")
            parts.append(part)
        joined = os.path.join(tmp, "joined.mkv")
        rj = run([LOOMD, "join", joined] + parts)
        check(rj.returncode == 0, rj.stderr)
        frame_md5 = lambda p: [l.split(",")[-1].strip() for l in run(
            ["ffmpeg", "-v", "error", "-i", p, "-map", "0:v", "-f", "framemd5", "-"]).stdout.splitlines()
            if l and not l.startswith("#")]
        check(frame_md5(joined) == frame_md5(one), "joined segments differ from one run")
        check([f["pts"] for f in probe_frames(joined)] == [f["pts"] for f in probe_frames(one)], "segment pts differ")
        check(md5_of(joined, "0:a") == md5_of(seg_clip, "0:a"), "joined audio differs from the source's")
        print(f"segments: {len(parts)} joined = one run ({len(frame_md5(one))} frames, audio bit-exact)")

        # Tiled frames (the executor's tiling, for frames too large for the device untiled) give
        # the untiled run's output bit for bit.
        tclip = os.path.join(tmp, "tiles.mkv")
        g = run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "gradients=size=320x240:rate=25:duration=0.08:speed=0.05",
                 "-c:v", "libx264", tclip])
        check(g.returncode == 0, g.stderr)
        hashes = {}
        for tile in ("-1", "32"):
            to = os.path.join(tmp, f"tiles{tile}.mkv")
            ts = os.path.join(tmp, f"tiles{tile}.json")
            rt = run(base + ["--input", tclip, "--output", to, "--summary", ts, "--set", "encode.codec=ffv1",
                             "--set", f"restore.tile={tile}"])
            check(rt.returncode == 0, f"tile {tile}: {rt.stderr}")
            hashes[tile] = run(["ffmpeg", "-v", "error", "-i", to, "-map", "0:v", "-f", "framemd5", "-"]).stdout
            restore = {x["name"]: x for x in json.load(open(ts))["stages"]}["restore"]
            if tile == "32":
                check(restore.get("tiles", 0) > 1, f"tile 32 ran in {restore.get('tiles')} tiles")
        check(hashes["-1"] == hashes["32"], "the tiled run differs from the untiled one")
        print("tiled run = untiled run, bit for bit")

        # Real-CUGAN as realcugan-ncnn-vulkan runs it (configs/pipelines/restore-cugan-x2.toml:
        # the descriptor reflects the frame by 18 pixels and cuts the output): exactly 2x the
        # frame, and a frame equal to the model run alone with its descriptor (loomc --restore).
        cw, ch = 60, 44
        cclip = os.path.join(tmp, "cugan.mkv")
        g = run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i",
                 f"gradients=size={cw}x{ch}:rate=25:duration=0.2:speed=0.05", "-c:v", "libx264", "-pix_fmt",
                 "yuv420p", "-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709", cclip])
        check(g.returncode == 0, g.stderr)
        cout = os.path.join(tmp, "cugan_out.mkv")
        csum = os.path.join(tmp, "cugan.json")
        rc = run([LOOMD, "run", os.path.join(ROOT, "configs", "pipelines", "restore-cugan-x2.toml"), "--models",
                  models, "--cache-dir", os.path.join(tmp, "cache"), "--input", cclip, "--output", cout,
                  "--summary", csum, "--set", "encode.codec=ffv1"])
        check(rc.returncode == 0, f"restore-cugan-x2: {rc.stderr}")
        cframes = probe_frames(cout)
        check(len(cframes) == len(probe_frames(cclip)), "restore-cugan-x2: frame count")
        check(all(f["width"] == 2 * cw and f["height"] == 2 * ch for f in cframes), "restore-cugan-x2: not 2x")
        crestore = {x["name"]: x for x in json.load(open(csum))["stages"]}["restore"]
        check(crestore.get("descriptor", {}).get("family") == "real-cugan" and
              crestore["descriptor"]["prepad"] == 18 and crestore["descriptor"]["applied"],
              f"restore-cugan-x2 descriptor: {crestore.get('descriptor')}")
        conv = subprocess.run(["ffmpeg", "-v", "error", "-i", cclip, "-vf", "select=eq(n\\,2)", "-vframes", "1",
                               "-sws_flags", "bilinear+accurate_rnd+full_chroma_int", "-f", "rawvideo",
                               "-pix_fmt", "gbrpf32le", "-"], capture_output=True)
        check(conv.returncode == 0 and len(conv.stdout) == cw * ch * 12, "cugan frame 2 as float RGB")
        g_, b_, r_ = np.frombuffer(conv.stdout, np.float32).reshape(3, ch, cw)
        os.makedirs(os.path.join(tmp, "cugan_in"))
        write_tensor(os.path.join(tmp, "cugan_in", "input_0.pb"), np.stack([r_, g_, b_])[None].astype(np.float32))
        rr = run([LOOMC, "run", os.path.join(models, "realcugan-se", "up2x-conservative.param"), "--restore",
                  "--inputs", os.path.join(tmp, "cugan_in"), "--outputs", os.path.join(tmp, "cugan_ref")])
        check(rr.returncode == 0, f"loomc run --restore: {rr.stderr}")
        cref = read_tensor(os.path.join(tmp, "cugan_ref", "output_0.pb"))[0]
        yo, _, _ = raw_frame(cout, 2, 2 * cw, 2 * ch)
        p = psnr(rgb_to_y(cref), yo)
        print(f"restore-cugan-x2: {len(cframes)} frames at {2 * cw}x{2 * ch}; frame 2 luma PSNR vs the model alone "
              f"= {p:.1f} dB")
        check(p >= 45, f"restore-cugan-x2 frame 2: luma PSNR {p:.1f} dB < 45")
        # Real-CUGAN over tiles through the pipeline (its squeeze-and-excitation means in passes
        # over the tiles, values handed on and recomputed) gives the whole-frame run's frames.
        tcclip = os.path.join(tmp, "cugan_tiles.mkv")
        g = run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i",
                 "gradients=size=200x150:rate=25:duration=0.08:speed=0.05", "-c:v", "libx264", tcclip])
        check(g.returncode == 0, g.stderr)
        chashes = {}
        for name, sets in (("whole", ["restore.tile=-1"]), ("carried", ["restore.tile=32"]),
                           ("recomputed", ["restore.tile=32", "restore.tile_carry_mib=0"])):
            to = os.path.join(tmp, f"cugan_{name}.mkv")
            ts = os.path.join(tmp, f"cugan_{name}.json")
            args = [LOOMD, "run", os.path.join(ROOT, "configs", "pipelines", "restore-cugan-x2.toml"), "--models",
                    models, "--cache-dir", os.path.join(tmp, "cache"), "--input", tcclip, "--output", to,
                    "--summary", ts, "--set", "encode.codec=ffv1"]
            for v in sets:
                args += ["--set", v]
            rt = run(args)
            check(rt.returncode == 0, f"restore-cugan-x2 {name}: {rt.stderr}")
            chashes[name] = run(["ffmpeg", "-v", "error", "-i", to, "-map", "0:v", "-f", "framemd5", "-"]).stdout
            restore = {x["name"]: x for x in json.load(open(ts))["stages"]}["restore"]
            if name != "whole":
                check(restore.get("tiles", 0) > 1 and restore.get("tile_passes") == 5,
                      f"restore-cugan-x2 {name}: {restore.get('tiles')} tiles, {restore.get('tile_passes')} passes")
                check((restore.get("tile_carried_mib", 0) > 0) == (name == "carried"),
                      f"restore-cugan-x2 {name}: {restore.get('tile_carried_mib')} MiB handed on")
                check(restore.get("tile_carried_in") == ("device" if name == "carried" else None),
                      f"restore-cugan-x2 {name}: handed on in {restore.get('tile_carried_in')}")
        check(chashes["whole"] and chashes["whole"] == chashes["carried"] == chashes["recomputed"],
              "restore-cugan-x2: a tiled run differs from the whole-frame one")
        print("restore-cugan-x2: tiled runs (5 passes, handed on and recomputed) = whole frames, bit for bit")
        # A name in two family folders (CUnet and UpConv7 share file names) is refused, listing both.
        ra = run([LOOMD, "run", os.path.join(ROOT, "configs", "pipelines", "restore-cugan-x2.toml"), "--models",
                  models, "--input", cclip, "--output", os.path.join(tmp, "amb.mkv"), "--set",
                  "restore.model=noise1_scale2.0x_model"])
        check(ra.returncode != 0 and "is ambiguous" in ra.stderr and "waifu2x-upconv7" in ra.stderr,
              f"ambiguous model name: {ra.stderr.strip()}")

        # Cancellation mid-run: SIGINT stops it, no output file, no temporary left.
        long_clip = os.path.join(tmp, "long.mkv")
        g = run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", f"testsrc2=size={W}x{H}:rate=25:duration=60",
                 "-c:v", "libx264", long_clip])
        check(g.returncode == 0, g.stderr)
        cdir = os.path.join(tmp, "cancel")
        os.makedirs(cdir)
        co = os.path.join(cdir, "out.mkv")
        proc = subprocess.Popen(base + ["--input", long_clip, "--output", co], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(3.0)
        t0 = time.time()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        stop_s = time.time() - t0
        check(proc.returncode == 1 and "CANCELLED" in err, f"cancel: exit {proc.returncode}: {err[-2000:]}")
        check(os.listdir(cdir) == [], f"cancel left files: {os.listdir(cdir)}")
        print(f"cancelled in {stop_s:.2f} s")

        # Config mistakes: each named by file:line:col.
        cases = [
            ("[pipeline]\nqueue_depth = 0\n[[stage]]\nname = \"d\"\ntype = \"decode\"\n", r":2:\d+: .*queue_depth"),
            ("[[stage]]\nname = \"d\"\ntype = \"decod\"\n", r":3:\d+: .*unknown stage type 'decod'"),
            ("[[stage]]\nname = \"d\"\ntype = \"decode\"\nhwaccel = 3\n", r":4:\d+: .*'hwaccel' must be a string"),
            ("[[stage]]\nname = \"d\"\ntype = \"decode\"\ncrf = 3\n", r":4:\d+: .*unknown field 'crf'"),
            ("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"e\"\ntype = \"encode\"\ninput = \"x\"\n",
             r":4:\d+: .*input 'x' names no stage"),
            ("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"p\"\ntype = \"passthrough\"\n"
             "input = \"d\"\n", r":4:\d+: .*goes nowhere"),
            ("[pipeline\n", r":1:\d+: "),
        ]
        for i, (text, pattern) in enumerate(cases):
            path = os.path.join(tmp, f"bad{i}.toml")
            open(path, "w").write(text)
            rc = run([LOOMD, "run", path, "--check"])
            check(rc.returncode != 0 and re.search(re.escape(path) + pattern, rc.stderr),
                  f"config case {i}: expected {pattern}, got: {rc.stderr.strip()}")
        print("pipeline e2e: ok")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
