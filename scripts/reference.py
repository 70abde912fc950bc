#!/usr/bin/python3
"""Run an ONNX model in float64 with numpy: the accuracy reference for the benchmarks.

Usage: reference.py MODEL.onnx --input IN.f32 --shape 1x3xHxW --output OUT.f64
                    [--input-dtype f32|f64]

IN is raw little-endian float32 (or float64) in NCHW order; OUT is the model's single output
as raw little-endian float64. Weights are widened to float64 and every op computes in float64,
so the result differs from an exact evaluation by about 1e-15 relative.

Ops: Conv (pads, auto_pad, strides, dilations, groups), ConvTranspose (pads, strides,
dilations, groups, output_padding), Relu, LeakyRelu, PRelu, Sigmoid, Clip, DepthToSpace (DCR,
CRD), Resize (nearest, linear, cubic; the opset-13 coordinate modes), GlobalAveragePool, Slice
(constant, step 1), Pad (constant, reflect, edge), Add, Sub, Mul, Div, Max, Min, Sum, Concat,
Identity. Any other op is refused by name.

Conv is im2col + one (C_out x C_in*kh*kw) @ (C_in*kh*kw x rows*W) matrix product per block of
output rows (numpy hands it to BLAS), so memory stays bounded on large frames.
"""

import argparse
import functools
import math
import sys
import time

import numpy as np

for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if _alias not in np.__dict__:
        setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402


class ReferenceFailure(Exception):
    pass


