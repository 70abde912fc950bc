#!/usr/bin/python3
"""Write a ResNet-50 (v1.5: the stride on the 3x3 conv of each bottleneck) as an ONNX model with
random weights, for the tuner's benchmark: the shapes of the classic inference network without
downloading one.

Usage: gen_resnet50.py OUT.onnx [--size 224] [--batch 1] [--seed 1]

Weights are He-initialised from a fixed seed; BatchNormalization nodes carry random but sane
statistics (the compiler folds them into the convolutions, as it would a trained model's).
Opset 17, input 'data' [batch, 3, size, size], output 'logits' [batch, 1000].
"""

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, prefix, array):
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), n))
        return n

    def conv(self, x, cin, cout, k, stride=1):
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        y = self.name("conv")
        pad = k // 2
        self.nodes.append(
            helper.make_node("Conv", [x, self.const("w", w)], [y], kernel_shape=[k, k], strides=[stride, stride],
                             pads=[pad, pad, pad, pad]))
        return self.bn(y, cout)

    def bn(self, x, c):
        y = self.name("bn")
        scale = self.const("gamma", 1.0 + 0.1 * self.rng.standard_normal(c))
        bias = self.const("beta", 0.1 * self.rng.standard_normal(c))
        mean = self.const("mean", 0.1 * self.rng.standard_normal(c))
        var = self.const("var", 1.0 + 0.1 * np.abs(self.rng.standard_normal(c)))
        self.nodes.append(helper.make_node("BatchNormalization", [x, scale, bias, mean, var], [y], epsilon=1e-5))
        return y

    def relu(self, x):
        y = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [x], [y]))
        return y

    def bottleneck(self, x, cin, width, stride):
        cout = width * 4
        y = self.relu(self.conv(x, cin, width, 1))
        y = self.relu(self.conv(y, width, width, 3, stride))
        y = self.conv(y, width, cout, 1)
        skip = x if (stride == 1 and cin == cout) else self.conv(x, cin, cout, 1, stride)
        s = self.name("add")
        self.nodes.append(helper.make_node("Add", [y, skip], [s]))
        return self.relu(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    b = Builder(a.seed)
    x = b.relu(b.conv("data", 3, 64, 7, 2))
    pooled = b.name("pool")
    b.nodes.append(helper.make_node("MaxPool", [x], [pooled], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = pooled, 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            x = b.bottleneck(x, cin, width, stride if i == 0 else 1)
            cin = width * 4
    gap = b.name("gap")
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], [gap]))
    flat = b.name("flat")
    b.nodes.append(helper.make_node("Flatten", [gap], [flat], axis=1))
    fc_w = b.rng.standard_normal((1000, 2048)) * np.sqrt(1.0 / 2048)
    b.nodes.append(helper.make_node("Gemm", [flat, b.const("fc_w", fc_w), b.const("fc_b", np.zeros(1000))], ["logits"],
                                    transB=1))

    graph = helper.make_graph(
        b.nodes, "resnet50_random",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [a.batch, 3, a.size, a.size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [a.batch, 1000])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="loom gen_resnet50")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, a.out)


if __name__ == "__main__":
    main()
