#!/usr/bin/env python3
"""`loomd serve` and loomctl as processes, end to end, on a 4-second clip and a tiny x2 model
written here (ncnn files), so that a job takes a fraction of a second:

 1. a job submitted with --wait: its output frame for frame (framemd5, pts included) and audio
    equal to `loomd run`'s, its work folder gone, no temporary file left;
 2. the daemon SIGKILLed at every step of a job's durable path (LOOM_JOB_CRASH: submitted,
    mid-segment:1, part-renamed:1, recorded:1, joining, joined) and started again: the job
    resumes, ends done with attempts 2 (1 when the client never got its reply), and its output
    is bit-identical to an uninterrupted job's;
 3. two jobs running at once (jobs_running = 2);
 4. a queued and a running job cancelled: no output, no part file;
 5. typed refusals (malformed request, unknown pipeline, paths outside the allowed folders or
    with '..', an existing output, a full queue) while another client's job runs on, and a
    retried client id that returns its job;
 6. SIGHUP: a new queue limit applies; a broken file is refused and the old limit stays; a
    second daemon on the same state folder is refused;
 7. systemd's notify protocol: READY, STATUS, RELOADING/READY, WATCHDOG (stopped by a stalled
    job), STOPPING;
 8. /metrics, /healthz, /readyz;
 9. a full disk (a file-size limit): the job fails naming the file, the daemon serves on;
10. an AVI (dts only, open GOPs) cut into segments, stopped in its middle, resumes and equals
    loomd run's output; a raw HEVC stream with open GOPs runs whole and is redone whole, and
    so does a job that deinterlaces;
11. a job on the GStreamer back end runs whole, with loomd run's output.

The crash cases run side by side (a daemon each): after a kill, `loomctl watch` notices only at
its next status poll, up to 3 s later.

usage: loomd_serve.py LOOMD LOOMCTL
"""
import errno
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_model import write_tiny_x2  # noqa: E402

LOOMD = os.path.abspath(sys.argv[1])
LOOMCTL = os.path.abspath(sys.argv[2])
failures = []
procs = []  # every process started in the background (daemons, watches): killed at the end
procs_lock = threading.Lock()
T_START = time.monotonic()


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return ok


def say(text):
    print(f"[{time.monotonic() - T_START:6.1f} s] {text}", flush=True)


# ---------------------------------------------------------------------------------------------
# Processes. The binaries may be rebuilt while this runs (another build in the same tree): a
# missing or busy executable is waited for.

def spawn(args, **kw):
    deadline = time.monotonic() + 120
    while True:
        try:
            p = subprocess.Popen(args, **kw)
            return p
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ETXTBSY, errno.EACCES) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run(args, timeout=60, env=None):
    """Runs a command to its end: (rc, stdout, stderr); rc None when it ran past `timeout`."""
    p = spawn(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out, err + f"\n(test: {args[0]} still running after {timeout} s, killed)"
    return p.returncode, out, err


def ctl(endpoint, *args, timeout_ms=None, timeout=60):
    cmd = [LOOMCTL, "--control", endpoint]
    if timeout_ms:
        cmd += ["--timeout-ms", str(timeout_ms)]
    return run(cmd + [str(a) for a in args], timeout=timeout)


def ctl_bg(endpoint, *args, timeout_ms=None):
    """loomctl in the background (watch): a Popen, killed at the end if still running."""
    cmd = [LOOMCTL, "--control", endpoint]
    if timeout_ms:
        cmd += ["--timeout-ms", str(timeout_ms)]
    p = spawn(cmd + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
              errors="replace")
    with procs_lock:
        procs.append(p)
    return p


def finish_bg(p, timeout):
    """(rc, stdout, stderr) of a background loomctl; rc None if it did not end within `timeout`."""
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out, err


def short(text, n=600):
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


class Daemon:
    """One `loomd serve` with its own folder: config, state, log, control and events sockets."""

    def __init__(self, name, jobs_running=1, jobs_queued=64, metrics=True):
        self.name = name
        self.folder = os.path.join(TMP, name)
        os.makedirs(self.folder, exist_ok=True)
        self.out = os.path.join(self.folder, "out")
        os.makedirs(self.out, exist_ok=True)
        self.state = os.path.join(self.folder, "state")
        self.endpoint = f"ipc://{self.folder}/control"
        self.config = os.path.join(self.folder, "loomd.toml")
        self.log_path = os.path.join(self.folder, "loomd.log")
        self.proc = None
        self.log_level = None  # loomd's default (warn)
        self.write_config(jobs_running, jobs_queued, metrics)

    def config_text(self, jobs_running=1, jobs_queued=64, metrics=True):
        text = (f'[control]\nendpoint = "{self.endpoint}"\n'
                f'[paths]\nstate = "state"\npipelines = "{PIPES}"\nallow = ["{TMP}"]\nmodels = "{PIPES}"\n'
                f'[limits]\njobs_running = {jobs_running}\njobs_queued = {jobs_queued}\n'
                f'[jobs]\nsegment_seconds = 1\n')
        if metrics:
            text += '[metrics]\naddress = "127.0.0.1:0"\n'
        return text

    def write_config(self, jobs_running=1, jobs_queued=64, metrics=True, text=None):
        with open(self.config + ".new", "w") as f:
            f.write(text if text is not None else self.config_text(jobs_running, jobs_queued, metrics))
        os.replace(self.config + ".new", self.config)

    def start(self, crash=None, extra_env=None, file_size_max=None):
        env = dict(os.environ)
        for k in ("LOOM_JOB_CRASH", "LOOM_FAULTS", "LOOM_CONTROL", "NOTIFY_SOCKET", "WATCHDOG_USEC",
                  "WATCHDOG_PID"):
            env.pop(k, None)
        env["XDG_STATE_HOME"] = os.path.join(TMP, "xdg")
        if crash:
            env["LOOM_JOB_CRASH"] = crash
        env.update(extra_env or {})
        log = open(self.log_path, "a")
        log.write(f"---- loomd serve (LOOM_JOB_CRASH={crash or ''})\n")
        log.flush()
        limit = None
        if file_size_max:
            def limit():
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_max, file_size_max))
        args = [LOOMD] + (["--log-level", self.log_level] if self.log_level else []) + ["serve", "--config", self.config]
        self.proc = spawn(args, stdout=log, stderr=subprocess.STDOUT,
                          env=env, preexec_fn=limit)
        log.close()
        with procs_lock:
            procs.append(self.proc)
        return self.proc

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                check(False, f"{self.name}: loomd exited with {self.proc.returncode} while starting: "
                             f"{self.log()}")
                return False
            rc, _, _ = ctl(self.endpoint, "ping", timeout_ms=200, timeout=10)
            if rc == 0:
                return True
            time.sleep(0.05)
        check(False, f"{self.name}: loomd did not answer a ping within {timeout} s: {self.log()}")
        return False

    def start_ready(self, **kw):
        self.start(**kw)
        return self.wait_ready()

    def ctl(self, *args, **kw):
        return ctl(self.endpoint, *args, **kw)

    def json(self, *args, what=None):
        """`loomctl --json ARGS`, parsed; None (and a failure) when it fails."""
        rc, out, err = self.ctl("--json", *args)
        if rc != 0:
            check(False, f"{self.name}: loomctl {' '.join(map(str, args))} ({what}): exit {rc}: {short(err)}")
            return None
        try:
            return json.loads(out)
        except ValueError:
            check(False, f"{self.name}: loomctl {' '.join(map(str, args))}: not JSON: {short(out)}")
            return None

    def job(self, job_id):
        return self.json("status", job_id) or {}

    def submit(self, pipeline, inp, out, *extra, what="submit"):
        """Submits (no wait): the job's id, or None (and a failure)."""
        rc, o, err = self.ctl("--json", "submit", "-p", pipeline, inp, out, *extra)
        if not check(rc == 0, f"{self.name}: {what}: loomctl submit exit {rc}: {short(err)}"):
            return None
        try:
            return json.loads(o)["id"]
        except (ValueError, KeyError):
            check(False, f"{self.name}: {what}: submit printed no job JSON: {short(o)}")
            return None

    def wait_state(self, job_id, states, timeout):
        deadline = time.monotonic() + timeout
        j = {}
        while time.monotonic() < deadline:
            rc, out, _ = self.ctl("--json", "status", job_id, timeout_ms=1000, timeout=10)
            if rc == 0:
                j = json.loads(out)
                if j.get("state") in states:
                    return j
            time.sleep(0.03)
        return j

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, what="SIGTERM"):
        """SIGTERM; checks that it drains and exits 0 within 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait_exit(20)
        if rc is None:
            self.proc.kill()
            self.proc.wait()
        check(rc == 0, f"{self.name}: {what}: loomd exited with {rc} (expected 0): {self.log()}")

    def metrics_address(self):
        s = self.json("status", what="daemon status")
        return (s or {}).get("metrics", "")

    def log(self, n=1500):
        try:
            with open(self.log_path, errors="replace") as f:
                return "\n  log: " + short(f.read(), n).replace("\n", "\n  log: ")
        except OSError:
            return "(no log)"


# ---------------------------------------------------------------------------------------------
# Media.

PIPELINE_HEAD = """[pipeline]
name = "{name}"
[[stage]]
name = "decode"
type = "decode"
[[stage]]
name = "restore"
type = "infer"
input = "decode"
model = "tiny.param"
"""
SLOW_STAGE = """[[stage]]
name = "slow"
type = "passthrough"
input = "restore"
delay_ms = 300
"""
ENCODE_STAGE = """[[stage]]
name = "encode"
type = "encode"
input = "{input}"
codec = "libx264"
crf = 18
preset = "ultrafast"
"""
FFV1 = "encode.codec=\"ffv1\""


def framemd5(path):
    """The video frames of `path`: (stream, dts, pts, duration, size, md5) per frame, or None. The
    file's own timestamps (-copyts, -fps_mode passthrough): without them ffmpeg renumbers the
    frames 0, 1, 2 ... and a timeline shifted at a seam would compare equal."""
    rc, out, err = run(["ffmpeg", "-v", "error", "-copyts", "-i", path, "-map", "0:v", "-fps_mode", "passthrough",
                        "-f", "framemd5", "-"], timeout=60)
    if rc != 0:
        return None
    return [tuple(x.strip() for x in line.split(",")) for line in out.splitlines() if line and not line.startswith("#")]


def audio_md5(path):
    """The audio packets' bytes and their timestamps as the file stores them."""
    rc, out, err = run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:a", "-c", "copy", "-f", "md5", "-"],
                       timeout=60)
    rc2, times, _ = run(["ffprobe", "-v", "error", "-select_streams", "a", "-show_entries", "packet=pts,dts",
                         "-of", "csv=p=0", path], timeout=60)
    return f"{out.strip()} {hashlib.md5(times.encode()).hexdigest()}" if rc == 0 and rc2 == 0 else None


