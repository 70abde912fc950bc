#include "compiler/tuning.hpp"

#include <algorithm>
#include <cmath>
#include <variant>

#include <fmt/format.h>

#include "common/hash.hpp"
#include "compiler/split.hpp"

namespace loom::compiler {

namespace {

void append_tensor(std::string& out, const TensorKey& t) {
    out += device::dtype_name(t.dtype);
    out += '[';
    for (size_t i = 0; i < t.dims.size(); ++i) {
        if (i) out += ',';
        out += fmt::format("{}", t.dims[i]);
    }
    out += ']';
}

void append_tensors(std::string& out, const std::vector<TensorKey>& ts) {
    for (size_t i = 0; i < ts.size(); ++i) {
        if (i) out += ';';
        append_tensor(out, ts[i]);
    }
}

// Shortest round-trip form, always marked as a float.
std::string float_text(double v) {
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // "inf" and "nan" contain 'n'
    return s;
}

std::string quoted_text(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') out += '\\', out += c;
        else if (u < 0x20 || u >= 0x7f) out += fmt::format("\\x{:02x}", u);
        else out += c;
    }
    out += '"';
    return out;
}

std::string value_text(const device::AttrValue& v) {
    switch (v.index()) {
    case 0: return fmt::format("{}", std::get<int64_t>(v));
    case 1: return float_text(std::get<double>(v));
    case 2: return quoted_text(std::get<std::string>(v));
    case 3: return fmt::format("[{}]", fmt::join(std::get<std::vector<int64_t>>(v), ","));
    case 4: {
        std::string out = "f[";
        const auto& list = std::get<std::vector<double>>(v);
        for (size_t i = 0; i < list.size(); ++i) {
            if (i) out += ',';
            out += float_text(list[i]);
        }
        out += ']';
        return out;
    }
    }
    return "?";
}

TensorKey tensor_key(const device::TensorRef& t) {
    TensorKey k;
    k.dtype = t.dtype;
    k.dims.assign(t.dims.begin(), t.dims.begin() + std::max(t.rank, 0));
    return k;
}

}  // namespace

std::string StepKey::text() const {
    std::string out = kernel;
    out += "|in=";
    append_tensors(out, inputs);
    out += "|out=";
    append_tensors(out, outputs);
    out += "|attrs=";
    out += attrs;
    if (l2_inputs != 0 || l2_outputs) out += fmt::format("|l2=in{},out{}", l2_inputs, l2_outputs ? 1 : 0);
    out += fmt::format("|spec={:016x}|cost={}", spec_hash, cost_model_version);
    return out;
}

uint64_t StepKey::hash() const {
    const std::string t = text();
    return fnv1a(kFnvBasis, t.data(), t.size());
}

std::string canonical_attrs(const device::KernelAttrs& attrs) {
    std::vector<const std::pair<std::string, device::AttrValue>*> items;
    for (const auto& item : attrs.items()) items.push_back(&item);
    std::sort(items.begin(), items.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ';';
        out += items[i]->first;
        out += '=';
        out += value_text(items[i]->second);
    }
    return out;
}

StepKey step_key(std::string_view kernel, const device::KernelLaunch& launch, const device::DeviceSpec& spec) {
    return step_key(kernel, launch, spec.hash());
}

StepKey step_key(std::string_view kernel, const device::KernelLaunch& launch, uint64_t spec_hash) {
    StepKey k;
    k.kernel = kernel;
    for (const device::TensorRef& t : launch.inputs) k.inputs.push_back(tensor_key(t));
    for (const device::TensorRef& t : launch.outputs) k.outputs.push_back(tensor_key(t));
    k.attrs = canonical_attrs(launch.attrs);
    k.l2_inputs = launch.l2_inputs;
    k.l2_outputs = launch.l2_outputs;
    k.spec_hash = spec_hash;
    k.cost_model_version = device::cost::kCostModelVersion;
    return k;
}

