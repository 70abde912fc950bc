#!/usr/bin/env python3
"""loomd serve under load, each figure against its own peer run in the same script:

  overhead     a daemon job (segments, journal, join) against `loomd run` of the same pipeline
  concurrency  two jobs at once (jobs_running = 2) against the same two one after the other
               (jobs_running = 1): total frames over total wall time, and each job's fps
  control      `status` requests per second from 8 clients while a job runs, the job's fps
               beside its fps alone
  journal      commit latency p50 / p99 (the daemon's histogram, /metrics), and the time from a
               restart after kill -9 to the first new frame of the resumed job
  soak         100 short jobs back to back: the daemon's RSS after the first 10 and at the end

usage: bench/daemon.py [--loomd build/loomd] [--loomctl build/loomctl] [--model NAME]
                       [--size WxH] [--frames N] [--soak-jobs N]
--model: a model name from the models folder (default realesr-animevideov3-x2, the shipped
restore-x2 pipeline's), or "tiny" (a 3x3 conv + pixel shuffle written here, for a quick run).
Prints a Markdown table for docs/benchmarks.md.
"""
import argparse
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from tiny_model import write_tiny_x2  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


PIPELINE = """[pipeline]
name = "bench"
[[stage]]
name = "decode"
type = "decode"
[[stage]]
name = "restore"
type = "infer"
input = "decode"
model = "{model}"
in_flight = 3
[[stage]]
name = "encode"
type = "encode"
input = "restore"
codec = "libx264"
crf = 18
preset = "veryfast"
"""


class Daemon:
    def __init__(self, args, work, name, jobs_running=1, segment_seconds=1.0, env=None):
        self.args, self.work = args, work
        self.endpoint = f"ipc://{work}/{name}.ctl"
        self.state = os.path.join(work, name + "-state")
        self.config = os.path.join(work, name + ".toml")
        with open(self.config, "w") as f:
            f.write(f'[control]\nendpoint = "{self.endpoint}"\n[paths]\nstate = "{self.state}"\n'
                    f'pipelines = "{work}"\nallow = ["{work}"]\nmodels = "{args.models}"\n'
                    f'[limits]\njobs_running = {jobs_running}\njobs_queued = 1000\n'
                    f'[jobs]\nsegment_seconds = {segment_seconds}\nkeep_finished = 10\n'
                    f'[metrics]\naddress = "127.0.0.1:0"\n')
        self.extra_env = env or {}
        self.proc = None
        self.start()

    def start(self, env=None):
        e = dict(os.environ, XDG_STATE_HOME=self.work, **self.extra_env, **(env or {}))
        self.log = open(self.config + ".log", "a")
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen([self.args.loomd, "serve", "--config", self.config], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=e)
        for _ in range(600):
            if self.ctl("ping", "--timeout-ms", "200").returncode == 0:
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"loomd exited: see {self.config}.log")
            time.sleep(0.05)
        raise SystemExit("loomd did not answer")

    def ctl(self, *a):
        return subprocess.run([self.args.loomctl, "--control", self.endpoint, *a], capture_output=True, text=True)

    def submit(self, inp, out, *extra):
        r = self.ctl("--json", "submit", "-p", "bench", inp, out, "--overwrite", *extra)
        if r.returncode != 0:
            raise SystemExit(f"submit: {r.stderr}")
        return json.loads(r.stdout)["id"]

    def job(self, jid):
        return json.loads(self.ctl("--json", "status", str(jid)).stdout)

    def wait(self, ids, poll=0.05):
        done = {}
        while len(done) < len(ids):
            for i in ids:
                if i in done:
                    continue
                j = self.job(i)
                if j["state"] in ("done", "failed", "cancelled"):
                    if j["state"] != "done":
                        raise SystemExit(f"job {i} {j['state']}: {j['error']}")
                    done[i] = j
            time.sleep(poll)
        return done

    def status(self):
        return json.loads(self.ctl("--json", "status").stdout)

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        return 0.0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        self.log.close()


def make_clip(path, size, frames, rate=24, gop=24):
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}",
                    "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-frames:v", str(frames),
                    "-c:v", "libx264", "-g", str(gop), "-c:a", "aac", "-shortest", path], check=True)


def bench_concurrency(args, work, clip, frames):
    results = {}
    for running in (1, 2):
        d = Daemon(args, work, f"conc{running}", jobs_running=running, segment_seconds=args.segment_seconds)
        try:
            d.wait([d.submit(clip, os.path.join(work, "warm.mkv"))])  # compile cache and model warm
            t0 = time.monotonic()
            ids = [d.submit(clip, os.path.join(work, f"c{running}-{k}.mkv")) for k in range(2)]
            jobs = d.wait(ids)
            wall = time.monotonic() - t0
            per_job = [jobs[i]["frames_total"] / max(1e-9, jobs[i]["finished_at"] - jobs[i]["started_at"]) for i in ids]
            results[running] = (2 * frames / wall, wall, per_job)
        finally:
            d.stop()
    return results