def packet_list(path, kind):
    """(time in seconds, md5) of each packet of the first stream of `kind` ("v" or "a"); for video,
    the md5 of the decoded frame (two encoders of one lossless codec store it differently)."""
    p = subprocess.run(["ffprobe", "-v", "error", "-select_streams", kind + ":0", "-show_entries", "packet=pts_time",
                        "-of", "csv=p=0", path], capture_output=True, text=True)
    times = [float(t) for t in p.stdout.split()]
    copy = ["-c", "copy"] if kind == "a" else ["-fps_mode", "passthrough"]
    p = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:" + kind + ":0"] + copy + ["-f", "framemd5", "-"],
                       capture_output=True, text=True)
    hashes = [ln.split(",")[-1].strip() for ln in p.stdout.splitlines() if ln and not ln.startswith("#")]
    return list(zip(times, hashes))


def same_media(path, want_frames, want_audio, what):
    """Checks a job's output against a reference's frames and audio."""
    if not check(os.path.isfile(path), f"{what}: output {path} is missing"):
        return
    frames = framemd5(path)
    if not check(frames is not None and len(frames) > 0, f"{what}: ffmpeg cannot read the frames of {path}"):
        return
    if frames != want_frames:
        diff = next((i for i, (a, b) in enumerate(zip(frames, want_frames)) if a != b), min(len(frames), len(want_frames)))
        check(False, f"{what}: frames differ from the reference: {len(frames)} frames vs {len(want_frames)}; first "
                     f"difference at frame {diff}: {frames[diff] if diff < len(frames) else '-'} vs "
                     f"{want_frames[diff] if diff < len(want_frames) else '-'}")
    a = audio_md5(path)
    check(a is not None and a == want_audio, f"{what}: audio md5 {a} differs from the reference's {want_audio}")


def partials(folder):
    """Writers' temporary files (.STEM.partial-...) in `folder`."""
    try:
        return sorted(n for n in os.listdir(folder) if n.startswith(".") and ".partial-" in n)
    except OSError:
        return []


def listing(folder):
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def job_id_from_text(out):
    m = re.search(r"job (\d+) ", out)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------
# Requests loomctl would never send, through pyzmq (python3-zmq, installed by scripts/bootstrap).

def zmq_request(endpoint, body, timeout=5.0):
    """Sends one request to loomd's ROUTER from a REQ socket; returns the reply as frames
    [delimiter, body] (what a REQ socket strips is put back, so callers see the envelope)."""
    import zmq
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
    try:
        s.connect(endpoint)
        s.send(body)
        try:
            return [b""] + s.recv_multipart()
        except zmq.Again:
            raise ConnectionError(f"no reply from {endpoint} within {timeout} s")
    finally:
        s.close(0)
        ctx.term()


def raw_call(endpoint, body, what):
    """A raw request; its reply JSON, or None (and a failure)."""
    try:
        frames = zmq_request(endpoint, body.encode() if isinstance(body, str) else body)
    except (OSError, ConnectionError) as e:
        check(False, f"{what}: raw ZeroMQ request failed: {e}")
        return None
    if not check(len(frames) == 2 and frames[0] == b"", f"{what}: reply is not [delimiter, body]: {frames!r}"):
        return None
    try:
        return json.loads(frames[1])
    except ValueError:
        check(False, f"{what}: reply is not JSON: {frames[1]!r}")
        return None


# ---------------------------------------------------------------------------------------------
# The sections.

REF = {}  # name -> (frames, audio md5)