uint64_t tiling_hash(const device::Tiling& t) {
    Hasher h;
    h.u64(t.index());
    if (const auto* c = std::get_if<device::CubeTiling>(&t))
        h.i64(c->m_l1)
            .i64(c->n_l1)
            .i64(c->k_l1)
            .i64(c->m_l0)
            .i64(c->n_l0)
            .i64(c->k_l0)
            .u64(c->n_outer)
            .u64(c->double_buffer)
            .i64(c->cores);
    if (const auto* v = std::get_if<device::VectorSchedule>(&t))
        h.i64(v->ub_tile)
            .u64(v->double_buffer)
            .i64(v->cores)
            .u64(static_cast<uint64_t>(v->vector_axis))
            .i64(v->vector_tile)
            .u64(v->fuse_input)
            .u64(v->fuse_output)
            .i64(v->fuse_ub_buffers)
            .u64(v->in_place);
    return h.digest();
}

void TilingTable::set(const StepKey& key, const device::Tiling& tiling) { by_key_[key.text()] = tiling; }

void TilingTable::merge(const TilingTable& other) {
    for (const auto& [key, tiling] : other.by_key_) by_key_[key] = tiling;
}

std::optional<device::Tiling> TilingTable::tiling_for(const StepKey& key) const {
    const auto it = by_key_.find(key.text());
    if (it == by_key_.end()) return std::nullopt;
    return it->second;
}

uint64_t TilingTable::content_hash() const {
    Hasher h;
    h.u64(by_key_.size());
    for (const auto& [key, tiling] : by_key_) h.str(key).u64(tiling_hash(tiling));
    return h.digest();
}

Result<std::vector<TuningStep>> tuning_steps(const CompiledModel& m, const device::DeviceSpec& spec) {
    if (m.mode != ExecMode::SINK)
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "{}: a {}-mode model is lowered per input shape at run time; tune a sink model (static "
                          "input shapes)",
                          m.source, exec_mode_name(m.mode));
    if (m.spec_hash != spec.hash())
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "{}: compiled for device '{}' (spec hash {:016x}), not '{}' ({:016x})", m.source, m.spec_name,
                          m.spec_hash, spec.name, spec.hash());
    const auto* weights = static_cast<const std::byte*>(m.weights.data());
    auto constant_data = [&](int id) -> const void* {
        const CompiledTensor& t = m.tensors[static_cast<size_t>(id)];
        return t.storage == Storage::WEIGHTS && t.offset >= 0 ? weights + t.offset : nullptr;
    };
    std::vector<TuningStep> steps;
    // Adds `t` (its step, kernel and launch set) when its work takes a tiling.
    auto add = [&](TuningStep t) -> Status {
        const CompiledStep& s = m.steps[t.step];
        auto work = device::kernel_launch_work(*t.kernel, t.launch, spec);
        if (!work.ok())
            return work.status().with_context(
                fmt::format("{}: step '{}' ({}) -> kernel {}", m.source, s.name, s.op, s.kernel));
        if (work->kind == device::TilingKind::NONE) return {};
        t.work = std::move(*work);
        t.key = step_key(t.kernel->name, t.launch, spec);
        steps.push_back(std::move(t));
        return {};
    };
    size_t next_split = 0;
    for (size_t si = 0; si < m.steps.size(); ++si) {
        if (next_split < m.splits.size() && static_cast<size_t>(m.splits[next_split].first) == si) {
            const SplitRegion& r = m.splits[next_split];
            LOOM_ASSIGN_OR_RETURN(SplitPlan p, plan_split(m, r.first, r.last, r.rows));
            for (size_t i = 0; i < p.launches.size(); ++i) {
                TuningStep t;
                t.step = static_cast<size_t>(p.launches[i].step);
                t.split = static_cast<int>(next_split);
                t.band_launch = i;
                t.kernel = device::find_kernel(m.steps[t.step].kernel);
                if (!t.kernel || !t.kernel->work) continue;
                t.launch = band_cost_launch(m, r, p, i);
                LOOM_TRY(add(std::move(t)));
            }
            si = static_cast<size_t>(r.last);
            ++next_split;
            continue;
        }
        const CompiledStep& s = m.steps[si];
        if (s.alias || s.placement != Placement::DEVICE) continue;
        const device::KernelDef* k = device::find_kernel(s.kernel);
        if (!k)
            return make_error(StatusCode::NOT_FOUND, "{}: step '{}' needs the kernel '{}', which this build lacks",
                              m.source, s.name, s.kernel);
        if (!k->work) continue;
        TuningStep t;
        t.step = si;
        t.kernel = k;
        t.launch = step_cost_launch(m.tensors, s, constant_data);
        LOOM_TRY(add(std::move(t)));
    }
    return steps;
}

}  // namespace loom::compiler
