#include "compiler/split.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <variant>

#include <fmt/format.h>

#include "compiler/ops.hpp"
#include "compiler/tuning.hpp"

namespace loom::compiler {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

std::string step_label(const CompiledModel& m, size_t si) {
    return fmt::format("step {} ('{}', {})", si, m.steps[si].name, m.steps[si].op);
}

Status unsplittable(const CompiledModel& m, size_t si, std::string_view why) {
    return make_error(StatusCode::UNSUPPORTED, "{}: {} cannot run band by band: {}", m.source, step_label(m, si), why);
}

}  // namespace

Status pointwise_split_rule(const SplitStepView& v, SplitRule& r) {
    const std::vector<int64_t>& y = v.outputs.at(0);
    for (size_t i = 0; i < v.inputs.size(); ++i) {
        const std::vector<int64_t>& d = v.inputs[i];
        if (d.size() == 4 && d[0] == y[0] && d[2] == y[2] && d[3] == y[3] && y[2] > 1) {
            r.inputs.push_back(BandRole::SAME);
        } else if (d.size() < 2 || d[d.size() - 2] == 1) {
            r.inputs.push_back(BandRole::WHOLE);
        } else {
            return make_error(StatusCode::UNSUPPORTED, "input {} varies over H but is not a map of the output's size",
                              i);
        }
    }
    return {};
}

namespace {

// The dims of tensor `id` (none for an absent input).
std::vector<int64_t> dims_of(const CompiledModel& m, int id) {
    return id < 0 ? std::vector<int64_t>{} : m.tensors[static_cast<size_t>(id)].dims;
}

// Bytes of one row of tensor `t` in device memory (its layout's padding included).
int64_t row_bytes(const CompiledTensor& t) {
    const int64_t h = t.dims.size() == 4 ? std::max<int64_t>(t.dims[2], 1) : 1;
    return ceil_div(t.device_bytes(), h);
}

}  // namespace

Result<SplitRule> split_rule(const CompiledModel& m, size_t si) {
    const CompiledStep& s = m.steps[si];
    const OpDef* op = find_op(s.op);
    if (!op) return unsplittable(m, si, "its op is unknown");
    if (s.outputs.size() != 1) return unsplittable(m, si, fmt::format("it has {} outputs", s.outputs.size()));
    SplitStepView v{s, {}, {}};
    for (int id : s.inputs) v.inputs.push_back(dims_of(m, id));
    for (int id : s.outputs) v.outputs.push_back(dims_of(m, id));
    if (v.outputs[0].size() != 4) return unsplittable(m, si, "its output is not a 4-D map");
    SplitRule r;
    Status st;
    if (op->split) st = op->split(v, r);
    else if (op->has(OpTrait::POINTWISE)) st = pointwise_split_rule(v, r);
    else return unsplittable(m, si, "its op mixes rows beyond a fixed neighbourhood or has no split rule");
    if (!st.ok()) return unsplittable(m, si, st.message());
    LOOM_ASSERT_MSG(r.inputs.size() == s.inputs.size() && r.scale >= 1 && r.radius >= 0 && r.align >= 1,
                    "{}: split rule of {} inputs, scale {}, radius {}, align {}", s.op, r.inputs.size(), r.scale,
                    r.radius, r.align);
    LOOM_ASSERT_MSG(!r.pads || r.scale == 1, "{}: a split rule that rewrites pads must keep the scale", s.op);
    return r;
}

std::string split_label(const CompiledModel& m, int first, int last) {
    const auto name = [&](int i) {
        return i >= 0 && static_cast<size_t>(i) < m.steps.size() ? m.steps[static_cast<size_t>(i)].name
                                                                 : fmt::format("#{}", i);
    };
    return first == last ? fmt::format("'{}'", name(first)) : fmt::format("'{}' .. '{}'", name(first), name(last));
}