def section_basic(d):
    """1. --wait with ffv1 against `loomd run`; then the libx264 reference R (fast and slow)."""
    say("1. submit --wait (ffv1) against loomd run")
    out = os.path.join(d.out, "wait.mkv")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", CLIP, out, "--set", FFV1, "--wait", timeout=120)
    check(rc == 0, f"1: submit --wait: exit {rc} (expected 0): {short(err)} {short(o)}{d.log()}")
    job_id = job_id_from_text(o)
    if not check(job_id is not None, f"1: submit --wait printed no 'job N': {short(o)}"):
        return
    j = d.job(job_id)
    check(j.get("state") == "done", f"1: job {job_id} is {j.get('state')} (expected done): {j}")
    check(j.get("segments_total", 0) >= 3, f"1: job {job_id} had {j.get('segments_total')} segments (expected >= 3 "
                                           f"with segment_seconds = 1 on a 4 s clip)")
    check(j.get("frames_done") == j.get("frames_total") == 96,
          f"1: job {job_id}: frames {j.get('frames_done')}/{j.get('frames_total')} (expected 96/96)")
    check(j.get("attempts") == 1, f"1: job {job_id}: attempts {j.get('attempts')} (expected 1)")
    same_media(out, *REF["ffv1"], "1: daemon ffv1 output vs loomd run")
    check(not os.path.exists(os.path.join(d.state, "jobs", str(job_id))),
          f"1: the job's folder state/jobs/{job_id} is still there: {listing(os.path.join(d.state, 'jobs', str(job_id)))}")
    check(not partials(d.out), f"1: temporary files left in the output folder: {partials(d.out)}")
    # The plan's bounds reach every segment after the first: none scans the file again.
    with open(d.log_path, errors="replace") as f:
        text = f.read()
    planned = text.count("(planned)")
    # The joined output was read back and compared with its source as a whole.
    check(f"job {job_id}: the joined output checked against its source" in text,
          f"1: job {job_id}'s joined output was not checked against its source{d.log()}")
    check(planned >= j.get("segments_total", 0) - 1,
          f"1: {planned} segments opened from the plan's bounds (expected {j.get('segments_total', 0) - 1} or more: "
          f"each other one scans the whole file)")

    say("2. reference: an uninterrupted libx264 job (and the slow pipeline's, which must equal it)")
    r_out = os.path.join(d.out, "R.mkv")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", CLIP, r_out, "--wait", timeout=120)
    check(rc == 0, f"2: reference job: exit {rc}: {short(err)}{d.log()}")
    frames = framemd5(r_out) if rc == 0 else None
    if check(frames, f"2: cannot read the reference output {r_out}"):
        REF["R"] = (frames, audio_md5(r_out))
        check(REF["R"][1] == REF["ffv1"][1], f"2: the libx264 job's audio {REF['R'][1]} differs from loomd run's "
                                             f"{REF['ffv1'][1]}")
    slow_out = os.path.join(d.out, "R-slow.mkv")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2-slow", CLIP, slow_out, "--set", "slow.delay_ms=2", "--wait",
                       timeout=120)
    check(rc == 0, f"2: slow reference job: exit {rc}: {short(err)}{d.log()}")
    if "R" in REF and rc == 0:
        same_media(slow_out, *REF["R"], "2: the slow pipeline (a passthrough stage more) vs the fast one")


def section_gstreamer(d):
    """11. A job whose pipeline decodes and encodes with GStreamer (where the build has it): it runs
    whole (that back end reads and writes whole streams), its output frame for frame and its audio
    equal to `loomd run`'s with FFmpeg."""
    say("11. a job on the GStreamer back end: one segment, the same output as loomd run's")
    out = os.path.join(d.out, "gst.mkv")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", CLIP, out, "--set", FFV1, "--set", 'decode.backend="gstreamer"',
                       "--set", 'encode.backend="gstreamer"', "--wait", timeout=120)
    if "this build has no GStreamer" in o + err:
        say("11: skipped: this build has no GStreamer")
        return
    check(rc == 0, f"11: submit --wait: exit {rc}: {short(err)} {short(o)}{d.log()}")
    job_id = job_id_from_text(o)
    if not check(job_id is not None, f"11: submit --wait printed no 'job N': {short(o)}"):
        return
    j = d.job(job_id)
    check(j.get("state") == "done" and j.get("segments_total") == 1,
          f"11: job {job_id} is {j.get('state')} with {j.get('segments_total')} segments (expected done, 1)")
    # Matroska stores milliseconds, and the two writers round a time between two of them each its
    # own way: times agree to 1 ms. GStreamer's MP4 demuxer ends the audio where the edit list
    # ends, FFmpeg's one packet later: the packets agree but for that last one.
    ref = os.path.join(TMP, "ref.mkv")
    for kind in ("v", "a"):
        got, want = packet_list(out, kind), packet_list(ref, kind)
        n = min(len(got), len(want))
        check(len(want) > 0 and (len(got) == len(want) if kind == "v" else abs(len(got) - len(want)) <= 1),
              f"11: {len(got)} {kind} packets, loomd run's {len(want)}")
        bad = [i for i in range(n) if got[i][1] != want[i][1] or abs(got[i][0] - want[i][0]) > 0.0011]
        check(not bad, f"11: {kind} packet {bad[:1]} is {got[bad[0]] if bad else ''}, loomd run's "
                       f"{want[bad[0]] if bad else ''}")


def section_metrics(d):
    """8. /metrics, /healthz, /readyz of a daemon that has done jobs."""
    say("8. /metrics, /healthz, /readyz")
    addr = d.metrics_address()
    if not check(re.fullmatch(r"127\.0\.0\.1:\d+", addr or "") and not addr.endswith(":0"),
                 f"8: status 'metrics' is {addr!r} (expected the bound 127.0.0.1:PORT)"):
        return

    def get(path):
        try:
            with urllib.request.urlopen(f"http://{addr}{path}", timeout=5) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except OSError as e:
            return None, str(e)

    code, text = get("/metrics")
    check(code == 200, f"8: GET /metrics: {code} {short(text)}")
    for needle in ('loom_jobs{state="done"}', "loom_journal_commit_seconds_bucket", "loom_frames_total"):
        check(needle in text, f"8: /metrics lacks {needle}: {short(text, 300)}")
    m = re.search(r'^loom_jobs\{state="done"\} (\d+)$', text, re.M)
    check(m and int(m.group(1)) >= 3, f"8: /metrics: loom_jobs{{state=\"done\"}} is {m.group(1) if m else None} "
                                      f"(3 jobs done)")
    m = re.search(r"^loom_frames_total (\d+)$", text, re.M)
    check(m and int(m.group(1)) >= 3 * 96, f"8: /metrics: loom_frames_total is {m.group(1) if m else None} "
                                           f"(3 jobs of 96 frames done)")
    code, text = get("/healthz")
    check(code == 200, f"8: GET /healthz: {code} {short(text)}")
    code, text = get("/readyz")
    check(code == 200, f"8: GET /readyz: {code} {short(text)}")


CRASH_POINTS = ["submitted", "mid-segment:1", "part-renamed:1", "recorded:1", "joining", "joined"]


