#!/usr/bin/python3
"""Every model of a family, run as its own program runs it, against an independent reference.

Usage: accuracy_restore.py LOOMC FAMILY [--size HxW]
  FAMILY: realesr-animevideov3 | realcugan-se | waifu2x-cunet | waifu2x-upconv7 (folders that
  scripts/fetch-models fills).

For every model in the family's folder, on a small natural-looking generated frame (smooth
shading, hard edges, fine texture; fixed seed; 24x32 by default):
  - Loom: `loomc run MODEL --restore` (the descriptor Loom recognised on import: pad, network,
    crop, residual), fp32 and fp16;
  - reference: this script's own copy of what the reference program does (the figures below,
    read from waifu2x-ncnn-vulkan, realcugan-ncnn-vulkan and realesrgan-ncnn-vulkan; see
    docs/compiler.md), numpy's np.pad, the network converted by scripts/ncnn2onnx.py and run in
    float64 by scripts/reference.py (both imported here), the crop and the residual in numpy.
Checks: output exactly scale x the frame; PSNR over the whole frame and over its border (the
outer 4 x scale output pixels, where padding decides the result) >= 60 dB at fp32 and >= 45 dB
at fp16; and, for the family's first model, the border is far from what the other padding mode
gives (PSNR below 60 dB there), so the check tells border handling apart. Prints one line per model and precision; the last
line reads "N passed, M failed". Exits 77 (skipped) when the models cannot be fetched.
"""

import argparse
import os
import re
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
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ncnn2onnx  # noqa: E402
import reference as float64_reference  # noqa: E402
BOUNDS = {"fp32": 60.0, "fp16": 45.0}


def program_figures(family, stem):
    """(scale, prepad, border, align, crop, residual) as the family's program computes them."""
    if family == "realcugan-se":
        # realcugan-ncnn-vulkan main.cpp: prepadding 18 / 14 / 19 for x2 / x3 / x4; realcugan.cpp
        # process_cpu: tiles rounded up to 2 (x2, x4) or 4 (x3), copy_make_border type 2
        # (reflect), the output's top-left, x4 adds the input upscaled by nearest.
        scale = int(re.match(r"up(\d)x", stem).group(1))
        return scale, {2: 18, 3: 14, 4: 19}[scale], "reflect", 4 if scale == 3 else 2, 0, scale == 4
    if family == "waifu2x-cunet":
        # waifu2x-ncnn-vulkan main.cpp: CUnet 18 for noise -1 and x2, 28 for x1; waifu2x.cpp:
        # tiles rounded up to 4 (x1) or 2 (x2), BORDER_REPLICATE, the output's top-left.
        scale = 2 if "scale2.0x" in stem else 1
        return scale, 18 if scale == 2 else 28, "edge", 2 if scale == 2 else 4, 0, False
    if family == "waifu2x-upconv7":
        scale = 2 if "scale2.0x" in stem else 1
        return scale, 7, "edge", 2 if scale == 2 else 4, 0, False
    if family == "realesr-animevideov3":
        # realesrgan-ncnn-vulkan main.cpp: prepadding 10; realesrgan_preproc.comp reflects;
        # realesrgan.cpp: the output from prepadding * scale.
        scale = int(re.search(r"x(\d)", stem).group(1))
        return scale, 10, "reflect", 1, 10 * scale, False
    raise SystemExit(f"unknown family {family}")