Result<SplitPlan> plan_split(const CompiledModel& m, int first, int last, int64_t rows) {
    const int n = static_cast<int>(m.steps.size());
    if (m.mode != ExecMode::SINK)
        return make_error(StatusCode::FAILED_PRECONDITION, "{}: only a sink model's steps can be split", m.source);
    if (first < 0 || last >= n || first > last)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: split region of steps {} to {} (the model has {})",
                          m.source, first, last, n);
    const std::string region = fmt::format("{}: split region {}", m.source, split_label(m, first, last));
    if (rows < 1) return make_error(StatusCode::INVALID_ARGUMENT, "{}: bands of {} rows", region, rows);

    // The rules, and which step of the region writes each tensor.
    const size_t count = static_cast<size_t>(last - first + 1);
    std::vector<SplitRule> rules(count);
    std::map<int, int> producer;  // tensor id -> step index (in the region)
    for (int si = first; si <= last; ++si) {
        const CompiledStep& s = m.steps[static_cast<size_t>(si)];
        if (s.alias) return unsplittable(m, static_cast<size_t>(si), "it is a view of its input (alias)");
        if (s.placement != Placement::DEVICE) return unsplittable(m, static_cast<size_t>(si), "it runs on the host");
        // Its neighbour would expect its data in UB, where a band launch does not leave it.
        if (const auto* v = std::get_if<device::VectorSchedule>(&s.tiling); v && (v->fuse_input || v->fuse_output))
            return unsplittable(m, static_cast<size_t>(si), "its schedule fuses it with a neighbour in UB");
        LOOM_ASSIGN_OR_RETURN(rules[static_cast<size_t>(si - first)], split_rule(m, static_cast<size_t>(si)));
        const SplitRule& r = rules[static_cast<size_t>(si - first)];
        const CompiledTensor& y = m.tensors[static_cast<size_t>(s.outputs[0])];
        for (size_t i = 0; i < s.inputs.size(); ++i) {
            if (r.inputs[i] == BandRole::WHOLE) continue;
            const int id = s.inputs[i];
            const std::vector<int64_t> d = dims_of(m, id);
            if (d.size() != 4 || d[0] != y.dims[0])
                return unsplittable(m, static_cast<size_t>(si),
                                    fmt::format("input {} is not a map of the output's batch", i));
            if (r.inputs[i] == BandRole::SOURCE && (y.dims[2] % r.scale != 0 || y.dims[2] / r.scale != d[2]))
                return unsplittable(
                    m, static_cast<size_t>(si),
                    fmt::format("its output has {} rows for {} input rows at scale {}", y.dims[2], d[2], r.scale));
            if (r.inputs[i] == BandRole::SAME && d[2] != y.dims[2])
                return unsplittable(m, static_cast<size_t>(si),
                                    fmt::format("input {} has {} rows, its output {}", i, d[2], y.dims[2]));
        }
        if (y.storage != Storage::ARENA) return unsplittable(m, static_cast<size_t>(si), "its output is a constant");
        producer[s.outputs[0]] = si;
    }
    // Every intermediate stays inside the region and is read there by band.
    const int out_id = m.steps[static_cast<size_t>(last)].outputs[0];
    for (int si = first; si <= last; ++si) {
        const CompiledStep& s = m.steps[static_cast<size_t>(si)];
        const SplitRule& r = rules[static_cast<size_t>(si - first)];
        for (size_t i = 0; i < s.inputs.size(); ++i)
            if (r.inputs[i] == BandRole::WHOLE && producer.count(s.inputs[i]))
                return unsplittable(m, static_cast<size_t>(si),
                                    fmt::format("it reads input {} ('{}'), an intermediate of the region, whole", i,
                                                m.tensors[static_cast<size_t>(s.inputs[i])].name));
    }
    for (const auto& [id, si] : producer) {
        if (id == out_id) continue;
        const std::string& name = m.tensors[static_cast<size_t>(id)].name;
        if (std::find(m.outputs.begin(), m.outputs.end(), id) != m.outputs.end())
            return unsplittable(m, static_cast<size_t>(si), fmt::format("its output '{}' is a graph output", name));
        for (int sj = last + 1; sj < n; ++sj) {
            const CompiledStep& t = m.steps[static_cast<size_t>(sj)];
            if (std::find(t.inputs.begin(), t.inputs.end(), id) != t.inputs.end())
                return unsplittable(m, static_cast<size_t>(si),
                                    fmt::format("its output '{}' is read by {} after the region", name,
                                                step_label(m, static_cast<size_t>(sj))));
        }
    }

    // The last step's bands.
    const SplitRule& lr = rules.back();
    const int64_t height = m.tensors[static_cast<size_t>(out_id)].dims[2];
    const int64_t align_out = std::lcm(lr.align, lr.scale);
    if (rows < height && rows % align_out != 0)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: bands of {} rows: {}'s bands must start on multiples of {} rows", region, rows,
                          step_label(m, static_cast<size_t>(last)), align_out);
    SplitPlan p;
    p.first = first, p.last = last, p.rows = rows;
    p.bands = ceil_div(height, rows);
    if (p.bands > kSplitBandsMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} bands of {} rows (at most {})", region, p.bands, rows,
                          kSplitBandsMax);
    if (p.bands * static_cast<int64_t>(count) > kSplitLaunchesMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} steps in {} bands of {} rows (at most {} launches)",
                          region, count, p.bands, rows, kSplitLaunchesMax);
    const auto B = static_cast<size_t>(p.bands);

    // done[k][t]: rows of step k's output computed by the end of band t; backwards from the last
    // step, each producer computing what its readers need, rounded up to its own alignment.
    std::vector<std::vector<int64_t>> done(count, std::vector<int64_t>(B, 0)), need = done;
    for (size_t t = 0; t < B; ++t) need[count - 1][t] = std::min(height, static_cast<int64_t>(t + 1) * rows);
    for (size_t k = count; k-- > 0;) {
        const CompiledStep& s = m.steps[static_cast<size_t>(first) + k];
        const SplitRule& r = rules[k];
        const int64_t h = m.tensors[static_cast<size_t>(s.outputs[0])].dims[2];
        const int64_t a = std::lcm(r.align, r.scale);
        for (size_t t = 0; t < B; ++t) {
            const int64_t want = t + 1 == B ? h : need[k][t];
            int64_t d = want >= h ? h : std::min(h, round_up(want, a));
            if (t > 0) d = std::max(d, done[k][t - 1]);
            done[k][t] = d;
        }
        for (size_t i = 0; i < s.inputs.size(); ++i) {
            if (r.inputs[i] == BandRole::WHOLE) continue;
            const auto it = producer.find(s.inputs[i]);
            if (it == producer.end()) continue;
            const int64_t hin = m.tensors[static_cast<size_t>(s.inputs[i])].dims[2];
            const size_t j = static_cast<size_t>(it->second - first);
            for (size_t t = 0; t < B; ++t) {
                const int64_t d = done[k][t];
                int64_t req = 0;
                if (r.inputs[i] == BandRole::SOURCE)
                    req = d >= h ? hin : std::min(hin, ceil_div(d, r.scale) + r.radius);
                else if (r.radius > 0 && !r.pads) req = std::min(hin, r.scale * (ceil_div(d, r.scale) + r.radius));
                else req = d;
                need[j][t] = std::max(need[j][t], req);
            }
        }
    }

    // The launches, and per tensor the most rows live over one band.
    std::map<int, int64_t> live;  // tensor id -> rows
    for (size_t t = 0; t < B; ++t) {
        std::map<int, std::pair<int64_t, int64_t>> touched;  // tensor id -> [lo, hi) this band
        auto touch = [&](int id, int64_t lo, int64_t hi) {
            auto [it, fresh] = touched.emplace(id, std::make_pair(lo, hi));
            if (!fresh) it->second = {std::min(it->second.first, lo), std::max(it->second.second, hi)};
        };
        for (size_t k = 0; k < count; ++k) {
            const int64_t a = t == 0 ? 0 : done[k][t - 1], b = done[k][t];
            if (a == b) continue;
            const int si = first + static_cast<int>(k);
            const CompiledStep& s = m.steps[static_cast<size_t>(si)];
            const SplitRule& r = rules[k];
            const int yid = s.outputs[0];
            const int64_t h = m.tensors[static_cast<size_t>(yid)].dims[2];
            BandLaunch l;
            l.step = si;
            l.band = static_cast<int64_t>(t);
            // The SOURCE rows [lo, hi) and the output rows the kernel computes, [out_lo, out_hi).
            int64_t lo = 0, hi = 0, out_lo = a, out_hi = b;
            for (size_t i = 0; i < s.inputs.size(); ++i)
                if (r.inputs[i] == BandRole::SOURCE) {
                    const int64_t hin = m.tensors[static_cast<size_t>(s.inputs[i])].dims[2];
                    lo = std::max<int64_t>(0, a / r.scale - r.radius);
                    hi = std::min(hin, ceil_div(b, r.scale) + r.radius);
                    if (r.radius > 0 && r.pads) {
                        // The frame's padding where the band meets the map's edge, none inside.
                        l.pads = std::vector<int64_t>{r.radius - (a - lo), r.pad_left, r.radius - (hi - b),
                                                      r.pad_right};
                    } else if (r.radius > 0) {
                        out_lo = r.scale * lo, out_hi = std::min(h, r.scale * hi);
                    }
                    break;
                }
            for (size_t i = 0; i < s.inputs.size(); ++i) {
                TensorBand tb;
                const int id = s.inputs[i];
                if (r.inputs[i] != BandRole::WHOLE) {
                    const bool source = r.inputs[i] == BandRole::SOURCE;
                    const int64_t blo = source ? lo : out_lo, bhi = source ? hi : out_hi;
                    tb.band.height = m.tensors[static_cast<size_t>(id)].dims[2];
                    tb.band.row = blo;
                    tb.rows = bhi - blo;
                    touch(id, blo, bhi);
                    const auto it = producer.find(id);
                    if (it != producer.end()) {
                        // Written by an earlier step of the region, in this band or before.
                        const size_t j = static_cast<size_t>(it->second - first);
                        LOOM_ASSERT_MSG(done[j][t] >= bhi, "split: step {} reads rows to {} of '{}', {} are done", si,
                                        bhi, m.tensors[static_cast<size_t>(id)].name, done[j][t]);
                        if (i < 32) l.l2_inputs |= 1u << i;
                    }
                }
                l.inputs.push_back(tb);
            }
            TensorBand yb;
            yb.band.height = h;
            yb.band.row = out_lo;
            yb.rows = out_hi - out_lo;
            yb.band.keep_begin = a - out_lo;
            yb.band.keep_end = b - out_lo;
            l.outputs.push_back(yb);
            l.l2_outputs = yid != out_id;
            touch(yid, a, b);
            p.launches.push_back(std::move(l));
        }
        for (const auto& [id, range] : touched) live[id] = std::max(live[id], range.second - range.first);
    }
    // The footprint: the live rows of every map, and every operand a band reads whole.
    std::set<int> whole;
    for (int si = first; si <= last; ++si) {
        const CompiledStep& s = m.steps[static_cast<size_t>(si)];
        for (size_t i = 0; i < s.inputs.size(); ++i)
            if (s.inputs[i] >= 0 && rules[static_cast<size_t>(si - first)].inputs[i] == BandRole::WHOLE)
                whole.insert(s.inputs[i]);
    }
    for (const auto& [id, r] : live) p.l2_bytes += r * row_bytes(m.tensors[static_cast<size_t>(id)]);
    for (int id : whole) p.l2_bytes += m.tensors[static_cast<size_t>(id)].device_bytes();
    return p;
}