def crash_case(point, index):
    """2. One crash point: killed there, started again, the job resumed to R."""
    what = f"2: crash at {point}"
    d = Daemon(f"c{index}")
    out = os.path.join(d.out, "resumed.mkv")
    jobs_dir = os.path.join(d.state, "jobs")
    # mid-segment needs a segment longer than the progress period (~200 ms): 24 frames x 30 ms.
    pipe, sets = ("tiny-x2-slow", ["--set", "slow.delay_ms=30"]) if point.startswith("mid-segment") else ("tiny-x2", [])
    if not d.start_ready(crash=point):
        return
    watch = None
    job_id = None
    if point == "submitted":
        rc, o, err = d.ctl("submit", "-p", pipe, CLIP, out, *sets, timeout_ms=1500)
        check(rc not in (0, None), f"{what}: the submit got a reply (exit {rc}: {short(o)}) though loomd dies "
                                   f"before it")
    else:
        job_id = d.submit(pipe, CLIP, out, *sets, what=what)
        if job_id is None:
            return
        watch = ctl_bg(d.endpoint, "watch", job_id, timeout_ms=1000)
    rc = d.wait_exit(60)
    if not check(rc == -signal.SIGKILL, f"{what}: loomd ended with {rc} (expected -9, killed by LOOM_JOB_CRASH)"
                                        f"{d.log()}"):
        if rc is None:
            d.proc.kill()
            d.proc.wait()
        return
    if watch is not None:
        # The watch notices at its next status poll (every 10 s): a failed call, non-zero.
        wrc, wout, werr = finish_bg(watch, 30)
        check(wrc not in (0, None), f"{what}: loomctl watch ended with {wrc} after the daemon died (expected "
                                    f"non-zero): {short(werr)} {short(wout)}")
    # Where it stopped: the output is in place only from `joined` on.
    if point == "joined":
        check(os.path.isfile(out), f"{what}: the output is not in place after the crash at 'joined'")
    elif point != "submitted":
        check(not os.path.exists(out), f"{what}: an output is in place after a crash before the join")
    if point == "part-renamed:1":
        check(os.path.isfile(os.path.join(jobs_dir, str(job_id), "part-00001.mkv")),
              f"{what}: part-00001 is not in place: {listing(os.path.join(jobs_dir, str(job_id)))}")
    if not d.start_ready():
        return
    lst = d.json("list", what="list after the restart")
    jobs = (lst or {}).get("jobs", [])
    if not check(len(jobs) == 1, f"{what}: {len(jobs)} jobs after the restart (expected exactly 1): {jobs}"):
        d.stop()
        return
    job_id = jobs[0].get("id") if job_id is None else job_id
    check(jobs[0].get("id") == job_id, f"{what}: the job after the restart is {jobs[0].get('id')}, not {job_id}")
    rc, o, err = d.ctl("watch", job_id, timeout=120)
    check(rc == 0, f"{what}: watching the resumed job: exit {rc} (expected 0): {short(err)} {short(o)}{d.log()}")
    j = d.job(job_id)
    check(j.get("state") == "done", f"{what}: the resumed job is {j.get('state')} (expected done): {j}")
    want_attempts = 1 if point == "submitted" else 2
    check(j.get("attempts") == want_attempts, f"{what}: attempts {j.get('attempts')} (expected {want_attempts})")
    check(j.get("frames_done") == 96, f"{what}: frames_done {j.get('frames_done')} (expected 96)")
    if "R" in REF:
        same_media(out, *REF["R"], f"{what}: resumed output vs the uninterrupted job's")
    check(not os.path.exists(os.path.join(jobs_dir, str(job_id))),
          f"{what}: the job's folder state/jobs/{job_id} is still there: "
          f"{listing(os.path.join(jobs_dir, str(job_id)))}")
    check(listing(jobs_dir) == [], f"{what}: files left in state/jobs: {listing(jobs_dir)}")
    check(listing(d.out) == ["resumed.mkv"], f"{what}: the output folder holds {listing(d.out)} (expected only "
                                             f"resumed.mkv)")
    say(f"{what}: killed (-9), resumed: {j.get('state')}, attempts {j.get('attempts')}, "
        f"{j.get('segments_done')}/{j.get('segments_total')} segments")
    d.stop(f"{what}: SIGTERM after the resumed job")


def section_crashes():
    say("2. crash at each point of a job's durable path, then resume (side by side)")
    if "R" not in REF:
        check(False, "2: crash cases skipped: no reference output R")
        return
    threads = []
    for i, point in enumerate(CRASH_POINTS):
        def body(point=point, i=i):
            try:
                crash_case(point, i)
            except Exception:
                check(False, f"2: crash at {point}: the test raised: {traceback.format_exc()}")
        t = threading.Thread(target=body, name=point)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def section_two_at_once():
    """3. jobs_running = 2: both run at once, both done and right."""
    say("3. two jobs at once (jobs_running = 2)")
    d = Daemon("two", jobs_running=2)
    if not d.start_ready():
        return
    outs = [os.path.join(d.out, f"two-{k}.mkv") for k in range(2)]
    ids = [d.submit("tiny-x2-slow", CLIP, o, "--set", FFV1, "--set", "slow.delay_ms=25", what=f"3: job {k}")
           for k, o in enumerate(outs)]
    if None in ids:
        d.stop()
        return
    both = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not both:
        lst = d.json("list", what="3: list") or {}
        states = {j["id"]: j["state"] for j in lst.get("jobs", [])}
        both = all(states.get(i) == "running" for i in ids)
        if all(states.get(i) in ("done", "failed", "cancelled") for i in ids):
            break
        time.sleep(0.03)
    check(both, "3: list never showed both jobs running at once (jobs_running = 2)")
    for k, (i, o) in enumerate(zip(ids, outs)):
        rc, out, err = d.ctl("watch", i, timeout=120)
        check(rc == 0, f"3: watch job {i}: exit {rc}: {short(err)}")
        j = d.job(i)
        check(j.get("state") == "done", f"3: job {i} is {j.get('state')} (expected done): {j}")
        same_media(o, *REF["ffv1"], f"3: job {k} (ran beside another) vs loomd run")
    d.stop()


def section_cancel():
    """4. Cancel a queued job, then the running one."""
    say("4. cancel a queued job and a running one")
    d = Daemon("cancel")
    if not d.start_ready():
        return
    out_a, out_b = os.path.join(d.out, "a.mkv"), os.path.join(d.out, "b.mkv")
    a = d.submit("tiny-x2-slow", CLIP, out_a, what="4: slow job")  # 300 ms a frame: ~30 s
    b = d.submit("tiny-x2", CLIP, out_b, what="4: queued job")
    if a is None or b is None:
        d.stop()
        return
    ja = d.wait_state(a, ("running",), 15)
    check(ja.get("state") == "running", f"4: the slow job is {ja.get('state')} (expected running)")
    jb = d.job(b)
    check(jb.get("state") == "queued", f"4: the second job is {jb.get('state')} (expected queued behind the first)")
    rc, o, err = d.ctl("cancel", b)
    check(rc == 0, f"4: cancel the queued job: exit {rc}: {short(err)}")
    jb = d.job(b)
    check(jb.get("state") == "cancelled", f"4: the queued job is {jb.get('state')} after cancel (expected cancelled)")
    rc, o, err = d.ctl("status", b)
    check(rc == 4, f"4: loomctl status of the cancelled job: exit {rc} (expected 4)")
    check(d.job(a).get("state") == "running", "4: cancelling the queued job stopped the running one")
    watch = ctl_bg(d.endpoint, "watch", a)
    time.sleep(0.3)
    t0 = time.monotonic()
    rc, o, err = d.ctl("cancel", a)
    check(rc == 0, f"4: cancel the running job: exit {rc}: {short(err)}")
    ja = d.wait_state(a, ("cancelled", "done", "failed"), 10)
    took = time.monotonic() - t0
    check(ja.get("state") == "cancelled", f"4: the running job is {ja.get('state')} 10 s after cancel (expected "
                                          f"cancelled){d.log()}")
    check(took < 5, f"4: the running job took {took:.1f} s to cancel (expected a few seconds)")
    wrc, wout, werr = finish_bg(watch, 20)
    check(wrc == 4, f"4: loomctl watch of the cancelled job ended with {wrc} (expected 4): {short(werr)}")
    time.sleep(0.2)
    check(not os.path.exists(out_a) and not os.path.exists(out_b),
          f"4: a cancelled job left an output: {listing(d.out)}")
    check(listing(d.out) == [], f"4: files left in the output folder: {listing(d.out)}")
    for i in (a, b):
        check(not os.path.exists(os.path.join(d.state, "jobs", str(i))),
              f"4: cancelled job {i} left its folder: {listing(os.path.join(d.state, 'jobs', str(i)))}")
    check(listing(os.path.join(d.state, "jobs")) == [], f"4: left in state/jobs: {listing(os.path.join(d.state, 'jobs'))}")
    d.stop()