def natural_frame(h, w, seed=20261125):
    """Smooth shading, a disc and a bar with hard edges, fine texture: in [0, 1], 1x3xHxW."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([0.55 + 0.30 * np.sin(x / 7.0 + 0.5) * np.cos(y / 9.0),
                     0.45 + 0.25 * np.cos(x / 11.0 - y / 8.0),
                     0.50 + 0.20 * np.sin((x + y) / 6.0)])
    disc = ((x - 0.6 * w) ** 2 + (y - 0.45 * h) ** 2) < (0.28 * min(h, w)) ** 2
    base[:, disc] = np.array([0.92, 0.35, 0.20])[:, None]
    bar = (np.abs(x - 0.25 * w) < 1.5)
    base[:, bar] = 0.08
    base += rng.normal(0, 0.025, base.shape)
    return np.clip(base, 0, 1)[None].astype(np.float32)


def psnr(a, b):
    mse = float(np.mean((np.clip(a, 0, 1) - np.clip(b, 0, 1)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def border_mask(h, w, width):
    m = np.zeros((h, w), bool)
    m[:width], m[-width:], m[:, :width], m[:, -width:] = True, True, True, True
    return m


def reference(param, x, figures, border, nets):
    """The program's run of the model on x in float64: pad, network, crop, residual."""
    scale, prepad, _, align, crop, residual = figures
    _, c, h, w = x.shape
    eh, ew = (-h) % align, (-w) % align
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (prepad, prepad + eh), (prepad, prepad + ew)), mode=border)
    if padded.shape not in nets:  # the same for both padding modes: converted once
        nets[padded.shape] = ncnn2onnx.Converter(param, param[: -len(".param")] + ".bin",
                                                 list(padded.shape)).convert()
    y = float64_reference.run(nets[padded.shape], padded)
    y = y[:, :, crop:crop + scale * h, crop:crop + scale * w]
    if residual:
        y = y + np.repeat(np.repeat(x.astype(np.float64), scale, axis=2), scale, axis=3)
    return y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loomc")
    ap.add_argument("family")
    ap.add_argument("--size", default="24x32")
    args = ap.parse_args()
    fetch = subprocess.run([os.path.join(ROOT, "scripts", "fetch-models")], capture_output=True, text=True)
    if fetch.returncode != 0:
        print(f"models unavailable: skipped ({fetch.stderr.strip()[-300:]})")
        return 77
    folder = os.path.join(os.path.dirname(fetch.stdout.strip().splitlines()[-1]), args.family)
    params = sorted(f for f in os.listdir(folder) if f.endswith(".param"))
    h, w = (int(v) for v in args.size.split("x"))
    x = natural_frame(h, w)
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAIL: {what}")

    for name in params:
        param = os.path.join(folder, name)
        stem = name[: -len(".param")]
        figures = program_figures(args.family, stem)
        scale = figures[0]
        other = {"edge": "reflect", "reflect": "edge"}[figures[2]]
        with tempfile.TemporaryDirectory() as tmp:
            nets = {}
            ref = reference(param, x, figures, figures[2], nets)
            # That the border check can fail: once per family (the figures are the family's).
            alt = reference(param, x, figures, other, nets) if name == params[0] else None
            in_name = "in0" if args.family == "realcugan-se" else "data" if args.family.startswith("realesr") else "Input1"
            os.makedirs(os.path.join(tmp, "in"))
            with open(os.path.join(tmp, "in", "input_0.pb"), "wb") as f:
                f.write(numpy_helper.from_array(x, in_name).SerializeToString())
            mask = border_mask(scale * h, scale * w, 4 * scale)
            for precision in ("fp32", "fp16"):
                out_dir = os.path.join(tmp, "out_" + precision)
                run = subprocess.run([args.loomc, "run", param, "--restore", "--precision", precision, "--inputs",
                                      os.path.join(tmp, "in"), "--outputs", out_dir], capture_output=True, text=True)
                if run.returncode != 0:
                    check(False, f"{stem} {precision}: loomc run: {run.stderr.strip()}")
                    continue
                t = onnx.TensorProto()
                with open(os.path.join(out_dir, "output_0.pb"), "rb") as f:
                    t.ParseFromString(f.read())
                y = numpy_helper.to_array(t).astype(np.float64)
                if y.shape != (1, 3, scale * h, scale * w):
                    check(False, f"{stem} {precision}: output {y.shape}, expected 1x3x{scale * h}x{scale * w}")
                    continue
                whole = psnr(y, ref)
                edge = psnr(y[:, :, mask], ref[:, :, mask])
                bound = BOUNDS[precision]
                versus = ""
                if alt is not None:
                    edge_alt = psnr(y[:, :, mask], alt[:, :, mask])
                    versus = f" (vs {other} padding {edge_alt:.1f} dB)"
                    check(edge_alt < 60.0, f"{stem} {precision}: the border does not tell {figures[2]} from {other} "
                                           f"padding ({edge_alt:.1f} dB)")
                print(f"{args.family}/{stem} {h}x{w} -> {scale * h}x{scale * w} {precision}: PSNR {whole:.1f} dB, "
                      f"border {edge:.1f} dB{versus}, max |err| {np.abs(y - ref).max():.2e}")
                check(whole >= bound, f"{stem} {precision}: PSNR {whole:.1f} < {bound} dB")
                check(edge >= bound, f"{stem} {precision}: border PSNR {edge:.1f} < {bound} dB")
    check(len(params) > 0, f"no models in {folder}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
