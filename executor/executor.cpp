#include "executor/executor.hpp"

#include <chrono>

#include <fmt/format.h>

#include "common/thread_pool.hpp"
#include "compiler/model_file.hpp"

namespace loom::executor {

using compiler::CompiledStep;
using compiler::CompiledTensor;
using compiler::Placement;
using compiler::Storage;

Result<std::shared_ptr<LoadedModel>> LoadedModel::load(device::Device& dev, std::shared_ptr<const CompiledModel> model) {
    LOOM_TRY(compiler::check_compatible(*model, dev.spec(), model->source));
    std::shared_ptr<LoadedModel> lm(new LoadedModel());
    lm->dev_ = &dev;
    lm->model_ = model;
    for (const CompiledStep& s : model->steps) {
        const device::KernelDef* k = s.alias ? nullptr : device::find_kernel(s.kernel);
        if (!s.alias && !k)
            return make_error(StatusCode::NOT_FOUND, "{}: step '{}' needs the kernel '{}', which this build lacks",
                              model->source, s.name, s.kernel);
        lm->kernels_.push_back(k);
    }
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(model->weights.elements(), 64));
    auto buf = dev.malloc(bytes, "weights");
    if (!buf.ok()) return buf.status().with_context(fmt::format("loading the weights of {}", model->source));
    lm->weights_ = std::move(*buf);
    if (model->weights.elements() > 0) {
        device::Stream s = dev.create_stream();
        auto dst = lm->weights_.as<uint8_t>().slice(0, static_cast<size_t>(model->weights.elements()));
        LOOM_TRY(s.copy_h2d(dst, device::HostView<const uint8_t>(model->weights.as<uint8_t>(), dst.size(), false),
                            "weights"));
        LOOM_TRY(s.synchronize().with_context(fmt::format("uploading the weights of {}", model->source)));
    }
    return lm;
}

Result<std::unique_ptr<Session>> Session::create(std::shared_ptr<LoadedModel> model) {
    std::unique_ptr<Session> s(new Session());
    device::Device& dev = model->device();
    auto arena = dev.malloc(static_cast<size_t>(model->model().arena_bytes), "arena");
    if (!arena.ok())
        return arena.status().with_context(fmt::format("activation arena of {}", model->model().source));
    s->arena_ = std::move(*arena);
    s->model_ = std::move(model);
    s->stream_ = dev.create_stream();
    s->start_ = dev.create_event();
    s->end_ = dev.create_event();
    return s;
}

Status Session::submit(std::span<const HostTensor> inputs, std::vector<HostTensor>& outputs, RunStats& stats) {
    const CompiledModel& m = model_->model();
    void* arena = arena_.as<uint8_t>().host_data();
    void* weights = model_->weights().as<uint8_t>().host_data();
    auto ref = [&](int id) -> device::TensorRef {
        if (id < 0) {
            device::TensorRef empty;
            empty.rank = 1;
            empty.data = arena;
            empty.device_addr = arena_.addr();
            return empty;
        }
        const CompiledTensor& t = m.tensors[static_cast<size_t>(id)];
        return t.storage == Storage::ARENA ? compiler::tensor_ref_of(t, arena, arena_.addr())
                                           : compiler::tensor_ref_of(t, weights, model_->weights().addr());
    };
    auto bytes_of = [&](int id) {
        const CompiledTensor& t = m.tensors[static_cast<size_t>(id)];
        const device::DeviceBuffer& buf = t.storage == Storage::ARENA ? arena_ : model_->weights();
        return buf.as<uint8_t>().slice(static_cast<size_t>(t.offset), static_cast<size_t>(t.bytes));
    };
    LOOM_TRY(stream_.record(start_));
    for (size_t i = 0; i < inputs.size(); ++i) {
        const int id = m.inputs[i];
        if (m.tensors[static_cast<size_t>(id)].bytes == 0) continue;
        LOOM_TRY(stream_.copy_h2d(bytes_of(id),
                                  device::HostView<const uint8_t>(inputs[i].as<uint8_t>(), inputs[i].bytes(), false),
                                  "input"));
    }
    for (size_t si = 0; si < m.steps.size(); ++si) {
        const CompiledStep& s = m.steps[si];
        if (s.alias) continue;
        device::KernelLaunch launch;
        launch.attrs = s.attrs;
        launch.tiling = s.tiling;
        double bytes = 0;
        for (int id : s.inputs) {
            launch.inputs.push_back(ref(id));
            bytes += static_cast<double>(launch.inputs.back().bytes());
        }
        for (int id : s.outputs) {
            launch.outputs.push_back(ref(id));
            bytes += static_cast<double>(launch.outputs.back().bytes());
        }
        const device::KernelDef* k = model_->kernel(si);
        if (s.placement == Placement::HOST) {
            ThreadPool* pool = &ThreadPool::global();
            LOOM_TRY(stream_.launch_host(s.name, s.flops, bytes,
                                         [k, pool, l = std::move(launch)] { return k->run(l, *pool); }));
            ++stats.host_steps;
        } else {
            LOOM_TRY(stream_.launch(*k, std::move(launch), s.name));
            ++stats.launches;
        }
    }
    outputs.clear();
    for (int id : m.outputs) {
        const CompiledTensor& t = m.tensors[static_cast<size_t>(id)];
        outputs.emplace_back(t.dtype, t.dims);
        if (t.bytes == 0) continue;
        HostTensor& out = outputs.back();
        LOOM_TRY(stream_.copy_d2h(device::HostView<uint8_t>(out.as<uint8_t>(), out.bytes(), false),
                                  device::DevicePtr<const uint8_t>(bytes_of(id)), "output"));
    }
    LOOM_TRY(stream_.record(end_));
    return {};
}

Result<std::vector<HostTensor>> Session::run(std::span<const HostTensor> inputs, RunStats* stats) {
    const auto t0 = std::chrono::steady_clock::now();
    const CompiledModel& m = model_->model();
    if (inputs.size() != m.inputs.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} inputs given, the model takes {}", m.source,
                          inputs.size(), m.inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        const CompiledTensor& t = m.tensors[static_cast<size_t>(m.inputs[i])];
        if (inputs[i].dtype() != t.dtype || inputs[i].dims() != t.dims)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: input {} ('{}') is {} {}, the model was compiled for {} {}",
                              m.source, i, t.name, device::dtype_name(inputs[i].dtype()),
                              compiler::shape_str(compiler::shape_of(inputs[i].dims())), device::dtype_name(t.dtype),
                              compiler::shape_str(compiler::shape_of(t.dims)));
    }
    RunStats local;
    std::vector<HostTensor> outputs;
    Status submitted = submit(inputs, outputs, local);
    // Always drain the stream, so a failed inference leaves nothing running and clears the
    // stream's error for the next one.
    Status done = stream_.synchronize();
    if (!submitted.ok()) return submitted.with_context(m.source);
    if (!done.ok()) return done.with_context(m.source);
    auto sim = device::Event::elapsed_ms(start_, end_);
    if (sim.ok()) local.sim_ms = *sim;
    local.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (stats) *stats = local;
    return outputs;
}

}  // namespace loom::executor