def section_refusals():
    """5. Typed refusals while another client's job runs on; a retried client id."""
    say("5. refusals while another job runs (jobs_queued = 1)")
    d = Daemon("refuse", jobs_queued=1)
    if not d.start_ready():
        return
    keep_out = os.path.join(d.out, "keeper.mkv")
    # 96 frames x 200 ms: runs ~19 s, through every refusal below (they take 5-6 s under ASan,
    # more while other tests share the cores: 80 ms a frame was not always enough).
    keeper = d.submit("tiny-x2-slow", CLIP, keep_out, "--set", "slow.delay_ms=200", "--set", FFV1,
                      "--client-id", "keeper", what="5: the running job")
    if keeper is None:
        d.stop()
        return
    j = d.wait_state(keeper, ("running",), 15)
    check(j.get("state") == "running", f"5: the first job is {j.get('state')} (expected running)")

    def refused(args, want_rc, code, needles, what):
        rc, o, err = d.ctl("submit", *args)
        check(rc == want_rc, f"5: {what}: loomctl exit {rc} (expected {want_rc}): {short(err)} {short(o)}")
        check(code in err, f"5: {what}: stderr does not name {code}: {short(err)}")
        for n in needles:
            check(n in err, f"5: {what}: the message does not name {n!r}: {short(err)}")

    # A malformed request, as loomctl never sends it: raw JSON on the control socket.
    base_args = {"pipeline": "tiny-x2", "input": CLIP, "output": os.path.join(d.out, "raw.mkv")}
    r = raw_call(d.endpoint, json.dumps({"protocol": 2, "cmd": "submit", "id": 41,
                                         "args": dict(base_args, colour="blue")}), "5: unknown args field")
    if r is not None:
        err = r.get("error") or {}
        check(r.get("ok") is False and err.get("code") == "INVALID_ARGUMENT" and "args.colour" in err.get("message", ""),
              f"5: a submit with an unknown args field: {r} (expected INVALID_ARGUMENT naming 'args.colour')")
        check(r.get("id") == 41, f"5: the error reply's id is {r.get('id')} (expected the request's 41)")
    r = raw_call(d.endpoint, json.dumps({"protocol": 2, "cmd": "submit", "id": 42,
                                         "args": dict(base_args, output=f"{d.out}/../out/raw.mkv")}),
                 "5: output with '..' (raw)")
    if r is not None:
        err = r.get("error") or {}
        check(r.get("ok") is False and err.get("code") == "INVALID_ARGUMENT" and "output" in err.get("message", "")
              and "'..'" in err.get("message", ""),
              f"5: a submit whose output holds '..': {r} (expected INVALID_ARGUMENT naming output and '..')")
    r = raw_call(d.endpoint, b'{"protocol": 2, "cmd": "submit", "id": 43, "args": {', "5: truncated JSON")
    if r is not None:
        check(r.get("ok") is False and (r.get("error") or {}).get("code") in ("PARSE_ERROR", "INVALID_ARGUMENT"),
              f"5: a truncated request: {r} (expected a PARSE_ERROR / INVALID_ARGUMENT reply)")

    refused(["-p", "no-such-pipeline", CLIP, os.path.join(d.out, "x.mkv")], 1, "NOT_FOUND",
            ["no-such-pipeline", "tiny-x2", "known"], "unknown pipeline")
    refused(["-p", "tiny-x2", "/etc/hostname", os.path.join(d.out, "x.mkv")], 2, "INVALID_ARGUMENT",
            ["input", "/etc/hostname", "outside"], "input outside the allowed folders")
    # loomctl normalises paths (a/b/../c -> a/c): a '..' that climbs out of the allowed folder.
    refused(["-p", "tiny-x2", CLIP, os.path.join(TMP, "..", "escaped.mkv")], 2, "INVALID_ARGUMENT",
            ["output", "outside"], "output with '..' out of the allowed folders")
    existing = os.path.join(d.out, "existing.mkv")
    with open(existing, "wb") as f:
        f.write(b"an older file")
    refused(["-p", "tiny-x2", CLIP, existing, "--set", FFV1], 1, "FAILED_PRECONDITION",
            ["output", "existing.mkv", "exists"], "existing output without --overwrite")
    rc, o, err = d.ctl("--json", "submit", "-p", "tiny-x2", CLIP, existing, "--set", FFV1, "--overwrite",
                       "--client-id", "client-b")
    check(rc == 0, f"5: existing output with --overwrite: exit {rc} (expected 0): {short(err)}")
    second = json.loads(o).get("id") if rc == 0 else None
    # A retried submit with the same client id: the same job, though the queue is full now.
    rc, o, err = d.ctl("--json", "submit", "-p", "tiny-x2", CLIP, existing, "--set", FFV1, "--overwrite",
                       "--client-id", "client-b")
    check(rc == 0 and json.loads(o).get("id") == second,
          f"5: a retried client id: exit {rc}, {short(o or err)} (expected job {second} again)")
    # A job that can never fit in the device's memory (whole frames only, 16 in flight, of a 5K
    # frame: about 13 GB on the 8 GiB `edge`) is refused at submit, naming the figures.
    big = os.path.join(TMP, "big.mkv")
    rc, o, err = run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "color=size=5120x2880:rate=1", "-frames:v",
                      "1", "-c:v", "ffv1", big])
    if check(rc == 0, f"5: ffmpeg cannot make the 5K frame: {short(err)}"):
        refused(["-p", "tiny-x2", big, os.path.join(d.out, "huge.mkv"), "--set", "restore.tile=-1", "--set",
                 "restore.in_flight=16"], 1, "OUT_OF_DEVICE_MEMORY",
                ["at least", "16 in flight", "tiny.param", "edge", "can never run"], "a job that cannot fit")
    refused(["-p", "tiny-x2", CLIP, os.path.join(d.out, "third.mkv")], 75, "RESOURCE_EXHAUSTED",
            ["queue is full", "jobs_queued = 1"], "a full queue")
    lst = (d.json("list", what="5: list") or {}).get("jobs", [])
    check(sorted(j["id"] for j in lst) == sorted([keeper, second]),
          f"5: list holds {[(j['id'], j['output']) for j in lst]} (expected only the running job and the "
          f"accepted one: refusals and a retry add none)")
    j = d.job(keeper)
    check(j.get("state") == "running", f"5: the first job is {j.get('state')} after the refusals (expected still "
                                       f"running: they must not disturb it)")
    for i, o in ((keeper, keep_out), (second, existing)):
        rc, out, err = d.ctl("watch", i, timeout=120)
        check(rc == 0, f"5: watch job {i}: exit {rc}: {short(err)}{d.log()}")
        j = d.job(i)
        check(j.get("state") == "done", f"5: job {i} is {j.get('state')} (expected done): {j}")
        same_media(o, *REF["ffv1"], f"5: job {i} vs loomd run")
    check(not any(os.path.exists(os.path.join(d.out, f)) for f in ("third.mkv", "raw.mkv", "huge.mkv")),
          f"5: a refused job wrote an output: {listing(d.out)}")
    d.stop()