Status check_split_fits(const CompiledModel& m, const SplitPlan& p, const device::DeviceSpec& spec) {
    if (p.l2_bytes <= spec.l2_bytes()) return {};
    return make_error(StatusCode::INVALID_ARGUMENT,
                      "{}: split region {} in bands of {} rows keeps {} bytes live in L2; '{}' has {} (fewer rows or "
                      "fewer steps)",
                      m.source, split_label(m, p.first, p.last), p.rows, p.l2_bytes, spec.name, spec.l2_bytes());
}

void apply_band(const BandLaunch& l, device::KernelLaunch& launch) {
    auto bands = std::make_shared<device::LaunchBands>();
    for (size_t i = 0; i < l.inputs.size() && i < launch.inputs.size(); ++i) {
        bands->inputs.push_back(l.inputs[i].band);
        if (l.inputs[i].band.banded()) launch.inputs[i].dims[2] = l.inputs[i].rows;
    }
    for (size_t i = 0; i < l.outputs.size() && i < launch.outputs.size(); ++i) {
        bands->outputs.push_back(l.outputs[i].band);
        if (l.outputs[i].band.banded()) launch.outputs[i].dims[2] = l.outputs[i].rows;
    }
    launch.bands = std::move(bands);
    launch.l2_inputs = l.l2_inputs;
    launch.l2_outputs = l.l2_outputs;
    if (l.pads) {
        launch.attrs.set("auto_pad", std::string("NOTSET"));
        launch.attrs.set("pads", *l.pads);
    }
}

