#include "compiler/interpret.hpp"

#include <cstring>

#include <fmt/format.h>

#include "common/thread_pool.hpp"
#include "compiler/ops.hpp"
#include "compiler/ops/util.hpp"

namespace loom::compiler {

device::TensorRef host_tensor_ref(const HostTensor& t) {
    device::TensorRef r;
    r.dtype = t.dtype();
    r.rank = static_cast<int>(t.dims().size());
    for (size_t i = 0; i < t.dims().size(); ++i) r.dims[i] = t.dims()[i];
    r.data = const_cast<void*>(t.data());
    return r;
}

device::TensorRef empty_tensor_ref() {
    device::TensorRef r;
    r.rank = 1;
    r.dims[0] = 0;
    static float dummy = 0;
    r.data = &dummy;
    return r;
}

Result<std::vector<HostTensor>> run_node(const Graph& g, const Node& n, std::span<const HostTensor* const> inputs) {
    LOOM_ASSIGN_OR_RETURN(Lowered l, lower_node(g, n));
    std::vector<HostTensor> outs;
    for (int o : n.outputs) {
        const Value& v = g.value(o);
        LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, opu::static_dims(v));
        LOOM_TRY(shape_elements(v.shape, v.name).status());
        outs.emplace_back(v.dtype, std::move(dims));
    }
    // Map kernel inputs (value ids) to the given tensors by position in the node's inputs.
    auto tensor_for = [&](int id) -> const HostTensor* {
        for (size_t i = 0; i < n.inputs.size(); ++i)
            if (n.inputs[i] == id) return inputs[i];
        return nullptr;
    };
    if (l.alias) {
        const HostTensor* x = tensor_for(l.inputs[0]);
        if (!x) return make_error(StatusCode::INTERNAL, "{}: input missing", node_label(n));
        outs[0] = x->reshaped(outs[0].dims());
        return outs;
    }
    const device::KernelDef* k = device::find_kernel(l.kernel);
    if (!k) return make_error(StatusCode::INTERNAL, "{}: kernel '{}' is not registered", node_label(n), l.kernel);
    device::KernelLaunch launch;
    launch.attrs = std::move(l.attrs);
    for (int id : l.inputs) {
        const HostTensor* t = id >= 0 ? tensor_for(id) : nullptr;
        launch.inputs.push_back(t ? host_tensor_ref(*t) : empty_tensor_ref());
    }
    for (HostTensor& t : outs) {
        if (t.dims().size() > static_cast<size_t>(device::kMaxRank))
            return make_error(StatusCode::UNSUPPORTED, "{}: rank {} exceeds {}", node_label(n), t.dims().size(),
                              device::kMaxRank);
        launch.outputs.push_back(host_tensor_ref(t));
    }
    for (const auto& r : launch.inputs)
        if (r.rank > device::kMaxRank)
            return make_error(StatusCode::UNSUPPORTED, "{}: input rank exceeds {}", node_label(n), device::kMaxRank);
    if (Status s = k->run(launch, ThreadPool::global()); !s.ok())
        return s.with_context(fmt::format("{} -> kernel {}", node_label(n), l.kernel));
    return outs;
}

Result<std::vector<HostTensor>> interpret(const Graph& g, std::span<const HostTensor> inputs) {
    if (inputs.size() != g.inputs.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "{} inputs given, the graph has {}", inputs.size(),
                          g.inputs.size());
    std::vector<const HostTensor*> env(g.values.size(), nullptr);
    std::vector<HostTensor> produced;
    produced.reserve(g.values.size());
    for (size_t i = 0; i < g.values.size(); ++i)
        if (g.values[i].data) env[i] = g.values[i].data.get();
    for (size_t i = 0; i < inputs.size(); ++i) {
        const Value& v = g.value(g.inputs[i]);
        LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, opu::static_dims(v));
        if (inputs[i].dtype() != v.dtype || inputs[i].dims() != dims)
            return make_error(StatusCode::INVALID_ARGUMENT, "input '{}' is {} {}, the graph wants {} {}", v.name,
                              device::dtype_name(inputs[i].dtype()), shape_str(shape_of(inputs[i].dims())),
                              device::dtype_name(v.dtype), shape_str(v.shape));
        env[static_cast<size_t>(g.inputs[i])] = &inputs[i];
    }
    // Keep every produced tensor alive until the end (they are shared buffers, cheap to hold).
    std::vector<std::vector<HostTensor>> keep;
    keep.reserve(g.nodes.size());
    for (const Node& n : g.nodes) {
        std::vector<const HostTensor*> ins;
        for (int id : n.inputs) ins.push_back(id >= 0 ? env[static_cast<size_t>(id)] : nullptr);
        LOOM_ASSIGN_OR_RETURN(std::vector<HostTensor> outs, run_node(g, n, ins));
        keep.push_back(std::move(outs));
        for (size_t i = 0; i < n.outputs.size(); ++i) env[static_cast<size_t>(n.outputs[i])] = &keep.back()[i];
    }
    std::vector<HostTensor> result;
    for (int o : g.outputs) result.push_back(*env[static_cast<size_t>(o)]);
    return result;
}

}  // namespace loom::compiler