def section_sighup():
    """6. SIGHUP: a new queue limit applies; a broken file is refused, the old limit stays."""
    say("6. SIGHUP: a new jobs_queued, then a broken file")
    bad = os.path.join(TMP, "broken.toml")
    with open(bad, "w") as f:
        f.write('[limits]\njobs_running = "x"\n')
    rc, o, err = run([LOOMD, "serve", "--config", bad], timeout=30,
                     env=dict(os.environ, XDG_STATE_HOME=os.path.join(TMP, "xdg")))
    check(rc == 2 and re.search(r"broken\.toml:2:\d+", err + o) and "jobs_running" in err + o,
          f"6: loomd serve with a broken config: exit {rc}, {short(err + o)} (expected 2 and file:line:col "
          f"naming jobs_running)")

    d = Daemon("hup", jobs_queued=64)
    if not d.start_ready():
        return
    # A second daemon on the same state folder (another control endpoint) is refused: two would
    # resume the same jobs into the same part files.
    rc, o, err = run([LOOMD, "serve", "--config", d.config, "--control", f"ipc://{d.folder}/second"], timeout=30,
                     env=dict(os.environ, XDG_STATE_HOME=os.path.join(TMP, "xdg")))
    check(rc == 1 and "in use by another loomd" in err + o and str(d.proc.pid) in err + o,
          f"6: a second loomd on the same state folder: exit {rc}, {short(err + o)} (expected 1, naming pid "
          f"{d.proc.pid})")
    long_sets = ["--set", "slow.delay_ms=300"]
    a = d.submit("tiny-x2-slow", CLIP, os.path.join(d.out, "a.mkv"), *long_sets, what="6: running job")
    j = d.wait_state(a, ("running",), 15) if a else {}
    check(j.get("state") == "running", f"6: the first job is {j.get('state')} (expected running)")
    b = d.submit("tiny-x2", CLIP, os.path.join(d.out, "b.mkv"), what="6: queued job 1 (limit 64)")
    c = d.submit("tiny-x2", CLIP, os.path.join(d.out, "c.mkv"), what="6: queued job 2 (limit 64)")
    d.write_config(jobs_queued=1)
    d.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", CLIP, os.path.join(d.out, "d.mkv"))
    check(rc == 75 and "RESOURCE_EXHAUSTED" in err and "jobs_queued = 1" in err,
          f"6: after SIGHUP with jobs_queued = 1 and 2 queued: exit {rc}, {short(err or o)} (expected 75, "
          f"RESOURCE_EXHAUSTED, jobs_queued = 1){d.log()}")
    d.write_config(text='[limits]\njobs_running = "x"\n')
    d.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    check(d.proc.poll() is None, f"6: loomd exited ({d.proc.returncode}) after SIGHUP with a broken file{d.log()}")
    rc, o, err = d.ctl("ping", timeout_ms=2000)
    check(rc == 0, f"6: ping after SIGHUP with a broken file: exit {rc}: {short(err)}")
    check("reload refused" in d.log(4000) and "jobs_running" in d.log(4000),
          f"6: the daemon did not log the refused reload naming the field:{d.log()}")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", CLIP, os.path.join(d.out, "e.mkv"))
    check(rc == 75 and "jobs_queued = 1" in err,
          f"6: after a broken SIGHUP: exit {rc}, {short(err or o)} (expected 75: the limit of 1 still holds)")
    # Room for exactly one: the old limit (1), not a default, still holds.
    for i in (b, c):
        if i:
            d.ctl("cancel", i)
    f1 = d.submit("tiny-x2", CLIP, os.path.join(d.out, "f.mkv"), what="6: one queued job after the broken SIGHUP")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", CLIP, os.path.join(d.out, "g.mkv"))
    check(rc == 75, f"6: a second queued job after the broken SIGHUP: exit {rc} (expected 75, limit 1): {short(err)}")
    j = d.job(a) if a else {}
    check(j.get("state") == "running", f"6: the running job is {j.get('state')} after the reloads (expected running)")
    for i in (f1, a):
        if i:
            d.ctl("cancel", i)
    d.stop()