def bench_control(args, work, clip, frames):
    """The job alone, then with 8 clients polling `status` at 20 Hz each (a dashboard's load),
    then with 8 clients asking as fast as they can (the daemon's ceiling; on a small machine the
    clients take CPU from the job)."""
    d = Daemon(args, work, "control", segment_seconds=args.segment_seconds)
    try:
        d.wait([d.submit(clip, os.path.join(work, "warm.mkv"))])
        t0 = time.monotonic()
        d.wait([d.submit(clip, os.path.join(work, "alone.mkv"))])
        alone = frames / (time.monotonic() - t0)
        out = [alone]
        for period in (0.05, 0.0):
            jid = d.submit(clip, os.path.join(work, "loaded.mkv"))
            t0 = time.monotonic()
            q = multiprocessing.Queue()
            flag = multiprocessing.Value("d", 0.0)
            procs = [multiprocessing.Process(target=status_client_until, args=(d.endpoint, flag, q, period))
                     for _ in range(8)]
            for p in procs:
                p.start()
            d.wait([jid], poll=0.2)
            wall = time.monotonic() - t0
            flag.value = 1.0
            requests = sum(q.get() for _ in procs)
            for p in procs:
                p.join()
            out += [frames / wall, requests / wall]
        return out
    finally:
        d.stop()


def status_client_until(endpoint, flag, out, period):
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.connect(endpoint)
    n = 0
    while flag.value == 0.0:
        s.send_string(json.dumps({"protocol": 2, "cmd": "status", "id": n + 1}))
        s.recv()
        n += 1
        if period > 0:
            time.sleep(period)
    out.put(n)
    s.close(0)
    ctx.term()


def bench_overhead(args, work, clip, frames):
    """A daemon job (segments, journal, join) against `loomd run` of the same pipeline on the same
    clip (one pass, no segments), each after a warm-up run; frames over wall time, submit to done."""
    subprocess.run([args.loomd, "run", os.path.join(work, "bench.toml"), "-i", clip, "-o",
                    os.path.join(work, "run-warm.mkv"), "--models", args.models], capture_output=True, check=True)
    t0 = time.monotonic()
    subprocess.run([args.loomd, "run", os.path.join(work, "bench.toml"), "-i", clip, "-o",
                    os.path.join(work, "run.mkv"), "--models", args.models], capture_output=True, check=True)
    run_fps = frames / (time.monotonic() - t0)
    d = Daemon(args, work, "overhead", segment_seconds=args.segment_seconds)
    try:
        d.wait([d.submit(clip, os.path.join(work, "warm.mkv"))])
        t0 = time.monotonic()
        j = d.wait([d.submit(clip, os.path.join(work, "job.mkv"))])
        job_fps = frames / (time.monotonic() - t0)
        segments = list(j.values())[0]["segments_total"]
    finally:
        d.stop()
    return job_fps, run_fps, segments


def histogram_quantiles(metrics_text, name):
    buckets = []
    for m in re.finditer(name + r'_bucket\{le="([^"]+)"\} (\d+)', metrics_text):
        le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
        buckets.append((le, int(m.group(2))))
    total = buckets[-1][1] if buckets else 0

    def q(p):
        for le, c in buckets:
            if c >= p * total:
                return le
        return float("inf")
    return total, q(0.5), q(0.99)


def bench_journal(args, work, clip, frames):
    d = Daemon(args, work, "journal", segment_seconds=args.segment_seconds)
    try:
        d.wait([d.submit(clip, os.path.join(work, "warm.mkv"))])
        d.stop()
        # Killed once segment 1 is recorded; the restart resumes at segment 2.
        d.start(env={"LOOM_JOB_CRASH": "recorded:1"})
        jid = d.submit(clip, os.path.join(work, "crash.mkv"))
        d.proc.wait(600)
        ctx = zmq.Context()
        t0 = time.monotonic()
        d.start()
        ready = time.monotonic() - t0
        st = d.status()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt_string(zmq.SUBSCRIBE, f"job.{jid}.")
        sub.connect(st["events"])
        base = d.job(jid)["frames_done"]
        first = None
        deadline = time.monotonic() + 600
        while first is None and time.monotonic() < deadline:
            if sub.poll(100):
                _, body = sub.recv_multipart()
                j = json.loads(body)["job"]
                if j["state"] == "running" and j["frames_done"] > base:
                    first = time.monotonic() - t0
            else:
                j = d.job(jid)
                if j["state"] == "running" and j["frames_done"] > base:
                    first = time.monotonic() - t0
                if j["state"] == "done" and first is None:
                    first = time.monotonic() - t0
        d.wait([jid])
        sub.close(0)
        ctx.term()
        text = urllib.request.urlopen(f"http://{d.status()['metrics']}/metrics").read().decode()
        n, p50, p99 = histogram_quantiles(text, "loom_journal_commit_seconds")
        return ready, first, n, p50, p99
    finally:
        d.stop()