def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def conv(x, w, b, a):
    n, c, h, wd = x.shape
    c_out, c_per_group, kh, kw = w.shape
    group = a.get("group", 1)
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    ext_h, ext_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    auto_pad = text(a.get("auto_pad", "NOTSET"))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        oh, ow = -(-h // sh), -(-wd // sw)
        ph = max((oh - 1) * sh + ext_h - h, 0)
        pw = max((ow - 1) * sw + ext_w - wd, 0)
        if auto_pad == "SAME_UPPER":
            top, left = ph // 2, pw // 2
        else:
            top, left = ph - ph // 2, pw - pw // 2
        pads = [top, left, ph - top, pw - left]
    elif auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    else:
        pads = a.get("pads", [0, 0, 0, 0])
    top, left, bottom, right = pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh = (h + top + bottom - ext_h) // sh + 1
    ow = (wd + left + right - ext_w) // sw + 1
    if c != c_per_group * group:
        raise ReferenceFailure(f"Conv: input has {c} channels, "
                               f"weights expect {c_per_group * group}")
    co_per_group = c_out // group
    k = c_per_group * kh * kw
    # Output rows per im2col block: keeps the (k x rows*ow) column matrix near 32 MiB.
    block = max(1, min(oh, (32 << 20) // (8 * k * ow)))
    y = np.empty((n, c_out, oh, ow), np.float64)
    cols = np.empty((c_per_group, kh, kw, block, ow), np.float64)
    for i in range(n):
        for g in range(group):
            xs = xp[i, g * c_per_group:(g + 1) * c_per_group]
            wg = w[g * co_per_group:(g + 1) * co_per_group].reshape(co_per_group, k)
            for r0 in range(0, oh, block):
                rows = min(block, oh - r0)
                col = cols[:, :, :, :rows]
                for ky in range(kh):
                    for kx in range(kw):
                        y0, x0 = r0 * sh + ky * dh, kx * dw
                        col[:, ky, kx] = xs[:, y0:y0 + sh * (rows - 1) + 1:sh,
                                            x0:x0 + sw * (ow - 1) + 1:sw]
                out = wg @ col.reshape(k, rows * ow)
                y[i, g * co_per_group:(g + 1) * co_per_group, r0:r0 + rows] = \
                    out.reshape(co_per_group, rows, ow)
    if b is not None:
        y += b.reshape(1, c_out, 1, 1)
    return y


def depth_to_space(x, a):
    r = a["blocksize"]
    mode = text(a.get("mode", "DCR"))
    n, c, h, w = x.shape
    oc = c // (r * r)
    if mode == "DCR":
        t = x.reshape(n, r, r, oc, h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        t = x.reshape(n, oc, r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ReferenceFailure(f"DepthToSpace: mode {mode} not supported")
    return t.reshape(n, oc, h * r, w * r)


def source_coords(out_len, in_len, scale, mode):
    """Source coordinate of each output position along one axis (ONNX Resize, opset 13)."""
    i = np.arange(out_len, dtype=np.float64)
    if mode == "asymmetric":
        return i / scale
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        return i * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    raise ReferenceFailure(f"Resize: coordinate_transformation_mode {mode} not supported")


def resize_matrix(out_len, in_len, scale, a):
    """(out_len x in_len) matrix that resizes one axis; the 2-D resize is separable."""
    mode = text(a.get("mode", "nearest"))
    ctm = text(a.get("coordinate_transformation_mode", "half_pixel"))
    xs = source_coords(out_len, in_len, scale, ctm)
    m = np.zeros((out_len, in_len), np.float64)
    rows = np.arange(out_len)
    if mode == "nearest":
        nearest = text(a.get("nearest_mode", "round_prefer_floor"))
        if nearest == "floor":
            idx = np.floor(xs)
        elif nearest == "ceil":
            idx = np.ceil(xs)
        elif nearest == "round_prefer_floor":
            idx = np.where(xs - np.floor(xs) == 0.5, np.floor(xs), np.round(xs))
        elif nearest == "round_prefer_ceil":
            idx = np.where(xs - np.floor(xs) == 0.5, np.ceil(xs), np.round(xs))
        else:
            raise ReferenceFailure(f"Resize: nearest_mode {nearest} not supported")
        m[rows, np.clip(idx.astype(np.int64), 0, in_len - 1)] = 1.0
        return m
    if mode == "linear":
        xs = np.clip(xs, 0, in_len - 1)
        x0 = np.floor(xs).astype(np.int64)
        x1 = np.minimum(x0 + 1, in_len - 1)
        f = xs - x0
        np.add.at(m, (rows, x0), 1 - f)
        np.add.at(m, (rows, x1), f)
        return m
    if mode == "cubic":
        if a.get("exclude_outside", 0):
            raise ReferenceFailure("Resize: cubic with exclude_outside=1 not supported")
        ca = a.get("cubic_coeff_a", -0.75)
        x0 = np.floor(xs).astype(np.int64)
        t = xs - x0
        for k, d in enumerate((-1, 0, 1, 2)):
            s = np.abs(t - d)  # distance from the tap at x0 + d
            wk = np.where(s <= 1, ((ca + 2) * s - (ca + 3)) * s * s + 1,
                          np.where(s < 2, ((ca * s - 5 * ca) * s + 8 * ca) * s - 4 * ca, 0.0))
            np.add.at(m, (rows, np.clip(x0 + d, 0, in_len - 1)), wk)
        return m
    raise ReferenceFailure(f"Resize: mode {mode} not supported")


def resize(node, x, roi, scales, sizes, a):
    n, c, h, w = x.shape
    if sizes is not None and sizes.size:
        sizes = [int(s) for s in sizes]
        scale_h, scale_w = sizes[2] / h, sizes[3] / w
        out_h, out_w = sizes[2], sizes[3]
        if sizes[0] != n or sizes[1] != c:
            raise ReferenceFailure(f"{node.name}: Resize of N or C not supported")
    else:
        if scales[0] != 1 or scales[1] != 1:
            raise ReferenceFailure(f"{node.name}: Resize of N or C not supported")
        scale_h, scale_w = float(scales[2]), float(scales[3])
        out_h, out_w = int(math.floor(h * scale_h)), int(math.floor(w * scale_w))
    if text(a.get("coordinate_transformation_mode", "")) == "tf_crop_and_resize":
        raise ReferenceFailure(f"{node.name}: tf_crop_and_resize not supported")
    mh = resize_matrix(out_h, h, scale_h, a)
    mw = resize_matrix(out_w, w, scale_w, a)
    return np.einsum("oh,nchw,pw->ncop", mh, x, mw, optimize=True)


def conv_transpose(x, w, b, a):
    """ONNX ConvTranspose as a scatter: input pixel (i, j) adds w * x at (i*s + ki*d, j*s + kj*d)
    of the full output, which pads then cuts at the top/left and bottom/right."""
    n, c_in, h, wd = x.shape
    _, c_out_g, kh, kw = w.shape
    group = a.get("group", 1)
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    if text(a.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        raise ReferenceFailure("ConvTranspose: auto_pad SAME is not supported")
    top, left, bottom, right = a.get("pads", [0, 0, 0, 0])
    oph, opw = a.get("output_padding", [0, 0])
    if "output_shape" in a:
        raise ReferenceFailure("ConvTranspose: output_shape is not supported")
    full_h = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    full_w = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    c_in_g = c_in // group
    full = np.zeros((n, c_out_g * group, full_h, full_w))
    for g in range(group):
        xg = x[:, g * c_in_g:(g + 1) * c_in_g]
        wg = w[g * c_in_g:(g + 1) * c_in_g]
        for ki in range(kh):
            for kj in range(kw):
                # (n, c_in_g, h, w) x (c_in_g, c_out_g) -> (n, c_out_g, h, w)
                contrib = np.einsum("nchw,co->nohw", xg, wg[:, :, ki, kj], optimize=True)
                full[:, g * c_out_g:(g + 1) * c_out_g,
                     ki * dh:ki * dh + (h - 1) * sh + 1:sh,
                     kj * dw:kj * dw + (wd - 1) * sw + 1:sw] += contrib
    if b is not None:
        full += b.reshape(1, -1, 1, 1)
    return full[:, :, top:full_h - bottom, left:full_w - right]


def slice_(x, starts, ends, axes, steps):
    """ONNX Slice with constant starts, ends, axes (steps must be 1): ends clamp as ONNX says."""
    axes = list(axes) if axes is not None else list(range(len(starts)))
    if steps is not None and any(int(v) != 1 for v in steps):
        raise ReferenceFailure("Slice: steps other than 1 are not supported")
    index = [slice(None)] * x.ndim
    for start, end, axis in zip(starts, ends, axes):
        axis = int(axis) % x.ndim
        index[axis] = slice(int(start), int(min(end, x.shape[axis])) if end >= 0 else int(end))
    return x[tuple(index)]


def binary(fn):
    return lambda node, ins, a: fn(ins[0], ins[1])


OPS = {
    "Conv": lambda node, ins, a: conv(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a),
    "Relu": lambda node, ins, a: np.maximum(ins[0], 0.0),
    "LeakyRelu": lambda node, ins, a: np.where(ins[0] >= 0, ins[0], ins[0] * a.get("alpha", 0.01)),
    "PRelu": lambda node, ins, a: np.where(ins[0] >= 0, ins[0], ins[0] * ins[1]),
    "Sigmoid": lambda node, ins, a: 1.0 / (1.0 + np.exp(-ins[0])),
    "Clip": lambda node, ins, a: np.clip(
        ins[0],
        ins[1] if len(ins) > 1 and ins[1] is not None else -np.inf,
        ins[2] if len(ins) > 2 and ins[2] is not None else np.inf),
    "DepthToSpace": lambda node, ins, a: depth_to_space(ins[0], a),
    "Resize": lambda node, ins, a: resize(node, *(list(ins) + [None] * (4 - len(ins))), a),
    "Add": binary(np.add),
    "Sub": binary(np.subtract),
    "Mul": binary(np.multiply),
    "Div": binary(np.divide),
    "Max": lambda node, ins, a: functools.reduce(np.maximum, ins),
    "Min": lambda node, ins, a: functools.reduce(np.minimum, ins),
    "Sum": lambda node, ins, a: functools.reduce(np.add, ins),
    "Concat": lambda node, ins, a: np.concatenate(ins, axis=a["axis"]),
    "Identity": lambda node, ins, a: ins[0],
    "ConvTranspose": lambda node, ins, a: conv_transpose(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a),
    "GlobalAveragePool": lambda node, ins, a: ins[0].mean(axis=(2, 3), keepdims=True),
    "Slice": lambda node, ins, a: slice_(ins[0], ins[1], ins[2], *(list(ins[3:]) + [None] * (5 - len(ins)))),
    "Pad": lambda node, ins, a: pad(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a),
}


def pad(x, pads, value, a):
    """ONNX Pad (constant, reflect, edge) with constant pads."""
    mode = text(a.get("mode", "constant"))
    r = x.ndim
    widths = [(int(pads[i]), int(pads[i + r])) for i in range(r)]
    if min(v for w_ in widths for v in w_) < 0:
        raise ReferenceFailure("Pad: negative pads are not supported")
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=0.0 if value is None else float(value))
    if mode in ("reflect", "edge"):
        return np.pad(x, widths, mode=mode)
    raise ReferenceFailure(f"Pad: mode {mode} is not supported")


def run(model, x, verbose=False):
    """Evaluate model's graph on x (float64) and return its first output (float64)."""
    graph = model.graph
    for opset in model.opset_import:
        if opset.domain not in ("", "ai.onnx"):
            raise ReferenceFailure(f"opset domain '{opset.domain}' not supported")
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for name, v in values.items():
        if np.issubdtype(v.dtype, np.floating):
            values[name] = v.astype(np.float64)
    inputs = [i.name for i in graph.input if i.name not in values]
    if len(inputs) != 1:
        raise ReferenceFailure(f"expected 1 graph input, found {inputs}")
    values[inputs[0]] = x
    outputs = {o.name for o in graph.output}
    last_use = {name: i for i, node in enumerate(graph.node) for name in node.input}
    for index, node in enumerate(graph.node):
        fn = OPS.get(node.op_type)
        if fn is None or node.domain not in ("", "ai.onnx"):
            raise ReferenceFailure(f"node '{node.name}': op {node.op_type} not supported "
                                  f"(supported: {', '.join(sorted(OPS))})")
        ins = [values[i] if i else None for i in node.input]
        start = time.perf_counter()
        out = fn(node, ins, attrs_of(node))
        if verbose:
            print(f"reference: {node.name} {node.op_type} {tuple(out.shape)} "
                  f"{(time.perf_counter() - start) * 1e3:.1f} ms", file=sys.stderr)
        values[node.output[0]] = out
        # Free activations after their last reader: a 480x720 frame has 180 MB ones.
        for name in set(node.input):
            if name and last_use[name] == index and name not in outputs:
                del values[name]
    return values[graph.output[0].name]


def parse_shape(text_):
    try:
        dims = [int(d) for d in text_.lower().split("x")]
    except ValueError:
        dims = []
    if not dims or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"'{text_}' is not a shape like 1x3x64x64")
    return dims


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="ONNX model")
    parser.add_argument("--input", required=True, help="raw little-endian input, NCHW")
    parser.add_argument("--shape", required=True, type=parse_shape, help="input shape NxCxHxW")
    parser.add_argument("--input-dtype", choices=("f32", "f64"), default="f32")
    parser.add_argument("--output", required=True, help="raw little-endian float64 output")
    parser.add_argument("--verbose", action="store_true", help="time each node on stderr")
    args = parser.parse_args()

    dtype = "<f4" if args.input_dtype == "f32" else "<f8"
    try:
        x = np.fromfile(args.input, dtype=dtype)
        want = int(np.prod(args.shape))
        if x.size != want:
            raise ReferenceFailure(
                f"{args.input}: {x.size} values, shape {args.shape} needs {want}")
        model = onnx.load(args.model)
        y = run(model, x.reshape(args.shape).astype(np.float64), args.verbose)
    except (ReferenceFailure, OSError) as e:
        print(f"reference: error: {e}", file=sys.stderr)
        return 1
    y.astype("<f8").tofile(args.output)
    print("x".join(str(d) for d in y.shape))
    return 0


if __name__ == "__main__":
    sys.exit(main())