def section_notify():
    """7. systemd's notify protocol, with the watchdog."""
    say("7. notify socket: READY, STATUS, RELOADING, WATCHDOG, STOPPING")
    d = Daemon("notify")
    path = os.path.join(TMP, "notify.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(path)
    ns.settimeout(0.1)
    msgs = []  # (monotonic time, datagram text)
    done = threading.Event()

    def reader():
        while not done.is_set():
            try:
                data = ns.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            msgs.append((time.monotonic(), data.decode(errors="replace")))

    t = threading.Thread(target=reader, daemon=True)
    t.start()

    def first(pred, after=0.0):
        for k, (ts, m) in enumerate(list(msgs)):
            if ts >= after and pred(m):
                return k, ts
        return None, None

    def wait_for(pred, timeout, after=0.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            k, ts = first(pred, after)
            if k is not None:
                return k, ts
            time.sleep(0.02)
        return None, None

    lines = lambda m: m.split("\n")
    watchdogs = lambda a, b: [ts for ts, m in list(msgs) if "WATCHDOG=1" in lines(m) and a <= ts <= b]
    try:
        d.start(extra_env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000"})
        if not d.wait_ready():
            return
        k_ready, _ = wait_for(lambda m: "READY=1" in lines(m), 5)
        check(k_ready is not None, f"7: no READY=1 came: {msgs}")
        k, _ = wait_for(lambda m: any(re.match(r"STATUS=\d+ running, \d+ queued, \d+ done, \d+ failed", x)
                                      for x in lines(m)), 3)
        check(k is not None, f"7: no 'STATUS=N running, M queued, D done, F failed' came: {msgs}")
        t0 = time.monotonic()
        time.sleep(1.6)
        idle = watchdogs(t0, time.monotonic())
        check(len(idle) >= 2, f"7: {len(idle)} WATCHDOG=1 in 1.6 s idle (expected one every 0.5 s): {msgs}")

        t_hup = time.monotonic()
        d.proc.send_signal(signal.SIGHUP)
        k_rel, ts_rel = wait_for(lambda m: "RELOADING=1" in lines(m), 5, t_hup)
        check(k_rel is not None and any(x.startswith("MONOTONIC_USEC=") for x in lines(msgs[k_rel][1])),
              f"7: no RELOADING=1 with MONOTONIC_USEC= after SIGHUP: {msgs}")
        if k_rel is not None:
            k_rdy2, _ = wait_for(lambda m: "READY=1" in lines(m), 5, ts_rel)
            check(k_rdy2 is not None and k_rdy2 > k_rel, f"7: no READY=1 after RELOADING=1: {msgs[k_rel:]}")

        # A job whose frames come every 2.5 s: while it runs, the watchdog goes quiet.
        job = d.submit("tiny-x2-slow", CLIP, os.path.join(d.out, "stall.mkv"), "--set", "slow.delay_ms=2500",
                       what="7: stalled job")
        if job is not None:
            j = d.wait_state(job, ("running",), 10)
            check(j.get("state") == "running", f"7: the slow job is {j.get('state')} (expected running)")
            w0 = time.monotonic()
            time.sleep(3.2)
            w1 = time.monotonic()
            j = d.job(job)
            check(j.get("state") == "running", f"7: the slow job is {j.get('state')} after 3 s (expected running)")
            marks = [w0] + watchdogs(w0, w1) + [w1]
            gap = max(b - a for a, b in zip(marks, marks[1:]))
            say(f"7: largest gap between WATCHDOG=1 while the stalled job ran: {gap:.2f} s")
            check(gap >= 1.5, f"7: WATCHDOG=1 kept coming while a job's frames stalled (largest gap {gap:.2f} s in "
                              f"{w1 - w0:.1f} s; times {[round(m - w0, 2) for m in marks]})")
            k, _ = wait_for(lambda m: any(re.match(r"STATUS=1 running", x) for x in lines(m)), 1, 0)
            check(k is not None, f"7: no STATUS=1 running while the job ran: {[m for _, m in msgs if 'STATUS' in m]}")
            rc, o, err = d.ctl("cancel", job)
            check(rc == 0, f"7: cancel the stalled job: exit {rc}: {short(err)}")
            j = d.wait_state(job, ("cancelled", "done", "failed"), 10)
            check(j.get("state") == "cancelled", f"7: the stalled job is {j.get('state')} after cancel")
            t_idle = time.monotonic()
            k, _ = wait_for(lambda m: "WATCHDOG=1" in lines(m), 2, t_idle)
            check(k is not None, "7: no WATCHDOG=1 within 2 s once the stalled job was cancelled (idle again)")

        t_term = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        rc = d.wait_exit(20)
        check(rc == 0, f"7: loomd exited with {rc} after SIGTERM (expected 0){d.log()}")
        k_stop, _ = wait_for(lambda m: "STOPPING=1" in lines(m), 2, t_term)
        check(k_stop is not None, f"7: no STOPPING=1 after SIGTERM: {msgs[-5:]}")
        if None not in (k_ready, k_rel, k_stop):
            check(k_ready < k_rel < k_stop, f"7: order READY {k_ready}, RELOADING {k_rel}, STOPPING {k_stop} (expected "
                                           f"ascending)")
    finally:
        done.set()
        t.join(2)
        ns.close()


def section_full_disk():
    """9. A file that cannot grow (RLIMIT_FSIZE, as a full disk): the job fails naming the file, the
    daemon serves on (SIGXFSZ ignored), the next job that fits is done, nothing is left behind."""
    say("9. a full disk (a file-size limit): the job fails naming the file, the daemon serves on")
    d = Daemon("full")
    if not d.start_ready(file_size_max=1024 * 1024):  # the journal fits, a 3 MB ffv1 output does not
        return
    big = os.path.join(d.out, "big.mkv")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", CLIP, big, "--set", FFV1, "--wait", timeout=120)
    check(rc == 3 and "File too large" in err and "IO_ERROR" in err,
          f"9: a job past the size limit: exit {rc}, {short(err or o)} (expected 3, IO_ERROR, File too large){d.log()}")
    check(d.proc.poll() is None, f"9: loomd died on the size limit (exit {d.proc.returncode}){d.log()}")
    small = os.path.join(d.out, "small.mkv")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", CLIP, small, "--set", "encode.crf=45", "--wait", timeout=120)
    check(rc == 0 and os.path.isfile(small), f"9: a job that fits after the failed one: exit {rc}, {short(err or o)}")
    check(not os.path.exists(big), "9: the failed job left an output")
    check(listing(os.path.join(d.state, "jobs")) == [], f"9: part folders left: {listing(os.path.join(d.state, 'jobs'))}")
    check(partials(d.out) == [], f"9: temporary files left: {partials(d.out)}")
    d.stop()


def section_uncut():
    """10. Inputs without a pts on every packet. An AVI (MPEG-4 with B-frames and open GOPs, MP3):
    cut into segments, a daemon stopped (SIGTERM) in its middle resumes the rest, and the joined
    output equals `loomd run`'s whole-file output frame for frame, with its audio. A raw HEVC stream
    with open GOPs (no timestamps; its CRA keyframes cannot be placed without decoding) runs as one
    segment and is redone whole after a SIGTERM."""
    say("10. an AVI cut into segments and resumed; a raw HEVC stream run whole and redone after a SIGTERM")
    avi = os.path.join(TMP, "clip.avi")
    rc, o, err = run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24", "-f", "lavfi",
                      "-i", "sine=frequency=440:sample_rate=44100", "-t", "4", "-c:v", "mpeg4", "-bf", "2", "-g", "12",
                      "-c:a", "libmp3lame", avi])
    hevc = os.path.join(TMP, "clip.hevc")
    rc2, o2, err2 = run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24", "-t", "2",
                         "-c:v", "libx265", "-x265-params", "log-level=0:keyint=12", hevc])
    if not check(rc == 0 and rc2 == 0, f"10: ffmpeg cannot make the inputs: {short(err + err2)}"):
        return
    ref = os.path.join(TMP, "avi-ref.mkv")
    rc, o, err = run([LOOMD, "run", os.path.join(PIPES, "tiny-x2.toml"), "-i", avi, "-o", ref, "--set", FFV1],
                     timeout=120, env=dict(os.environ, XDG_STATE_HOME=os.path.join(TMP, "xdg")))
    ref_frames = framemd5(ref) if rc == 0 else None
    if not check(ref_frames and len(ref_frames) == 96, f"10: loomd run on the AVI: exit {rc}: {short(err)}"):
        return
    d = Daemon("uncut", jobs_running=2)  # both jobs are stopped in their middle
    if not d.start_ready():
        return
    avi_out = os.path.join(d.out, "avi.mkv")
    a = d.submit("tiny-x2-slow", avi, avi_out, "--set", FFV1, "--set", "slow.delay_ms=80", what="10: the AVI job")
    hevc_out = os.path.join(d.out, "hevc.mkv")
    h = d.submit("tiny-x2-slow", hevc, hevc_out, "--set", "slow.delay_ms=150", what="10: the HEVC job")
    if a is None or h is None:
        d.stop()
        return
    d.wait_state(a, ("running",), 15)
    d.wait_state(h, ("running",), 15)
    time.sleep(3.0)
    s = d.job(a)
    check(s.get("state") == "running" and s.get("segments_total", 0) >= 3 and s.get("frames_total") == 96,
          f"10: the AVI job is {s.get('state')} with {s.get('segments_total')} segments and {s.get('frames_total')} "
          f"frames (expected running, >= 3 segments of 96 frames){d.log()}")
    d.stop()
    if not d.start_ready():
        return
    for j, what in ((a, "AVI"), (h, "HEVC")):
        rc, o, err = d.ctl("watch", j, timeout=120)
        s = d.job(j)
        check(rc == 0 and s.get("state") == "done" and s.get("attempts") == 2,
              f"10: after the restart the {what} job is {s.get('state')} (attempts {s.get('attempts')}), watch exit "
              f"{rc}: {short(err)}{d.log()}")
    s = d.job(h)
    check(s.get("segments_total") == 1, f"10: the raw HEVC job had {s.get('segments_total')} segments (expected 1)")
    # Deinterlacing makes each frame with its neighbours: such a job is not cut either.
    inter = os.path.join(TMP, "interlaced.mkv")
    rc, o, err = run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24", "-t", "2",
                      "-c:v", "libx264", "-g", "12", "-flags", "+ildct+ilme", "-x264-params", "tff=1", inter])
    inter_out = os.path.join(d.out, "deinterlaced.mkv")
    rc, o, err = d.ctl("submit", "-p", "tiny-x2", inter, inter_out, "--set", 'decode.deinterlace="bwdif"', "--wait",
                       timeout=120)
    j = job_id_from_text(o)
    s = d.job(j) if j is not None else {}
    check(rc == 0 and s.get("segments_total") == 1 and len(framemd5(inter_out) or []) == 48,
          f"10: the deinterlacing job: exit {rc}, {s.get('segments_total')} segments (expected 1): {short(err)}")
    same_media(avi_out, ref_frames, audio_md5(ref), "10: the AVI job's joined segments vs loomd run on the whole file")
    frames = framemd5(hevc_out)
    check(frames is not None and len(frames) == 48, f"10: the HEVC job's output has {len(frames or [])} frames (48)")
    d.stop()