def bench_soak(args, work, clip):
    d = Daemon(args, work, "soak", segment_seconds=args.segment_seconds)
    try:
        rss = []
        for k in range(args.soak_jobs):
            d.wait([d.submit(clip, os.path.join(work, f"soak-{k % 2}.mkv"))], poll=0.02)
            rss.append(d.rss_mib())
        return rss
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loomd", default=os.path.join(ROOT, "build/loomd"))
    ap.add_argument("--loomctl", default=os.path.join(ROOT, "build/loomctl"))
    ap.add_argument("--model", default="realesr-animevideov3-x2")
    ap.add_argument("--models", default=os.environ.get("LOOM_MODEL_DIR", os.path.expanduser("~/.cache/loom/models")))
    ap.add_argument("--size", default="160x120")
    ap.add_argument("--frames", type=int, default=96)
    ap.add_argument("--segment-seconds", type=float, default=1.0)
    ap.add_argument("--soak-jobs", type=int, default=100)
    ap.add_argument("--soak-size", default="96x64")
    ap.add_argument("--only", default="overhead,concurrency,control,journal,soak")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="loomd-bench-")
    try:
        model = args.model
        if model == "tiny":
            write_tiny_x2(work)
            model = "tiny.param"
        with open(os.path.join(work, "bench.toml"), "w") as f:
            f.write(PIPELINE.format(model=model))
        clip = os.path.join(work, "clip.mp4")
        make_clip(clip, args.size, args.frames)
        only = args.only.split(",")
        print(f"loomd serve bench: model {args.model}, {args.size}, {args.frames} frames a job, "
              f"segments of {args.segment_seconds} s, {os.cpu_count()} cores")
        print("| measure | figure | peer | ratio |\n|---|---|---|---|")
        if "overhead" in only:
            job_fps, run_fps, segments = bench_overhead(args, work, clip, args.frames)
            print(f"| a daemon job ({segments} segments, journal, join): frames / wall | {job_fps:.2f} fps "
                  f"| loomd run, one pass: {run_fps:.2f} fps | {job_fps / run_fps:.3f} |")
            sys.stdout.flush()
        if "concurrency" in only:
            r = bench_concurrency(args, work, clip, args.frames)
            s_fps, s_wall, s_jobs = r[1]
            c_fps, c_wall, c_jobs = r[2]
            print(f"| two jobs at once: frames / wall | {c_fps:.2f} fps ({c_wall:.1f} s; jobs "
                  f"{c_jobs[0]:.2f} and {c_jobs[1]:.2f} fps) | one after the other: {s_fps:.2f} fps ({s_wall:.1f} s) "
                  f"| {c_fps / s_fps:.3f} |")
            sys.stdout.flush()
        if "control" in only:
            alone, polled, polled_rps, flat, flat_rps = bench_control(args, work, clip, args.frames)
            print(f"| job fps, 8 clients polling `status` at 20 Hz ({polled_rps:.0f} requests/s) | {polled:.2f} fps "
                  f"| the job alone: {alone:.2f} fps | {polled / alone:.3f} |")
            print(f"| job fps, 8 clients asking `status` flat out ({flat_rps:.0f} requests/s) | {flat:.2f} fps "
                  f"| the job alone: {alone:.2f} fps | {flat / alone:.3f} |")
            sys.stdout.flush()
        if "journal" in only:
            long_clip = os.path.join(work, "long.mp4")
            make_clip(long_clip, args.soak_size, 24 * 12)  # 12 segments of 1 s
            ready, first, n, p50, p99 = bench_journal(args, work, long_clip, 24 * 12)
            print(f"| journal commit latency ({n} commits, histogram bucket bounds) | p50 <= {p50 * 1e3:g} ms, "
                  f"p99 <= {p99 * 1e3:g} ms | | |")
            print(f"| restart after kill -9 to the first new frame | {first:.2f} s (daemon ready after "
                  f"{ready:.2f} s) | | |")
            sys.stdout.flush()
        if "soak" in only:
            soak_clip = os.path.join(work, "soak.mp4")
            make_clip(soak_clip, args.soak_size, 24)
            rss = bench_soak(args, work, soak_clip)
            k = min(10, len(rss)) - 1
            print(f"| soak: {len(rss)} jobs back to back, RSS after job {k + 1} and at the end | {rss[k]:.1f} MiB "
                  f"-> {rss[-1]:.1f} MiB (max {max(rss):.1f}) | | growth {rss[-1] - rss[k]:+.1f} MiB |")
            marks = sorted({min(len(rss), m) for m in (10, 25, 50, 100, 150, 200, 300, 400, 500)})
            print("soak RSS (MiB) after job " + ", ".join(f"{m}: {rss[m - 1]:.1f}" for m in marks))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
