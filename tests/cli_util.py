"""What the command-line tests share: running a program and failing with a message."""
import subprocess
import sys


def run(args, ok=True, timeout=300):
    """Runs `args`; with `ok`, a non-zero exit fails the test with the program's output."""
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