device::KernelLaunch band_cost_launch(const CompiledModel& m, const SplitRegion& r, const SplitPlan& p, size_t i) {
    const BandLaunch& b = p.launches[i];
    const auto* weights = static_cast<const std::byte*>(m.weights.data());
    device::KernelLaunch launch = step_cost_launch(
        m.tensors, m.steps[static_cast<size_t>(b.step)], [&](int id) -> const void* {
            const CompiledTensor& t = m.tensors[static_cast<size_t>(id)];
            return t.storage == Storage::WEIGHTS && t.offset >= 0 ? weights + t.offset : nullptr;
        });
    apply_band(b, launch);
    launch.tiling = i < r.tilings.size() ? r.tilings[i] : device::Tiling{};
    return launch;
}

Status apply_splits(CompiledModel& m, const std::vector<SplitChoice>& choices, const device::DeviceSpec& spec,
                    const TilingSource* tiling_source) {
    if (choices.empty()) return {};
    if (m.mode != ExecMode::SINK)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: split regions need a sink model (static shapes)",
                          m.source);
    auto find = [&](const std::string& name, size_t from) -> int {
        for (size_t i = from; i < m.steps.size(); ++i)
            if (m.steps[i].name == name) return static_cast<int>(i);
        return -1;
    };
    std::vector<SplitRegion> regions;
    for (const SplitChoice& c : choices) {
        const int first = find(c.first, 0);
        if (first < 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: split '{}' .. '{}': no step '{}'", m.source, c.first,
                              c.last, c.first);
        const int last = find(c.last, static_cast<size_t>(first));
        if (last < 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: split '{}' .. '{}': no step '{}' at or after '{}'",
                              m.source, c.first, c.last, c.last, c.first);
        SplitRegion r;
        r.first = first, r.last = last, r.rows = c.rows;
        regions.push_back(r);
    }
    std::sort(regions.begin(), regions.end(),
              [](const SplitRegion& a, const SplitRegion& b) { return a.first < b.first; });
    for (size_t i = 1; i < regions.size(); ++i)
        if (regions[i].first <= regions[i - 1].last)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: split regions {} and {} overlap", m.source,
                              split_label(m, regions[i - 1].first, regions[i - 1].last),
                              split_label(m, regions[i].first, regions[i].last));
    const uint64_t spec_hash = spec.hash();
    for (SplitRegion& r : regions) {
        LOOM_ASSIGN_OR_RETURN(SplitPlan p, plan_split(m, r.first, r.last, r.rows));
        LOOM_TRY(check_split_fits(m, p, spec));
        std::vector<double> cost_ns(static_cast<size_t>(r.last - r.first + 1), 0.0);
        for (size_t i = 0; i < p.launches.size(); ++i) {
            const BandLaunch& b = p.launches[i];
            const CompiledStep& s = m.steps[static_cast<size_t>(b.step)];
            const device::KernelDef* k = device::find_kernel(s.kernel);
            if (!k)
                return make_error(StatusCode::INTERNAL, "step '{}': kernel '{}' is not registered", s.name, s.kernel);
            device::KernelLaunch launch = band_cost_launch(m, r, p, i);
            bool from_source = false;
            if (tiling_source && k->work) {
                LOOM_ASSIGN_OR_RETURN(device::KernelWork w, device::kernel_launch_work(*k, launch, spec));
                if (w.kind != device::TilingKind::NONE) {
                    std::optional<device::Tiling> t = tiling_source->tiling_for(step_key(k->name, launch, spec_hash));
                    if (t && !std::holds_alternative<std::monostate>(*t)) launch.tiling = *t, from_source = true;
                }
            }
            if (const auto* v = std::get_if<device::VectorSchedule>(&launch.tiling);
                v && (v->fuse_input || v->fuse_output))
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "{}: step '{}' band {}: a band launch cannot fuse with its neighbours in UB",
                                  m.source, s.name, b.band);
            auto cost = device::kernel_launch_cost(*k, launch, spec);
            if (!cost.ok())
                return cost.status().with_context(fmt::format(
                    "{}: step '{}' ({}) band {} of split region {}{}", m.source, s.name, s.op, b.band,
                    split_label(m, r.first, r.last), from_source ? ": the tiling from the tiling source" : ""));
            r.tilings.push_back(cost->tiling);
            cost_ns[static_cast<size_t>(b.step - r.first)] += cost->total / spec.aicore_clock_ghz;
        }
        for (int si = r.first; si <= r.last; ++si)
            m.steps[static_cast<size_t>(si)].cost_ns = cost_ns[static_cast<size_t>(si - r.first)];
    }
    m.splits = std::move(regions);
    // Band by band, a region's tensors are all live at once: the arena is planned again.
    return plan_arena(m);
}

}  // namespace loom::compiler