def section_state_folder():
    """11. The state folder: one that cannot be made, a damaged journal and a full one each give
    an error naming the path; nothing acknowledged is lost, and a damaged file is left as it was."""
    say("11. the state folder: cannot be made, damaged, full")
    # A state folder under a regular file: loomd exits at start naming it.
    d = Daemon("state-notdir")
    blocker = os.path.join(d.folder, "blocker")
    with open(blocker, "w") as f:
        f.write("a file, not a folder\n")
    d.write_config(text=d.config_text().replace('state = "state"', 'state = "blocker/state"'))
    d.start()
    rc = d.wait_exit(30)
    log = d.log()
    check(rc not in (None, 0) and "blocker/state" in log and "Not a directory" in log,
          f"11: a state folder under a file: exit {rc} (expected an error naming it){log}")
    # A damaged journal: loomd refuses to start, names the file and the damage, and keeps it.
    d = Daemon("state-damaged")
    os.makedirs(d.state, exist_ok=True)
    journal = os.path.join(d.state, "journal.db")
    junk = b"SQLite format 3\0" + bytes(range(256)) * 64
    with open(journal, "wb") as f:
        f.write(junk)
    d.start()
    rc = d.wait_exit(30)
    log = d.log()
    check(rc not in (None, 0) and journal in log and "damaged" in log,
          f"11: a damaged journal: exit {rc} (expected an error naming {journal} as damaged){log}")
    with open(journal, "rb") as f:
        check(f.read() == junk, "11: the damaged journal was changed (it must be left for the operator)")
    # A full state folder (a file-size limit on the journal's files): a submit that cannot be
    # committed is refused naming the journal; every job acknowledged before survives a restart.
    d = Daemon("state-full", jobs_queued=400)
    if not d.start_ready(file_size_max=160 * 1024):
        return
    acked, refusal = [], None
    for i in range(300):
        rc, o, err = d.ctl("--json", "submit", "-p", "tiny-x2-slow", CLIP, os.path.join(d.out, f"q{i}.mkv"),
                           "--set", "slow.delay_ms=500")
        if rc != 0:
            refusal = err
            break
        acked.append(json.loads(o)["id"])
    say(f"11: {len(acked)} submits acknowledged, then: {short(refusal or '', 300)}")
    check(refusal is not None and journal_of(d) in refusal and ("write failed" in refusal or "File too large" in refusal),
          f"11: {len(acked)} submits, then: {short(refusal or 'no refusal')} (expected a refusal naming "
          f"{journal_of(d)}){d.log()}")
    rc, _, err = d.ctl("ping")
    check(rc == 0 and d.proc.poll() is None, f"11: loomd stopped serving after the full journal: {short(err)}")
    d.stop()
    if not d.start_ready():
        return
    ids = {j["id"] for j in (d.json("list", what="11: list") or {}).get("jobs", [])}
    lost = [i for i in acked if i not in ids]
    check(acked and not lost, f"11: acknowledged jobs lost after the restart: {lost} of {len(acked)}{d.log()}")
    for i in acked:
        d.ctl("cancel", i)
    d.stop()


def section_output_moved():
    """12. The output folder swapped for a link out of the allowed folders while the job runs: the
    join refuses it, naming the output, and writes nothing there."""
    say("12. the output folder becomes a link out of the allowed folders mid-job")
    d = Daemon("moved")
    if not d.start_ready():
        return
    folder = os.path.join(d.out, "sub")
    os.makedirs(folder)
    outside = tempfile.mkdtemp(prefix="loomd-outside-", dir="/tmp")
    try:
        j = d.submit("tiny-x2-slow", CLIP, os.path.join(folder, "o.mkv"), "--set", "slow.delay_ms=30",
                     what="12: the job")
        if j is None:
            return
        d.wait_state(j, ("running",), 15)
        os.rename(folder, folder + ".old")
        os.symlink(outside, folder)
        rc, o, err = d.ctl("watch", j, timeout=120)
        s = d.job(j)
        check(s.get("state") == "failed" and "before the join" in s.get("error", "")
              and "o.mkv" in s.get("error", ""),
              f"12: the job is {s.get('state')}: {short(s.get('error', ''))} (expected failed before the join, "
              f"naming the output){d.log()}")
        check(os.listdir(outside) == [], f"12: the job wrote out of the allowed folders: {os.listdir(outside)}")
    finally:
        d.stop()
        shutil.rmtree(outside, ignore_errors=True)


def journal_of(d):
    return os.path.join(d.state, "journal.db")


def main():
    global TMP, PIPES, CLIP
    TMP = tempfile.mkdtemp(prefix="loomd-serve-", dir="/tmp")
    try:
        PIPES = os.path.join(TMP, "pipes")
        os.makedirs(PIPES)
        write_tiny_x2(PIPES)
        with open(os.path.join(PIPES, "tiny-x2.toml"), "w") as f:
            f.write(PIPELINE_HEAD.format(name="tiny-x2") + ENCODE_STAGE.format(input="restore"))
        with open(os.path.join(PIPES, "tiny-x2-slow.toml"), "w") as f:
            f.write(PIPELINE_HEAD.format(name="tiny-x2-slow") + SLOW_STAGE + ENCODE_STAGE.format(input="slow"))
        CLIP = os.path.join(TMP, "clip.mp4")
        rc, o, err = run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24", "-f", "lavfi",
                          "-i", "sine=frequency=440:sample_rate=48000", "-t", "4", "-c:v", "libx264", "-g", "12",
                          "-c:a", "aac", "-shortest", CLIP])
        if not check(rc == 0, f"ffmpeg cannot make the clip: {short(err)}"):
            return
        ref = os.path.join(TMP, "ref.mkv")
        rc, o, err = run([LOOMD, "run", os.path.join(PIPES, "tiny-x2.toml"), "-i", CLIP, "-o", ref, "--set", FFV1,
                          "--summary", os.path.join(TMP, "ref.json")], timeout=120,
                         env=dict(os.environ, XDG_STATE_HOME=os.path.join(TMP, "xdg")))
        frames = framemd5(ref) if rc == 0 else None
        if not check(frames and len(frames) == 96, f"loomd run (the reference): exit {rc}: {short(err)}"):
            return
        REF["ffv1"] = (frames, audio_md5(ref))

        only = sys.argv[3:]  # section names (e.g. section_state_folder) to run alone, for debugging

        def section(fn, *args):
            if only and fn.__name__ not in only:
                return
            try:
                fn(*args)
            except Exception:
                check(False, f"{fn.__name__}: the test raised: {traceback.format_exc()}")

        main_daemon = Daemon("main")
        main_daemon.log_level = "info"  # section 1 reads how each segment was opened
        if (not only or "section_basic" in only) and main_daemon.start_ready():
            section(section_basic, main_daemon)
            section(section_metrics, main_daemon)
            section(section_gstreamer, main_daemon)
            main_daemon.stop()
        section(section_crashes)
        section(section_two_at_once)
        section(section_cancel)
        section(section_refusals)
        section(section_sighup)
        section(section_notify)
        section(section_full_disk)
        section(section_uncut)
        section(section_state_folder)
        section(section_output_moved)
    finally:
        with procs_lock:
            left = [p for p in procs if p.poll() is None]
        for p in left:
            p.kill()
        for p in left:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(TMP, ignore_errors=True)


main()
say("finished")
if failures:
    print(f"loomd serve: {len(failures)} failures")
    sys.exit(1)
print("loomd serve: ok")
