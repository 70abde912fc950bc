#!/usr/bin/python3
"""Check a model compiled by loomc against a float64 reference of the same graph.

Usage: accuracy.py LOOMC MODEL --shape 1x3x64x64 [--precision fp32|fp16] [--device edge]
                   [--max-rel-err E] [--min-psnr DB] [--onnx-ref REF.onnx]

MODEL is an ncnn .param (its .bin beside it) or an .onnx file with one input and one output.
The reference is scripts/reference.py (numpy, float64) on the ONNX form of the model: the .onnx
itself, or for ncnn the export of scripts/ncnn2onnx.py at the same shape. The input is a
uniform [0, 1) frame from a fixed seed. Reports max|y - ref| / max|ref| and the PSNR of y
against ref (both clipped to [0, 1], as an image), and fails when a bound is missed. The last
line reads "N passed, M failed" over the checks made.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if _alias not in np.__dict__:
        setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loomc")
    ap.add_argument("model")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--device", default="edge")
    ap.add_argument("--max-rel-err", type=float)
    ap.add_argument("--min-psnr", type=float)
    args = ap.parse_args()
    shape = [int(d) for d in args.shape.split("x")]

    with tempfile.TemporaryDirectory() as tmp:
        if args.model.endswith(".param"):
            ref_model = os.path.join(tmp, "ref.onnx")
            binf = args.model[: -len(".param")] + ".bin"
            subprocess.run([sys.executable, os.path.join(HERE, "ncnn2onnx.py"), args.model, binf, ref_model,
                            "--shape", args.shape], check=True, stdout=subprocess.DEVNULL)
        else:
            ref_model = args.model
        name = onnx.load(ref_model, load_external_data=False).graph.input[0].name
        x = np.random.default_rng(20261122).random(shape, dtype=np.float32)
        in_dir = os.path.join(tmp, "in")
        out_dir = os.path.join(tmp, "out")
        os.makedirs(in_dir)
        with open(os.path.join(in_dir, "input_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, name).SerializeToString())
        x.astype("<f4").tofile(os.path.join(tmp, "in.f32"))
        subprocess.run([sys.executable, os.path.join(HERE, "reference.py"), ref_model, "--input",
                        os.path.join(tmp, "in.f32"), "--shape", args.shape, "--output", os.path.join(tmp, "ref.f64")],
                       check=True, stdout=subprocess.DEVNULL)
        ref = np.fromfile(os.path.join(tmp, "ref.f64"), dtype="<f8")
        run = subprocess.run([args.loomc, "run", args.model, "--inputs", in_dir, "--outputs", out_dir, "--device",
                              args.device, "--precision", args.precision], capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stderr.strip())
            print("0 passed, 1 failed")
            return 1
        print(run.stdout.strip())
        t = onnx.TensorProto()
        with open(os.path.join(out_dir, "output_0.pb"), "rb") as f:
            t.ParseFromString(f.read())
        y = numpy_helper.to_array(t).astype(np.float64).ravel()

    if y.size != ref.size:
        print(f"output has {y.size} values, the reference {ref.size}")
        print("0 passed, 1 failed")
        return 1
    rel = float(np.abs(y - ref).max() / np.abs(ref).max())
    mse = float(np.mean((np.clip(y, 0, 1) - np.clip(ref, 0, 1)) ** 2))
    psnr = float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)
    print(f"{os.path.basename(args.model)} {args.shape} {args.precision}: max rel err {rel:.3g}, PSNR {psnr:.1f} dB")
    passed = failed = 0
    for ok, what in ((args.max_rel_err is None or rel <= args.max_rel_err, f"max rel err <= {args.max_rel_err}"),
                     (args.min_psnr is None or psnr >= args.min_psnr, f"PSNR >= {args.min_psnr} dB")):
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAIL: {what}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
