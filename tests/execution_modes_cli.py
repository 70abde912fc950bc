#!/usr/bin/python3
"""loomc's execution modes end to end on an ONNX model with symbolic H and W.

Usage: execution_modes_cli.py LOOMC WORKDIR

Builds a small conv net over a 1x3xHxW input (dim_params H, W), then checks:
`loomc compile` without --shape writes a host-mode .loom that `loomc inspect` shows with its
symbols; `loomc run model.loom` takes 8x8 and 13x21 inputs and matches scripts/reference.py
(float64) within 1e-4 relative; `loomc run model.onnx` specialises to the input's shape (sink
mode, one submission) with the same result; `--mode sink` without --shape is refused naming the
input; a static model forced to host mode refuses another size naming the axis. The compile
cache: a run with --cache-dir compiles and stores (miss), the next one loads (hit, same output),
LOOM_CACHE_DIR does the same, and after the model's weights change the entry is rebuilt with a
warning (stale) and the output follows the new weights. `loomc bench` reports in both modes.
"""

import json
import os
import subprocess
import sys

import numpy as np

for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if _alias not in np.__dict__:
        setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import helper, numpy_helper, TensorProto  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "scripts", "reference.py")


def build_model(path, seed=5):
    rng = np.random.default_rng(seed)
    w0 = rng.uniform(-0.5, 0.5, (6, 3, 3, 3)).astype(np.float32)
    b0 = rng.uniform(0.0, 0.1, (6,)).astype(np.float32)
    w1 = rng.uniform(-0.3, 0.3, (3, 6, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], name="c0"),
        helper.make_node("Relu", ["c0"], ["r0"], name="r0"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], name="c1"),
        helper.make_node("Add", ["c1", "x"], ["y"], name="y"),
    ]
    graph = helper.make_graph(
        nodes, "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, "H", "W"])],
        [numpy_helper.from_array(w0, "w0"), numpy_helper.from_array(b0, "b0"), numpy_helper.from_array(w1, "w1")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def loomc(loomc_path, *args, fail=False):
    r = subprocess.run([loomc_path, *args], capture_output=True, text=True)
    out = r.stdout + r.stderr
    if (r.returncode != 0) != fail:
        sys.exit(f"loomc {' '.join(args)}: exit {r.returncode}, expected {'failure' if fail else 'success'}:\n{out}")
    return out


def expect(text, needle, what):
    if needle not in text:
        sys.exit(f"{what}: '{needle}' not in:\n{text}")


def write_input(folder, x):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())


def read_output(folder):
    t = onnx.TensorProto()
    with open(os.path.join(folder, "output_0.pb"), "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def reference(model, x, work):
    src, dst = os.path.join(work, "ref_in.f32"), os.path.join(work, "ref_out.f64")
    x.astype("<f4").tofile(src)
    shape = "x".join(str(d) for d in x.shape)
    subprocess.run([sys.executable, REFERENCE, model, "--input", src, "--shape", shape, "--output", dst], check=True,
                   capture_output=True)
    return np.fromfile(dst, dtype="<f8").reshape(x.shape)


def check_close(got, want, what):
    if got.shape != want.shape:
        sys.exit(f"{what}: shape {got.shape}, want {want.shape}")
    err = np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want))
    if not err <= 1e-4:
        sys.exit(f"{what}: max relative error {err}")


def main():
    loomc_path, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "dyn.onnx")
    build_model(model)
    host = os.path.join(work, "dyn.loom")
    expect(loomc(loomc_path, "compile", model, "-o", host), "host mode", "compile without --shape")
    expect(loomc(loomc_path, "inspect", host), "x=1x3xHxW", "inspect")
    rng = np.random.default_rng(9)
    for h, w in ((8, 8), (13, 21)):
        x = rng.uniform(0.0, 1.0, (1, 3, h, w)).astype(np.float32)
        ins, outs = os.path.join(work, f"in_{h}x{w}"), os.path.join(work, f"out_{h}x{w}")
        write_input(ins, x)
        want = reference(model, x, work)
        report = json.loads(loomc(loomc_path, "run", host, "--inputs", ins, "--outputs", outs, "--json"))
        if report["mode"] != "host" or report["submissions"] != report["launches"]:
            sys.exit(f"run {host} at {h}x{w}: {report}")
        check_close(read_output(outs), want, f"host mode at {h}x{w}")
        report = json.loads(loomc(loomc_path, "run", model, "--inputs", ins, "--outputs", outs, "--json"))
        if report["mode"] != "sink" or report["submissions"] != 1:
            sys.exit(f"run {model} at {h}x{w}: {report}")
        check_close(read_output(outs), want, f"sink mode at {h}x{w}")
    expect(loomc(loomc_path, "compile", model, "--mode", "sink", "-o", os.path.join(work, "x.loom"), fail=True),
           "input 'x' has the symbolic shape 1x3xHxW; sink mode needs static shapes", "--mode sink")
    fixed = os.path.join(work, "fixed.loom")
    loomc(loomc_path, "compile", model, "--shape", "x=1x3x8x8", "--mode", "host", "-o", fixed)
    out = loomc(loomc_path, "run", fixed, "--inputs", os.path.join(work, "in_13x21"), "--outputs",
                os.path.join(work, "o"), fail=True)
    expect(out, "axis 2 is fixed at 8", "a forced host-mode model at another size")
    check_cache(loomc_path, model, work)
    check_bench(loomc_path, model, host)
    print("execution modes: ok")


