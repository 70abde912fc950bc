// The one list of ONNX op types the compiler accepts. Adding an op: define it with
// LOOM_DEFINE_OP in a family file under compiler/ops/ (its traits, token and parameters there
// tell the passes what they may do with it), and add it here. tests/test_ops_registry.cpp checks
// every entry against itself and the device's kernels.
#pragma once

#define LOOM_OP_LIST(X)                                                                                   \
    /* elementwise.cpp */                                                                                 \
    X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Max) X(Min) X(PRelu) X(Sum)                                      \
    X(Relu) X(LeakyRelu) X(Sigmoid) X(Tanh) X(Clip) X(HardSigmoid) X(HardSwish) X(Sqrt) X(Exp) X(Log)     \
    X(Neg) X(Abs) X(Erf) X(Softplus) X(Elu) X(Cast) X(EltwiseChain)                                       \
    /* nn.cpp */                                                                                          \
    X(Conv) X(ConvTranspose) X(MatMul) X(Gemm) X(BatchNormalization) X(InstanceNormalization)             \
    X(MaxPool) X(AveragePool) X(GlobalAveragePool) X(GlobalMaxPool) X(Softmax) X(LogSoftmax)              \
    X(ReduceMean) X(ReduceSum) X(ReduceMax) X(ReduceMin)                                                  \
    /* tensor.cpp */                                                                                      \
    X(Identity) X(Reshape) X(Flatten) X(Squeeze) X(Unsqueeze) X(Concat) X(Split) X(Slice) X(Pad)          \
    X(Transpose) X(DepthToSpace) X(SpaceToDepth) X(Resize) X(Upsample) X(Shape) X(Gather) X(TransData)
