// What a launch is beyond its kernel: operands resident in L2 (priced by the cost model,
// docs/device-model.md 3.3) and bands of rows of larger tensors (run on dense copies).
#include <algorithm>
#include <cstring>
#include <memory>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"

namespace loom::device {

namespace {

const RowBand* band_of(const std::vector<RowBand>* bands, size_t i) {
    if (!bands || i >= bands->size() || !(*bands)[i].banded()) return nullptr;
    return &(*bands)[i];
}

// Copies `rows` rows of `row_bytes` for each of `planes` planes between a dense band and a tensor
// of `height` rows, starting at row `row` of the tensor and `band_row` of the band.
void copy_rows(std::byte* band, const std::byte* whole, int64_t planes, int64_t band_rows, int64_t height, int64_t row,
               int64_t band_row, int64_t rows, size_t row_bytes, bool to_band, ThreadPool& pool) {
    const size_t chunk = static_cast<size_t>(rows) * row_bytes;
    pool.parallel_for(static_cast<size_t>(planes), 1, [&](size_t b, size_t e) {
        for (size_t p = b; p < e; ++p) {
            const auto pi = static_cast<int64_t>(p);
            std::byte* d = band + static_cast<size_t>(pi * band_rows + band_row) * row_bytes;
            const std::byte* w = whole + static_cast<size_t>(pi * height + row) * row_bytes;
            if (to_band) std::memcpy(d, w, chunk);
            else std::memcpy(const_cast<std::byte*>(w), d, chunk);
        }
    });
}

}  // namespace

Result<KernelWork> kernel_launch_work(const KernelDef& kernel, const KernelLaunch& launch, const DeviceSpec& spec) {
    if (!kernel.work) return make_error(StatusCode::UNSUPPORTED, "{}: the kernel has no work function", kernel.name);
    LOOM_ASSIGN_OR_RETURN(KernelWork w, kernel.work(launch, spec));
    if (launch.l2_inputs == 0 && !launch.l2_outputs) return w;
    const size_t n = launch.inputs.size();
    if (n < 32 && (launch.l2_inputs >> n) != 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: l2_inputs {:#x} names inputs past its {}", kernel.name,
                          launch.l2_inputs, n);
    auto resident = [&](size_t i) { return i < 32 && ((launch.l2_inputs >> i) & 1u) != 0; };
    switch (w.kind) {
    case TilingKind::CUBE: {
        w.cube.a_l2 = resident(0);
        const int64_t out = launch.outputs.empty() ? -1 : launch.outputs[0].elements();
        for (size_t i = 1; i < n; ++i)
            if (resident(i) && launch.inputs[i].elements() == out) w.cube.residual_l2 = true;
        w.cube.c_l2 = launch.l2_outputs;
        break;
    }
    case TilingKind::VECTOR: {
        double bytes = 0;
        for (size_t i = 0; i < n; ++i)
            if (resident(i)) bytes += static_cast<double>(launch.inputs[i].bytes());
        if (w.vector.elements > 0)
            w.vector.l2_in_bytes = std::min(w.vector.in_bytes, bytes / static_cast<double>(w.vector.elements));
        w.vector.l2_out = launch.l2_outputs;
        break;
    }
    case TilingKind::NONE: break;  // a fixed cost only
    }
    return w;
}

Result<CycleBreakdown> kernel_launch_cost(const KernelDef& kernel, const KernelLaunch& launch, const DeviceSpec& spec) {
    if (launch.l2_inputs == 0 && !launch.l2_outputs) return kernel.cost(launch, spec);
    LOOM_ASSIGN_OR_RETURN(KernelWork w, kernel_launch_work(kernel, launch, spec));
    return cost::cost_of_work(spec, w, launch.tiling, kernel.name);
}

Status check_launch_bands(const KernelDef& kernel, const KernelLaunch& launch) {
    if (!launch.bands) return {};
    const LaunchBands& b = *launch.bands;
    if (b.inputs.size() > launch.inputs.size() || b.outputs.size() > launch.outputs.size())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: bands for {} inputs and {} outputs, the launch has {} and {}", kernel.name,
                          b.inputs.size(), b.outputs.size(), launch.inputs.size(), launch.outputs.size());
    auto check = [&](const TensorRef& t, const RowBand& r, const char* what, size_t i, bool output) -> Status {
        if (!r.banded()) return {};
        if (t.rank != 4 || r.row < 0 || t.dim(2) < 0 || r.row > r.height - t.dim(2))
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} {}: band of rank {} at row {} ({} rows) in {} rows",
                              kernel.name, what, i, t.rank, r.row, t.rank == 4 ? t.dim(2) : 0, r.height);
        if (output && (r.keep_begin < 0 || r.keep_begin > r.keep_end || r.keep_end > t.dim(2)))
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: output {}: keeps rows [{}, {}) of a band of {}",
                              kernel.name, i, r.keep_begin, r.keep_end, t.dim(2));
        return {};
    };
    for (size_t i = 0; i < b.inputs.size(); ++i) LOOM_TRY(check(launch.inputs[i], b.inputs[i], "input", i, false));
    for (size_t i = 0; i < b.outputs.size(); ++i) LOOM_TRY(check(launch.outputs[i], b.outputs[i], "output", i, true));
    return {};
}

size_t launch_tensor_bytes(const TensorRef& t, const RowBand* band) {
    if (!band || !band->banded() || t.rank != 4) return t.bytes();
    return static_cast<size_t>(t.dim(0) * t.dim(1) * band->height * t.dim(3)) * dtype_size(t.dtype);
}

Status run_kernel_launch(const KernelDef& kernel, const KernelLaunch& launch, ThreadPool& pool) {
    if (!launch.bands) return kernel.run(launch, pool);
    const LaunchBands& b = *launch.bands;
    KernelLaunch dense = launch;
    dense.bands = nullptr;
    std::vector<std::unique_ptr<std::byte[]>> scratch;
    auto band_buffer = [&](TensorRef& t) {
        scratch.emplace_back(new std::byte[std::max<size_t>(t.bytes(), 1)]);
        t.data = scratch.back().get();
        return scratch.back().get();
    };
    auto row_bytes = [](const TensorRef& t) { return static_cast<size_t>(t.dim(3)) * dtype_size(t.dtype); };
    for (size_t i = 0; i < launch.inputs.size(); ++i) {
        const RowBand* r = band_of(&b.inputs, i);
        if (!r) continue;
        const TensorRef& whole = launch.inputs[i];
        std::byte* band = band_buffer(dense.inputs[i]);
        copy_rows(band, static_cast<const std::byte*>(whole.data), whole.dim(0) * whole.dim(1), whole.dim(2), r->height,
                  r->row, 0, whole.dim(2), row_bytes(whole), true, pool);
    }
    for (size_t i = 0; i < launch.outputs.size(); ++i)
        if (band_of(&b.outputs, i)) band_buffer(dense.outputs[i]);
    LOOM_TRY(kernel.run(dense, pool));
    for (size_t i = 0; i < launch.outputs.size(); ++i) {
        const RowBand* r = band_of(&b.outputs, i);
        if (!r || r->keep_end == r->keep_begin) continue;
        const TensorRef& whole = launch.outputs[i];
        copy_rows(static_cast<std::byte*>(dense.outputs[i].data), static_cast<const std::byte*>(whole.data),
                  whole.dim(0) * whole.dim(1), whole.dim(2), r->height, r->row + r->keep_begin, r->keep_begin,
                  r->keep_end - r->keep_begin, row_bytes(whole), false, pool);
    }
    return {};
}

}  // namespace loom::device
