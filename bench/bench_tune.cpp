// The tuner's search quality (issue 15): for every distinct launch of a model whose tiling
// space can be costed whole, the exhaustive optimum against the genetic algorithm (Cube) or
// the tree search (Vector) and against random search, each with the same budget of evaluations
// (5% of the space's legal points by default), over several seeds; the optimum is the best of
// every legal point of the device's space (device::cost::*_space().for_each). Reports per launch and in total how many
// come within 3% of the optimum, the evaluations used and the evaluation rate.
//
//   loom_bench_tune MODEL [--shape NAME=1x3xHxW] [--device edge] [--budget 0.05] [--trials N] [--seeds 3]
//                   [--max-points 30000000] [--json]
#include <chrono>
#include <cstdio>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/json.hpp"
#include "compiler/compile.hpp"
#include "compiler/import.hpp"
#include "compiler/tuning.hpp"
#include "device/spec.hpp"
#include "tuner/search.hpp"
#include "tuner/space.hpp"

using namespace loom;

namespace {

struct Args {
    std::string model, device = "edge";
    std::vector<std::string> shapes;
    double budget = 0.05;
    int64_t trials = 0;  // > 0: the budget is at most this many evaluations (the tuner's own cap)
    int seeds = 3;
    int64_t max_points = 30000000;
    bool json = false;
};

Status run(const Args& a) {
    LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(a.device));
    LOOM_ASSIGN_OR_RETURN(compiler::Graph g, compiler::import_model(a.model));
    compiler::CompileOptions o;
    for (const std::string& s : a.shapes) {
        LOOM_ASSIGN_OR_RETURN(auto shape, compiler::parse_shape_option(s));
        o.shapes.push_back(std::move(shape));
    }
    LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel m, compiler::compile_graph(std::move(g), o, spec));
    LOOM_ASSIGN_OR_RETURN(std::vector<compiler::TuningStep> steps, compiler::tuning_steps(m, spec));
    std::set<std::string> seen;
    nlohmann::json rows = nlohmann::json::array();
    int launches = 0, tuned_close = 0, random_close = 0, runs = 0;
    int64_t evaluations = 0, exhaustive_points = 0;
    double search_s = 0, exhaustive_s = 0;
    if (!a.json)
        std::printf("%-14s %-6s %10s %8s %12s %12s %12s %7s %7s\n", "kernel", "kind", "legal", "budget", "optimum",
                    "search", "random", "search", "random");
    for (const compiler::TuningStep& s : steps) {
        if (!seen.insert(s.key.text()).second) continue;
        LOOM_ASSIGN_OR_RETURN(auto tp, tuner::TilingProblem::make(s.work, spec));
        if (tp->pruned() || tp->device_space_size() > static_cast<double>(a.max_points)) continue;
        // The optimum over the device's whole space (every legal point costed), and the number
        // of legal points: the budget is a share of those.
        const auto t0 = std::chrono::steady_clock::now();
        double optimum = std::numeric_limits<double>::infinity();
        int64_t legal = 0;
        auto visit = [&](const auto& t) {
            if (!device::cost::tiling_legal(t, s.work, spec)) return true;
            ++legal;
            optimum = std::min(optimum, device::cost::work_cycles(spec, s.work, t));
            return true;
        };
        if (s.work.kind == device::TilingKind::CUBE) device::cost::cube_space(s.work.cube, spec).for_each(visit);
        else device::cost::vector_space(s.work.vector, spec).for_each(visit);
        exhaustive_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        exhaustive_points += static_cast<int64_t>(tp->device_space_size());
        if (legal < 200) continue;
        ++launches;
        const int64_t size = legal;
        auto budget_of = [&](int64_t n) {
            const int64_t b = std::max<int64_t>(1, static_cast<int64_t>(a.budget * static_cast<double>(n)));
            return a.trials > 0 ? std::min(b, a.trials) : b;
        };
        struct {
            double best_cost;
        } best{optimum};
        const bool cube = tp->kind() == device::TilingKind::CUBE;
        double search_worst = 0, random_worst = 0;
        int close = 0, rclose = 0;
        for (int seed = 1; seed <= a.seeds; ++seed) {
            tuner::SearchOptions so;
            so.seed = static_cast<uint64_t>(seed);
            so.trials = budget_of(size);
            const auto s0 = std::chrono::steady_clock::now();
            const tuner::SearchResult r = cube ? tuner::genetic_search(tp->problem(), so)
                                               : tuner::tree_search(tp->problem(), so);
            search_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
            evaluations += r.evaluations;
            const tuner::SearchResult rr = tuner::random_search(tp->problem(), so);
            const double q = r.best_cost / best.best_cost, rq = rr.best_cost / best.best_cost;
            search_worst = std::max(search_worst, q);
            random_worst = std::max(random_worst, rq);
            close += q <= 1.03;
            rclose += rq <= 1.03;
            ++runs;
        }
        tuned_close += close;
        random_close += rclose;
        rows.push_back({{"kernel", s.kernel->name},
                        {"kind", cube ? "cube" : "vector"},
                        {"legal_points", size},
                        {"budget", budget_of(size)},
                        {"optimum_cycles", best.best_cost},
                        {"search_worst_ratio", search_worst},
                        {"random_worst_ratio", random_worst},
                        {"search_within_3pct", close},
                        {"random_within_3pct", rclose}});
        if (!a.json)
            std::printf("%-14s %-6s %10lld %8lld %12.0f %11.4fx %11.4fx %4d/%-2d %4d/%-2d\n", s.kernel->name,
                        cube ? "cube" : "vector", static_cast<long long>(size), static_cast<long long>(budget_of(size)),
                        best.best_cost, search_worst, random_worst, close, a.seeds, rclose, a.seeds);
    }
    nlohmann::json out = {
        {"model", a.model},
        {"device", spec.name},
        {"budget_share", a.budget},
        {"budget_cap", a.trials},
        {"launches", launches},
        {"runs", runs},
        {"search_within_3pct", tuned_close},
        {"random_within_3pct", random_close},
        {"search_evaluations_per_s", search_s > 0 ? static_cast<double>(evaluations) / search_s : 0},
        {"exhaustive_points_per_s", exhaustive_s > 0 ? static_cast<double>(exhaustive_points) / exhaustive_s : 0},
        {"rows", rows}};
    if (a.json) {
        std::printf("%s\n", dump_json(out, 2).c_str());
    } else {
        std::printf(
            "%s on %s: %d launches enumerable, %d runs: search within 3%% in %d (%.0f%%), random in %d (%.0f%%) "
            "at %.0f%% of each space's legal points%s; %.0f evaluations/s searching, %.0f points/s exhaustive\n",
            a.model.c_str(), spec.name.c_str(), launches, runs, tuned_close, runs ? 100.0 * tuned_close / runs : 0.0,
            random_close, runs ? 100.0 * random_close / runs : 0.0, 100 * a.budget,
            a.trials > 0 ? fmt::format(" (at most {})", a.trials).c_str() : "",
            out["search_evaluations_per_s"].get<double>(), out["exhaustive_points_per_s"].get<double>());
    }
    return {};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"the tuner's search quality against exhaustive and random search", "loom_bench_tune"};
    Args a;
    app.add_option("model", a.model, "model.onnx or model.param")->required();
    app.add_option("--shape", a.shapes, "input shape, NAME=1x3xHxW");
    app.add_option("--device", a.device, "preset or spec file")->capture_default_str();
    app.add_option("--budget", a.budget, "evaluations as a share of each space")->capture_default_str();
    app.add_option("--trials", a.trials, "cap on the budget, evaluations (the tuner's default cap is 20000)");
    app.add_option("--seeds", a.seeds, "runs per launch (seeds 1..N)")->capture_default_str();
    app.add_option("--max-points", a.max_points, "largest device space costed whole (points)")->capture_default_str();
    app.add_flag("--json", a.json, "print JSON");
    CLI11_PARSE(app, argc, argv);
    const Status st = run(a);
    if (!st.ok()) {
        std::fprintf(stderr, "loom_bench_tune: %s\n", st.to_string().c_str());
        return 1;
    }
    return 0;
}
