#!/usr/bin/env python3
"""`loomd run` under SIGTERM, SIGINT and SIGHUP at any moment of a run: from the first
millisecond (the program still loading) to the middle of the frames. Each time the process
exits promptly, with status 1 (CANCELLED), 0 (it had finished) or killed by the signal while
still loading (before its handlers are installed, which happens before anything is opened),
and leaves no file but a finished output: no output under its final name from a cancelled run,
and no temporary file. The model is a tiny x2 network written here as ncnn
files, so a run takes a second or two.

usage: loomd_signals.py LOOMD
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_model import write_tiny_x2  # noqa: E402

LOOMD = sys.argv[1]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


PIPELINE = """[pipeline]
name = "signals"

[[stage]]
name = "decode"
type = "decode"

[[stage]]
name = "restore"
type = "infer"
input = "decode"
model = "tiny.param"

[[stage]]
name = "encode"
type = "encode"
input = "restore"
"""

with tempfile.TemporaryDirectory() as tmp:
    write_tiny_x2(tmp)
    toml = os.path.join(tmp, "signals.toml")
    with open(toml, "w") as f:
        f.write(PIPELINE)
    clip = os.path.join(tmp, "in.mkv")
    r = subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=480x270:rate=25:duration=6",
                        "-f", "lavfi", "-i", "sine=frequency=440:duration=6", "-c:v", "libx264", "-preset",
                        "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", clip], capture_output=True)
    check(r.returncode == 0, f"ffmpeg: {r.stderr.decode()}")
    out_dir = os.path.join(tmp, "out")
    os.makedirs(out_dir)
    out = os.path.join(out_dir, "restored.mkv")
    env = dict(os.environ, LOOM_THREADS="2")
    base = [LOOMD, "run", toml, "--input", clip, "--output", out, "--models", tmp, "--no-cache",
            "--summary", os.path.join(tmp, "summary.json")]

    # A whole run first: how long it takes, and that it finishes.
    t0 = time.monotonic()
    r = subprocess.run(base, capture_output=True, env=env)
    whole = time.monotonic() - t0
    check(r.returncode == 0 and os.path.exists(out), f"uninterrupted run: {r.stderr.decode()[-400:]}")
    print(f"uninterrupted run: {whole:.2f} s")
    os.remove(out)

    cases = [(sig, delay) for delay in (0.0, 0.005, 0.02, 0.06, 0.15, 0.3, 0.6, 1.0, 0.5 * whole)
             for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)]
    worst = 0.0
    for sig, delay in cases:
        p = subprocess.Popen(base, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        time.sleep(delay)
        t = time.monotonic()
        p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            check(False, f"{sig.name} after {delay:.3f} s: still running 30 s later")
            continue
        took = time.monotonic() - t
        finished = os.path.exists(out)
        left = sorted(set(os.listdir(out_dir)) - {"restored.mkv"})
        text = err.decode(errors="replace")
        what = f"{sig.name} after {delay:.3f} s"
        # Killed by the signal itself (-N): it came while the program was still loading, before
        # `loomd run` installs its handlers, which it does before it opens anything.
        check(p.returncode in (0, 1, -sig), f"{what}: exit status {p.returncode}: {text[-300:]}")
        if p.returncode == 1:
            check("CANCELLED" in text, f"{what}: exit 1 without CANCELLED: {text[-300:]}")
            check(not finished, f"{what}: cancelled, yet {out} exists")
            worst = max(worst, took)
        check(not left, f"{what}: files left behind: {left}")
        how = {0: " (finished first)", -sig: " (killed while loading: nothing opened)"}.get(p.returncode, "")
        print(f"{what}: exit {p.returncode} in {took * 1000:.0f} ms{how}")
        if finished:
            os.remove(out)
    # A frame of this job takes a few ms; a stop waits for at most one kernel and the encoder's
    # teardown.
    check(worst < 2.0, f"slowest stop {worst:.2f} s")
    print(f"slowest stop after a signal: {worst * 1000:.0f} ms")

if failures:
    print(f"loomd signals: {len(failures)} failures")
    sys.exit(1)
print("loomd signals: ok")
