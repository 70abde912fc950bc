#!/usr/bin/python3
"""Run ONNX's backend node tests through `loomc run` and compare the outputs.

Usage: conformance.py LOOMC DATA_DIR [--expected-failures FILE] [--report FILE.json] [--filter SUBSTR]

DATA_DIR is made by `python3 -m onnx.backend.test.cmd_tools generate-data -o DATA_DIR` (Debian's
python3-onnx); when DATA_DIR/node is missing it is generated first. A node test is "supported"
when every op in its model is in `loomc ops`. Each supported test runs
`loomc run model.onnx --inputs test_data_set_0 --outputs TMP` and every output must match the
reference with rtol 1e-3 and atol 1e-4 (exact for integer outputs), shapes and dtypes included.

The expected-failures file lists test names (one per line, '#' comments) that are known to fail
with the reason beside them. The run fails when a test outside that list fails, and also when a
listed test passes (so the list only shrinks). The last line reads "N passed, M failed".
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

# numpy >= 1.24 dropped these aliases; onnx 1.12 still touches them on import.
for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if _alias not in np.__dict__:
        setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

RTOL = 1e-3
ATOL = 1e-4


def generate(data_dir):
    from onnx.backend.test import cmd_tools  # noqa: E402

    saved = sys.argv
    sys.argv = ["cmd_tools", "generate-data", "-o", data_dir]
    try:
        cmd_tools.main()
    finally:
        sys.argv = saved


def load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def compare(got, want):
    """Returns None when equal within tolerance, else a reason."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype == np.bool_:
        want = want.astype(np.uint8)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if np.issubdtype(want.dtype, np.floating):
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        same_nan = np.isnan(g) == np.isnan(w)
        ok = np.isclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)
        if not (same_nan.all() and ok.all()):
            bad = np.argwhere(~ok)
            i = tuple(bad[0]) if len(bad) else ()
            return f"{len(bad)} of {g.size} values differ, first at {i}: {g[i] if i else ''} vs {w[i] if i else ''}"
        return None
    if not np.array_equal(got, want):
        return "integer values differ"
    return None


def run_test(loomc, test_dir, tmp):
    data = os.path.join(test_dir, "test_data_set_0")
    out = os.path.join(tmp, os.path.basename(test_dir))
    proc = subprocess.run(
        [loomc, "run", os.path.join(test_dir, "model.onnx"), "--inputs", data, "--outputs", out],
        capture_output=True, text=True, timeout=120,
    )
    if proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return "loomc failed: " + (msg[-1] if msg else f"exit {proc.returncode}")
    i = 0
    while os.path.exists(os.path.join(data, f"output_{i}.pb")):
        want = load_tensor(os.path.join(data, f"output_{i}.pb"))
        got_path = os.path.join(out, f"output_{i}.pb")
        if not os.path.exists(got_path):
            return f"output_{i}.pb missing"
        reason = compare(load_tensor(got_path), want)
        if reason:
            return f"output {i}: {reason}"
        i += 1
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loomc")
    ap.add_argument("data_dir")
    ap.add_argument("--expected-failures")
    ap.add_argument("--report")
    ap.add_argument("--filter", default="")
    args = ap.parse_args()

    if not os.path.isdir(os.path.join(args.data_dir, "node")):
        generate(args.data_dir)
    supported = set(subprocess.run([args.loomc, "ops"], capture_output=True, text=True, check=True).stdout.split())

    expected = {}
    if args.expected_failures:
        with open(args.expected_failures) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    name, _, why = line.partition(" ")
                    expected[name] = why.strip()

    node_dir = os.path.join(args.data_dir, "node")
    results = {}
    skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(node_dir)):
            if args.filter not in name:
                continue
            test_dir = os.path.join(node_dir, name)
            model = onnx.load(os.path.join(test_dir, "model.onnx"))
            ops = {n.op_type for n in model.graph.node if n.op_type != "Constant"}
            if not ops <= supported or any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
                skipped += 1
                continue
            results[name] = run_test(args.loomc, test_dir, tmp)

    passed = [n for n, r in results.items() if r is None]
    failed = {n: r for n, r in results.items() if r is not None}
    unexpected = {n: r for n, r in failed.items() if n not in expected}
    fixed = [n for n in passed if n in expected]
    for n, r in sorted(failed.items()):
        tag = "expected" if n in expected else "FAIL"
        print(f"{tag}: {n}: {r}")
    for n in fixed:
        print(f"FIXED (remove from the expected failures): {n}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"supported_ops": sorted(supported), "passed": sorted(passed), "failed": failed,
                       "skipped_unsupported": skipped}, f, indent=1)
    print(f"conformance: {len(results)} tests of supported ops ({skipped} others skipped), "
          f"{len(failed)} failing ({len(failed) - len(unexpected)} expected)")
    bad = len(unexpected) + len(fixed)
    print(f"{len(passed)} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