def check_bench(loomc_path, model, host_model):
    """loomc bench in both modes: every figure of the report present and sane."""
    for path, mode in ((model, "sink"), (host_model, "host")):
        r = json.loads(loomc(loomc_path, "bench", path, "--shape", "x=1x3x8x8", "--frames", "6", "--in-flight", "2",
                             "--json"))
        if r["mode"] != mode or r["frames"] != 6 or r["in_flight"] != 2 or r["inferences"] != 6:
            sys.exit(f"bench {path}: {r}")
        for key in ("wall_ms_per_frame", "sim_ms_per_frame", "sim_fps", "memory_peak_bytes", "overlap"):
            if not r[key] > 0:
                sys.exit(f"bench {path}: {key} = {r[key]}")
        if r["in_flight_max"] > 2 or r["memory_peak_bytes"] > r["memory_capacity_bytes"]:
            sys.exit(f"bench {path}: {r}")


def check_cache(loomc_path, model, work):
    cache, ins, outs = os.path.join(work, "cache"), os.path.join(work, "in_8x8"), os.path.join(work, "out_cache")
    if os.path.isdir(cache):
        for f in os.listdir(cache):
            os.remove(os.path.join(cache, f))
    run = ["run", model, "--inputs", ins, "--outputs", outs, "--json"]
    first = json.loads(loomc(loomc_path, *run, "--cache-dir", cache))["compile_cache"]
    if first["outcome"] != "miss" or not os.path.isfile(first["path"]):
        sys.exit(f"first cached run: {first}")
    y0 = read_output(outs)
    second = json.loads(loomc(loomc_path, *run, "--cache-dir", cache))["compile_cache"]
    if second["outcome"] != "hit" or second["path"] != first["path"]:
        sys.exit(f"second cached run: {second}")
    if not np.array_equal(read_output(outs), y0):
        sys.exit("a cache hit changed the output")
    env = dict(os.environ, LOOM_CACHE_DIR=cache)
    r = subprocess.run([loomc_path, *run], capture_output=True, text=True, env=env)
    if r.returncode != 0 or json.loads(r.stdout)["compile_cache"]["outcome"] != "hit":
        sys.exit(f"run with LOOM_CACHE_DIR: {r.stdout}{r.stderr}")
    home = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "xdg"))
    home.pop("LOOM_CACHE_DIR", None)
    r = subprocess.run([loomc_path, *run, "--cache"], capture_output=True, text=True, env=home)
    if r.returncode != 0 or not json.loads(r.stdout)["compile_cache"]["path"].startswith(
            os.path.join(work, "xdg", "loom", "compiled") + "/"):
        sys.exit(f"run with --cache: {r.stdout}{r.stderr}")
    r = subprocess.run([loomc_path, *run, "--no-cache"], capture_output=True, text=True, env=env)
    if r.returncode != 0 or json.loads(r.stdout)["compile_cache"] is not None:
        sys.exit(f"run with --no-cache: {r.stdout}{r.stderr}")
    build_model(model, seed=6)
    r = subprocess.run([loomc_path, *run, "--cache-dir", cache], capture_output=True, text=True)
    if r.returncode != 0 or json.loads(r.stdout)["compile_cache"]["outcome"] != "stale":
        sys.exit(f"run after the model changed: {r.stdout}{r.stderr}")
    expect(r.stderr, "the model changed since", "the stale entry's warning")
    if np.array_equal(read_output(outs), y0):
        sys.exit("the rebuilt entry still gives the old model's output")
    build_model(model)


if __name__ == "__main__":
    main()
