#include "tuner/subgraph.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "compiler/split.hpp"
#include "device/kernel.hpp"

namespace loom::tuner {

namespace {

using Clock = std::chrono::steady_clock;
using compiler::CompiledModel;

// Launch costs (the tilings are fixed for one search): interior bands repeat, and a band launch
// of a step is decided by its bands' rows, its pads and its marks.
class CostMemo {
public:
    // The cost of band launch `i` of plan `p` (of region `r` of `m`).
    Result<double> band(const CompiledModel& m, const compiler::SplitRegion& r, const compiler::SplitPlan& p,
                        size_t i) {
        const compiler::BandLaunch& b = p.launches[i];
        std::vector<int64_t> key{b.step, b.l2_inputs, b.l2_outputs ? 1 : 0};
        for (const compiler::TensorBand& t : b.inputs) key.push_back(t.band.banded() ? t.rows : -1);
        for (const compiler::TensorBand& t : b.outputs) key.push_back(t.rows);
        if (b.pads) key.insert(key.end(), b.pads->begin(), b.pads->end());
        if (const auto it = bands_.find(key); it != bands_.end()) return it->second;
        const compiler::CompiledStep& s = m.steps[static_cast<size_t>(b.step)];
        const device::KernelDef* k = device::find_kernel(s.kernel);
        if (!k) return make_error(StatusCode::NOT_FOUND, "{}: no kernel '{}'", m.source, s.kernel);
        LOOM_ASSIGN_OR_RETURN(double ns, cost(*k, compiler::band_cost_launch(m, r, p, i)));
        bands_.emplace(std::move(key), ns);
        return ns;
    }

    CostMemo(const device::DeviceSpec& spec, const compiler::TilingSource* tilings)
        : spec_(spec), spec_hash_(spec.hash()), tilings_(tilings) {}

