// Running a graph once, compiled for its input's dims: the untiled reference of the tiling and
// descriptor tests (kept out of test_util.hpp so that only they depend on the executor).
#pragma once

#include <memory>
#include <span>
#include <string>

#include <gtest/gtest.h>

#include "compiler/compile.hpp"
#include "executor/executor.hpp"

namespace loom::test {

// Compiles `g` for the dims of `x` (its one input) and runs it once on `dev`; returns the first
// output.
inline compiler::HostTensor run_compiled(const compiler::Graph& g, const compiler::HostTensor& x, device::Device& dev,
                                         compiler::Precision precision = compiler::Precision::FP32) {
    compiler::CompileOptions o;
    o.shapes = {{g.value(g.inputs[0]).name, x.dims()}};
    o.precision = precision;
    auto m = compiler::compile_graph(g, o, dev.spec());
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    auto lm = executor::LoadedModel::load(dev, std::make_shared<const compiler::CompiledModel>(std::move(*m)));
    EXPECT_TRUE(lm.ok()) << lm.status().to_string();
    auto s = executor::Session::create(*lm);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    auto y = (*s)->run(std::span<const compiler::HostTensor>(&x, 1));
    EXPECT_TRUE(y.ok()) << y.status().to_string();
    return std::move((*y)[0]);
}

}  // namespace loom::test
