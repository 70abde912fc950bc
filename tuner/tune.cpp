#include "tuner/tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>

#include "common/hash.hpp"
#include "common/thread_pool.hpp"
#include "common/version.hpp"
#include "compiler/model_file.hpp"
#include "tuner/space.hpp"

namespace loom::tuner {

namespace {

using Clock = std::chrono::steady_clock;

// Peak useful flops per cycle of the whole chip's Cube units for `w` (fp16 rate; f32 half;
// int8 cube_int8_rate times).
double cube_peak_flops_per_cycle(const device::DeviceSpec& s, const device::cost::CubeWork& w) {
    const double f = static_cast<double>(s.cube_fractal);
    double rate = 2.0 * f * f * f * static_cast<double>(s.aicore_count);
    if (w.int8) rate *= static_cast<double>(s.cube_int8_rate);
    else if (w.dtype == device::DType::F32) rate /= 2;
    return rate;
}

int64_t automatic_trials(int64_t space) { return std::clamp<int64_t>(space / 20, 500, 20000); }

// One distinct launch being tuned: its steps, its problem, its outcome.
struct Job {
    const compiler::TuningStep* first = nullptr;
    std::vector<size_t> steps;  // indices into the TuningStep list
    TunedLaunch out;
    KbKey kb;
    bool kb_ok = false;  // the key fits the knowledge base's limits
    bool searched = false;
    std::vector<device::Tiling> neighbours;  // knowledge-base tilings of the nearest shapes
    uint64_t seed = 0;
};

std::string step_name(const compiler::CompiledModel& m, size_t step) { return m.steps[step].name; }

}  // namespace

KbKey kb_key(const compiler::StepKey& key) {
    KbKey k;
    k.kernel = key.kernel;
    auto types = [](const std::vector<compiler::TensorKey>& ts) {
        std::string s;
        for (size_t i = 0; i < ts.size(); ++i) s += (i ? "," : "") + std::string(device::dtype_name(ts[i].dtype));
        return s;
    };
    k.signature = types(key.inputs) + "->" + types(key.outputs);
    for (const compiler::TensorKey& t : key.inputs) k.dims.push_back(t.dims);
    for (const compiler::TensorKey& t : key.outputs) k.dims.push_back(t.dims);
    k.attrs = key.attrs;
    // Operands kept in L2 (a split region's band launch), after every attribute in sort order.
    if (key.l2_inputs != 0 || key.l2_outputs)
        k.attrs += fmt::format("{}~l2=in{},out{}", k.attrs.empty() ? "" : ";", key.l2_inputs, key.l2_outputs ? 1 : 0);
    k.spec_hash = key.spec_hash;
    k.cost_model_version = key.cost_model_version;
    return k;
}

nlohmann::json TuneReport::to_json() const {
    nlohmann::json launches_json = nlohmann::json::array();
    for (const TunedLaunch& l : launches) {
        launches_json.push_back({{"kernel", l.kernel},
                                 {"steps", l.steps},
                                 {"key", l.key.text()},
                                 {"key_hash", fmt::format("{:016x}", l.key.hash())},
                                 {"kind", device::tiling_kind_name(l.kind)},
                                 {"tiling", compiler::tiling_json(l.tiling)},
                                 {"default_ns", l.default_ns},
                                 {"tuned_ns", l.tuned_ns},
                                 {"gain", l.tuned_ns > 0 ? l.default_ns / l.tuned_ns : 0.0},
                                 {"cube_roofline", l.roofline},
                                 {"source", l.source},
                                 {"trials", l.trials},
                                 {"space", l.space},
                                 {"stale_records", l.stale},
                                 {"seconds", l.seconds}});
    }
    return {{"model", model},
            {"device", spec},
            {"default_ms", default_ns / 1e6},
            {"tuned_ms", tuned_ns / 1e6},
            {"speedup", speedup()},
            {"launches", launches_json},
            {"kb_hits", kb_hits},
            {"kb_stale", kb_stale},
            {"searched", searched},
            {"trials", trials},
            {"seconds", seconds},
            {"evaluations_per_s", evaluations_per_s}};
}

Result<TuneReport> tune_model(const compiler::CompiledModel& m, const device::DeviceSpec& spec, const TuneOptions& o) {
    const auto t0 = Clock::now();
    LOOM_ASSIGN_OR_RETURN(std::vector<compiler::TuningStep> steps, compiler::tuning_steps(m, spec));
    TuneReport report;
    report.model = m.source;
    report.spec = spec.name;
    const double ghz = spec.aicore_clock_ghz;

    // Distinct launches, in the order of their first step.
    std::vector<Job> jobs;
    std::map<std::string, size_t> by_key;
    for (size_t i = 0; i < steps.size(); ++i) {
        const std::string text = steps[i].key.text();
        auto [it, fresh] = by_key.emplace(text, jobs.size());
        if (fresh) {
            Job j;
            j.first = &steps[i];
            j.out.key = steps[i].key;
            j.out.kernel = steps[i].kernel->name;
            j.out.kind = steps[i].work.kind;
            j.kb = kb_key(steps[i].key);
            j.kb_ok = j.kb.check().ok();
            j.seed = Hasher().u64(o.seed).u64(steps[i].key.hash()).digest();
            jobs.push_back(std::move(j));
        }
        Job& j = jobs[it->second];
        j.steps.push_back(i);
        j.out.steps.push_back(step_name(m, steps[i].step));
    }

    // The knowledge base first (on this thread: a KnowledgeBase is used by one thread at a time).
    for (Job& j : jobs) {
        const device::Tiling def = device::cost::default_tiling(j.first->work, spec);
        j.out.default_ns = device::cost::work_cycles(spec, j.first->work, def) / ghz;
        j.out.tiling = def;
        j.out.tuned_ns = j.out.default_ns;
        j.out.source = "default";
        if (!o.kb || !j.kb_ok) continue;
        LOOM_ASSIGN_OR_RETURN(KbLookup found, o.kb->lookup(j.kb));
        j.out.stale = found.stale;
        report.kb_stale += found.stale;
        if (found.record) {
            const double cycles = device::cost::work_cycles(spec, j.first->work, found.record->tiling);
            // A record the cost model now refuses or prices differently is not trusted.
            if (std::isfinite(cycles)) {
                ++report.kb_hits;
                j.out.tiling = found.record->tiling;
                j.out.tuned_ns = cycles / ghz;
                j.out.source = "kb";
                if (!o.search_known) continue;
            }
        }
        LOOM_ASSIGN_OR_RETURN(std::vector<KbNeighbour> near, o.kb->nearest(j.kb, 4));
        for (const KbNeighbour& n : near) j.neighbours.push_back(n.record.tiling);
    }

    // Searches, in parallel over launches (each search on one thread: a search's result does not
    // depend on the thread count).
    std::vector<size_t> todo;
    for (size_t i = 0; i < jobs.size(); ++i)
        if (jobs[i].out.source != "kb" || o.search_known) todo.push_back(i);
    const double share_s = o.budget_s > 0 && !todo.empty()
                               ? o.budget_s * static_cast<double>(o.pool ? std::max<unsigned>(o.pool->size(), 1) : 1) /
                                     static_cast<double>(todo.size())
                               : 0;
    std::vector<Status> errors(todo.size());
    auto search_one = [&](size_t t) {
        Job& j = jobs[todo[t]];
        const auto s0 = Clock::now();
        auto made = TilingProblem::make(j.first->work, spec);
        if (!made.ok()) {
            errors[t] = made.status().with_context(j.out.steps.front());
            return;
        }
        TilingProblem& tp = **made;
        for (const device::Tiling& n : j.neighbours) tp.add_seed(n);
        if (j.out.source == "kb") tp.add_seed(j.out.tiling);
        SearchOptions so;
        so.seed = j.seed;
        so.trials = o.trials > 0 ? o.trials : automatic_trials(tp.size());
        so.budget_s = share_s;
        const bool cube = tp.kind() == device::TilingKind::CUBE;
        const SearchResult r = cube ? genetic_search(tp.problem(), so) : tree_search(tp.problem(), so);
        j.out.trials = r.evaluations;
        j.out.space = tp.device_space_size();
        j.searched = true;
        if (!r.best.empty() && r.best_cost / ghz < j.out.tuned_ns) {
            j.out.tiling = tp.decode(r.best);
            j.out.tuned_ns = r.best_cost / ghz;
            j.out.source = r.complete && !tp.pruned() ? "exhaustive" : cube ? "ga" : "mcts";
        }
        j.out.seconds = std::chrono::duration<double>(Clock::now() - s0).count();
    };
    size_t done = 0;
    if (o.pool && todo.size() > 1) {
        // Chunks of the pool's size, so progress is reported as they finish.
        const size_t chunk = std::max<size_t>(o.pool->size(), 1);
        for (size_t b = 0; b < todo.size(); b += chunk) {
            const size_t e = std::min(todo.size(), b + chunk);
            o.pool->parallel_for(e - b, 1, [&](size_t x, size_t y) {
                for (size_t t = x; t < y; ++t) search_one(b + t);
            });
            done = e;
            if (o.progress) o.progress(done, todo.size());
        }
    } else {
        for (size_t t = 0; t < todo.size(); ++t) {
            search_one(t);
            if (o.progress) o.progress(t + 1, todo.size());
        }
    }
    for (const Status& s : errors) LOOM_TRY(s);

    // The knowledge base learns what was found (only better records replace, in one transaction).
    if (o.kb) {
        std::vector<KbRecord> records;
        for (const Job& j : jobs) {
            if (!j.searched || !j.kb_ok) continue;
            KbRecord r;
            r.key = j.kb;
            r.spec_name = spec.name;
            r.tiling = j.out.tiling;
            r.cost_ns = j.out.tuned_ns;
            r.default_cost_ns = j.out.default_ns;
            r.method = j.out.source == "default" || j.out.source == "kb" ? "default" : j.out.source;
            r.trials = j.out.trials;
            r.seconds = j.out.seconds;
            r.seed = j.seed;
            r.loom_version = kVersion;
            if (r.check().ok()) records.push_back(std::move(r));
        }
        if (!records.empty()) LOOM_TRY(o.kb->put(records).status());
    }

    // The table and the totals.
    report.table = std::make_shared<compiler::TilingTable>();
    // Per step: the tuned time of its launch, or the sum over its band launches (split regions).
    std::vector<double> step_tuned(m.steps.size(), -1);
    for (Job& j : jobs) {
        if (j.first->work.kind == device::TilingKind::CUBE && j.out.tuned_ns > 0)
            j.out.roofline = j.first->work.cube.batch > 0
                                 ? 2.0 * static_cast<double>(j.first->work.cube.batch) *
                                       static_cast<double>(j.first->work.cube.m) *
                                       static_cast<double>(j.first->work.cube.n) *
                                       static_cast<double>(j.first->work.cube.k) /
                                       (j.out.tuned_ns * ghz * cube_peak_flops_per_cycle(spec, j.first->work.cube))
                                 : 0;
        if (j.out.source != "default") report.table->set(j.out.key, j.out.tiling);
        for (size_t i : j.steps) {
            double& t = step_tuned[steps[i].step];
            t = (t < 0 ? 0 : t) + j.out.tuned_ns;
        }
        if (j.searched) ++report.searched;
        report.trials += j.out.trials;
        report.launches.push_back(j.out);
    }
    double search_s = 0;
    for (const Job& j : jobs) search_s += j.out.seconds;
    for (size_t s = 0; s < m.steps.size(); ++s) {
        report.default_ns += m.steps[s].cost_ns;
        report.tuned_ns += step_tuned[s] >= 0 ? step_tuned[s] : m.steps[s].cost_ns;
    }
    report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    report.evaluations_per_s = search_s > 0 ? static_cast<double>(report.trials) / search_s : 0;
    return report;
}

Result<std::shared_ptr<KbTilingSource>> KbTilingSource::load(KnowledgeBase& kb, const device::DeviceSpec& spec) {
    LOOM_ASSIGN_OR_RETURN(std::vector<KbRecord> records, kb.list());
    auto src = std::make_shared<KbTilingSource>();
    src->spec_hash_ = spec.hash();
    for (const KbRecord& r : records) {
        if (r.key.spec_hash != spec.hash() || r.key.cost_model_version != device::cost::kCostModelVersion) continue;
        src->by_kb_key_.emplace(r.key.text(), r.tiling);
    }
    src->size_ = src->by_kb_key_.size();
    Hasher h;
    for (const auto& [key, tiling] : src->by_kb_key_) h.str(key).u64(compiler::tiling_hash(tiling));
    src->hash_ = h.digest();
    return src;
}

std::optional<device::Tiling> KbTilingSource::tiling_for(const compiler::StepKey& key) const {
    const auto it = by_kb_key_.find(kb_key(key).text());
    if (it == by_kb_key_.end()) return std::nullopt;
    return it->second;
}

}  // namespace loom::tuner