    // The cost in ns of `launch` of `k`, its tiling from the source when it has one.
    Result<double> cost(const device::KernelDef& k, device::KernelLaunch launch) {
        const compiler::StepKey key = compiler::step_key(k.name, launch, spec_hash_);
        std::string text = key.text();
        if (const auto it = memo_.find(text); it != memo_.end()) return it->second;
        if (tilings_) {
            std::optional<device::Tiling> t = tilings_->tiling_for(key);
            if (t) launch.tiling = *t;
        }
        LOOM_ASSIGN_OR_RETURN(device::CycleBreakdown cb, device::kernel_launch_cost(k, launch, spec_));
        const double ns = cb.total / spec_.aicore_clock_ghz;
        memo_.emplace(std::move(text), ns);
        return ns;
    }

private:
    const device::DeviceSpec& spec_;
    const uint64_t spec_hash_;
    const compiler::TilingSource* tilings_;
    std::map<std::string, double> memo_;
    std::map<std::vector<int64_t>, double> bands_;
};

// The largest working set of one step of [first, last) run whole, its banded inputs and output
// together (the steps whose outputs the region keeps in L2).
int64_t whole_working_set(const CompiledModel& m, const std::vector<compiler::SplitRule>& rules, int first, int last) {
    int64_t most = 0;
    for (int si = first; si < last; ++si) {
        const compiler::CompiledStep& s = m.steps[static_cast<size_t>(si)];
        const compiler::SplitRule& r = rules[static_cast<size_t>(si)];
        int64_t bytes = m.tensors[static_cast<size_t>(s.outputs[0])].device_bytes();
        for (size_t i = 0; i < s.inputs.size(); ++i)
            if (r.inputs[i] != compiler::BandRole::WHOLE && s.inputs[i] >= 0)
                bytes += m.tensors[static_cast<size_t>(s.inputs[i])].device_bytes();
        most = std::max(most, bytes);
    }
    return most;
}

Result<RegionReport> price(const CompiledModel& m, int first, int last, int64_t rows, const device::DeviceSpec& spec,
                           CostMemo& memo) {
    LOOM_ASSIGN_OR_RETURN(compiler::SplitPlan p, compiler::plan_split(m, first, last, rows));
    LOOM_TRY(compiler::check_split_fits(m, p, spec));
    RegionReport r;
    r.choice = {m.steps[static_cast<size_t>(first)].name, m.steps[static_cast<size_t>(last)].name, rows};
    r.first = first, r.last = last;
    r.bands = p.bands;
    r.launches = static_cast<int64_t>(p.launches.size());
    r.l2_bytes = p.l2_bytes;
    compiler::SplitRegion region;  // no tilings: each launch's from the memo's source or the default
    region.first = first, region.last = last, region.rows = rows;
    for (size_t i = 0; i < p.launches.size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(double ns, memo.band(m, region, p, i));
        r.split_ns += ns + spec.launch_sink_task_ns;
    }
    for (int si = first; si <= last; ++si)
        r.whole_ns += m.steps[static_cast<size_t>(si)].cost_ns + spec.launch_sink_task_ns;
    return r;
}

}  // namespace

double model_kernels_ns(const CompiledModel& m, const device::DeviceSpec& spec) {
    double ns = 0;
    int64_t launches = 0;
    for (const compiler::CompiledStep& s : m.steps) {
        ns += s.cost_ns;
        if (!s.alias && s.placement == compiler::Placement::DEVICE) ++launches;
    }
    // A region's steps launch once per band they have rows in.
    for (const compiler::SplitRegion& r : m.splits) {
        launches += static_cast<int64_t>(r.tilings.size());
        for (int si = r.first; si <= r.last; ++si) --launches;
    }
    return ns + static_cast<double>(launches) * spec.launch_sink_task_ns;
}

Result<SplitSearchReport> choose_splits(const CompiledModel& m, const device::DeviceSpec& spec,
                                        const SplitSearchOptions& options) {
    const auto t0 = Clock::now();
    if (m.mode != compiler::ExecMode::SINK || !m.splits.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: the split search takes a sink model without splits",
                          m.source);
    const int n = static_cast<int>(m.steps.size());
    CostMemo memo(spec, options.tilings);
    SplitSearchReport report;
    // Which steps can run band by band at all.
    std::vector<compiler::SplitRule> rules(m.steps.size());
    std::vector<bool> can(m.steps.size(), false);
    for (int si = 0; si < n; ++si) {
        const compiler::CompiledStep& s = m.steps[static_cast<size_t>(si)];
        if (s.alias || s.placement != compiler::Placement::DEVICE) continue;
        auto r = compiler::split_rule(m, static_cast<size_t>(si));
        if (!r.ok()) continue;
        rules[static_cast<size_t>(si)] = std::move(*r);
        can[static_cast<size_t>(si)] = true;
    }
    const int64_t l2 = spec.l2_bytes();
    for (int a = 0; a < n;) {
        if (!can[static_cast<size_t>(a)]) {
            ++a;
            continue;
        }
        int b = a;
        while (b + 1 < n && can[static_cast<size_t>(b + 1)]) ++b;
        if (b > a) {
            ++report.chains;
            // best[k + 1]: the cheapest way to run steps a..a+k; from[k + 1]: its last region.
            const size_t len = static_cast<size_t>(b - a + 1);
            std::vector<double> best(len + 1, 0);
            std::vector<std::optional<RegionReport>> from(len + 1);
            for (int j = a; j <= b; ++j) {
                const size_t jj = static_cast<size_t>(j - a) + 1;
                best[jj] = best[jj - 1] + m.steps[static_cast<size_t>(j)].cost_ns + spec.launch_sink_task_ns;
                from[jj].reset();
                const compiler::SplitRule& last = rules[static_cast<size_t>(j)];
                const int64_t height =
                    m.tensors[static_cast<size_t>(m.steps[static_cast<size_t>(j)].outputs[0])].dims[2];
                const int64_t step = std::lcm(last.align, last.scale);
                for (int i = j - 1; i >= a; --i) {
                    // Whole, these steps would keep what they hand on in L2 anyway.
                    const int64_t overflow = whole_working_set(m, rules, i, j);
                    if (overflow <= l2) continue;
                    // One band: does the region hold together at all?
                    if (!compiler::plan_split(m, i, j, height).ok()) continue;
                    bool fits_any = false;
                    for (int64_t rows = step; rows < height; rows += step) {
                        auto r = price(m, i, j, rows, spec, memo);
                        ++report.candidates;
                        if (!r.ok()) break;  // the footprint grows with the rows: none larger fits
                        fits_any = true;
                        r->overflow_bytes = overflow;
                        const double total = best[static_cast<size_t>(i - a)] + r->split_ns;
                        if (total < best[jj]) {
                            best[jj] = total;
                            from[jj] = std::move(*r);
                        }
                    }
                    // A longer region keeps more live: if none of this one's bands fit, none will.
                    if (!fits_any) break;
                }
            }
            std::vector<RegionReport> chosen;
            for (size_t k = len; k > 0;) {
                if (!from[k]) {
                    --k;
                    continue;
                }
                chosen.push_back(*from[k]);
                k = static_cast<size_t>(from[k]->first - a);
            }
            for (auto it = chosen.rbegin(); it != chosen.rend(); ++it) report.regions.push_back(std::move(*it));
        }
        a = b + 1;
    }
    for (const RegionReport& r : report.regions) report.choices.push_back(r.choice);
    report.whole_ns = model_kernels_ns(m, spec);
    report.split_ns = report.whole_ns;
    for (const RegionReport& r : report.regions) report.split_ns += r.split_ns - r.whole_ns;
    report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return report;
}

Result<SubgraphTuneReport> tune_subgraphs(const CompileFn& compile, const compiler::CompileOptions& base,
                                          const device::DeviceSpec& spec, bool op_tuning, const TuneOptions& options) {
    const auto t0 = Clock::now();
    SubgraphTuneReport out;
    out.op_tuning = op_tuning;
    out.spec = spec.name;
    compiler::CompileOptions plain = base;
    plain.splits.clear();
    plain.tiling_source = nullptr;
    LOOM_ASSIGN_OR_RETURN(CompiledModel m0, compile(plain));
    out.model = m0.source;
    out.default_ns = model_kernels_ns(m0, spec);
    LOOM_ASSIGN_OR_RETURN(out.search, choose_splits(m0, spec));
    compiler::CompileOptions split = plain;
    split.splits = out.search.choices;
    if (!op_tuning) {
        out.final_options = split;
        LOOM_ASSIGN_OR_RETURN(CompiledModel m1, compile(split));
        out.final_ns = model_kernels_ns(m1, spec);
        out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        return out;
    }
    // Op tuning of the model whole, then of the model split (band launches key on their L2 marks).
    LOOM_ASSIGN_OR_RETURN(out.op, tune_model(m0, spec, options));
    compiler::CompileOptions op = plain;
    op.tiling_source = out.op.table;
    LOOM_ASSIGN_OR_RETURN(CompiledModel m_op, compile(op));
    out.op_ns = model_kernels_ns(m_op, spec);
    std::vector<compiler::SplitChoice> kept;
    auto table = std::make_shared<compiler::TilingTable>(*out.op.table);
    if (!split.splits.empty()) {
        LOOM_ASSIGN_OR_RETURN(CompiledModel m1, compile(split));
        LOOM_ASSIGN_OR_RETURN(out.split_op, tune_model(m1, spec, options));
        compiler::CompileOptions tuned = split;
        tuned.tiling_source = out.split_op.table;
        LOOM_ASSIGN_OR_RETURN(CompiledModel m2, compile(tuned));
        for (size_t i = 0; i < out.search.regions.size(); ++i) {
            RegionReport& r = out.search.regions[i];
            const compiler::SplitRegion& sr = m2.splits[i];
            for (int si = r.first; si <= r.last; ++si)
                r.op_whole_ns += m_op.steps[static_cast<size_t>(si)].cost_ns + spec.launch_sink_task_ns;
            for (int si = sr.first; si <= sr.last; ++si) r.op_split_ns += m2.steps[static_cast<size_t>(si)].cost_ns;
            r.op_split_ns += static_cast<double>(sr.tilings.size()) * spec.launch_sink_task_ns;
            r.kept = r.op_split_ns < r.op_whole_ns;
            if (r.kept) kept.push_back(r.choice);
        }
        // Both tables: the whole launches of the regions dropped, the band launches of those kept.
        table->merge(*out.split_op.table);
    }
    out.final_options = plain;
    out.final_options.splits = kept;
    out.final_options.tiling_source = table;
    LOOM_ASSIGN_OR_RETURN(CompiledModel final_model, compile(out.final_options));
    out.final_ns = model_kernels_ns(final_model, spec);
    out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return out;
}

nlohmann::json SubgraphTuneReport::to_json() const {
    nlohmann::json regions = nlohmann::json::array();
    for (const RegionReport& r : search.regions) {
        nlohmann::json j = {{"first", r.choice.first},
                            {"last", r.choice.last},
                            {"steps", r.last - r.first + 1},
                            {"rows", r.choice.rows},
                            {"bands", r.bands},
                            {"launches", r.launches},
                            {"l2_bytes", r.l2_bytes},
                            {"overflow_bytes", r.overflow_bytes},
                            {"whole_ms", r.whole_ns / 1e6},
                            {"split_ms", r.split_ns / 1e6}};
        if (op_tuning) {
            j["op_whole_ms"] = r.op_whole_ns / 1e6;
            j["op_split_ms"] = r.op_split_ns / 1e6;
            j["kept"] = r.kept;
        }
        regions.push_back(std::move(j));
    }
    nlohmann::json j = {{"model", model},
                        {"device", spec},
                        {"mode", op_tuning ? "all" : "subgraph"},
                        {"default_ms", default_ns / 1e6},
                        {"final_ms", final_ns / 1e6},
                        {"chains", search.chains},
                        {"candidates", search.candidates},
                        {"search_seconds", search.seconds},
                        {"seconds", seconds},
                        {"regions", regions}};
    if (op_tuning) {
        j["op_ms"] = op_ns / 1e6;
        j["op"] = op.to_json();
        j["split_op"] = split_op.to_json();
    }
    return j;
}

}  // namespace loom::tuner
