// Tuning a model (issue 15): the tuned model is never slower than the default and its outputs
// are the untuned model's bit for bit; the same seed gives the same tilings on any thread count;
// the knowledge base makes a second tuning instant and never hands out a stale record; the
// kernel adapters encode every default tiling and decode only legal points; on spaces small
// enough to enumerate, the searches come within 3% of the optimum with a few percent of the
// evaluations.
#include <gtest/gtest.h>

#include <cstring>

#include "common/thread_pool.hpp"
#include "compiler/compile.hpp"
#include "compiler/tuning.hpp"
#include "device/cost.hpp"
#include "executor/executor.hpp"
#include "test_util.hpp"
#include "tuner/kb.hpp"
#include "tuner/space.hpp"
#include "tuner/tune.hpp"

namespace loom::tuner::test_tuner {  // apart from the rest of its unity batch
namespace {

using device::DeviceSpec;
using device::Tiling;
using device::TilingKind;

const DeviceSpec& spec_named(const std::string& name) {
    static std::map<std::string, DeviceSpec> specs;
    auto it = specs.find(name);
    if (it == specs.end()) {
        auto s = device::load_device_spec(name);
        EXPECT_TRUE(s.ok());
        it = specs.emplace(name, *s).first;
    }
    return it->second;
}

// A small restoration-shaped network: convs (Cube), a depthwise conv and a sigmoid gate
// (Vector), a residual add.
compiler::Graph net(int64_t h = 24, int64_t w = 20) {
    test::GraphBuilder b;
    b.input("x", {1, 3, h, w});
    test::add_sr_body(b);
    b.output("y");
    b.g.source = "net";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b.g;
}

compiler::CompiledModel compiled(const DeviceSpec& spec, std::shared_ptr<const compiler::TilingSource> src = nullptr) {
    compiler::CompileOptions o;
    o.tiling_source = std::move(src);
    auto m = compiler::compile_graph(net(), o, spec);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return std::move(*m);
}

std::vector<compiler::HostTensor> run(const compiler::CompiledModel& m, const DeviceSpec& spec, double* sim_ms) {
    auto dev = test::make_device({}, spec);
    auto loaded = executor::LoadedModel::load(*dev, std::make_shared<compiler::CompiledModel>(m));
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    if (!loaded.ok()) return {};
    auto session = executor::Session::create(*loaded);
    EXPECT_TRUE(session.ok());
    executor::RunStats stats;
    const std::vector<compiler::HostTensor> in{test::random_host_f32({1, 3, 24, 20}, 5, 0.0f, 1.0f)};
    auto out = (*session)->run(in, &stats);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    *sim_ms = stats.sim_ms;
    return out.ok() ? *out : std::vector<compiler::HostTensor>{};
}

TEST(Tuner, TheTunedModelIsFasterAndComputesTheSameBytes) {
    for (const char* preset : {"edge", "dc"}) {
        SCOPED_TRACE(preset);
        const DeviceSpec& spec = spec_named(preset);
        const compiler::CompiledModel plain = compiled(spec);
        TuneOptions o;
        o.trials = 400;
        auto r = tune_model(plain, spec, o);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_GT(r->launches.size(), 2u);
        EXPECT_LE(r->tuned_ns, r->default_ns);
        for (const TunedLaunch& l : r->launches) EXPECT_LE(l.tuned_ns, l.default_ns) << l.kernel;
        // Lowering checks every tiling of the table against its launch (an illegal one fails).
        const compiler::CompiledModel tuned = compiled(spec, r->table);
        // Lowering with the table costs every step as the report says.
        double ns = 0;
        for (const compiler::CompiledStep& s : tuned.steps) ns += s.cost_ns;
        EXPECT_NEAR(ns, r->tuned_ns, 1e-6 * r->tuned_ns);
        double plain_ms = 0, tuned_ms = 0;
        const auto a = run(plain, spec, &plain_ms), b = run(tuned, spec, &tuned_ms);
        ASSERT_EQ(a.size(), 1u);
        ASSERT_EQ(b.size(), 1u);
        ASSERT_EQ(a[0].bytes(), b[0].bytes());
        EXPECT_EQ(std::memcmp(a[0].data(), b[0].data(), a[0].bytes()), 0) << "a tiling changed the results";
        EXPECT_LT(tuned_ms, plain_ms);
    }
}

TEST(Tuner, TheSameSeedGivesTheSameTilingsOnOneThreadOrSeveral) {
    const DeviceSpec& spec = spec_named("edge");
    const compiler::CompiledModel m = compiled(spec);
    ThreadPool one(1), three(3);
    std::vector<TuneReport> reports;
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &one, &three}) {
        TuneOptions o;
        o.seed = 9;
        o.trials = 300;
        o.pool = pool;
        auto r = tune_model(m, spec, o);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        reports.push_back(std::move(*r));
    }
    for (const TuneReport& r : reports) {
        ASSERT_EQ(r.launches.size(), reports[0].launches.size());
        for (size_t i = 0; i < r.launches.size(); ++i) {
            EXPECT_EQ(r.launches[i].tiling, reports[0].launches[i].tiling) << r.launches[i].kernel;
            EXPECT_EQ(r.launches[i].trials, reports[0].launches[i].trials);
        }
        EXPECT_EQ(r.tuned_ns, reports[0].tuned_ns);
        EXPECT_EQ(r.table->content_hash(), reports[0].table->content_hash());
    }
}

TEST(Tuner, TheKnowledgeBaseMakesTheSecondTuningInstantAndFeedsCompile) {
    const DeviceSpec& spec = spec_named("edge");
    const compiler::CompiledModel m = compiled(spec);
    test::TempDir dir;
    auto kb = KnowledgeBase::open(dir.file("t.kb"));
    ASSERT_TRUE(kb.ok()) << kb.status().to_string();
    TuneOptions o;
    o.trials = 300;
    o.kb = &*kb;
    auto first = tune_model(m, spec, o);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(first->kb_hits, 0);
    EXPECT_GT(first->trials, 0);
    auto second = tune_model(m, spec, o);
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    EXPECT_EQ(second->kb_hits, static_cast<int64_t>(second->launches.size()));
    EXPECT_EQ(second->trials, 0);
    EXPECT_EQ(second->tuned_ns, first->tuned_ns);
    for (size_t i = 0; i < first->launches.size(); ++i)
        EXPECT_EQ(second->launches[i].tiling, first->launches[i].tiling);
    // compile --kb: the knowledge base as a tiling source gives the tuned model.
    auto src = KbTilingSource::load(*kb, spec);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    EXPECT_EQ((*src)->size(), first->launches.size());
    const compiler::CompiledModel from_kb = compiled(spec, *src);
    double ns = 0;
    for (const compiler::CompiledStep& s : from_kb.steps) ns += s.cost_ns;
    EXPECT_NEAR(ns, first->tuned_ns, 1e-6 * ns);
}

TEST(Tuner, StaleRecordsAreReportedAndNeverUsed) {
    const DeviceSpec& spec = spec_named("edge");
    const compiler::CompiledModel m = compiled(spec);
    test::TempDir dir;
    auto kb = KnowledgeBase::open(dir.file("t.kb"));
    ASSERT_TRUE(kb.ok());
    auto steps = compiler::tuning_steps(m, spec);
    ASSERT_TRUE(steps.ok());
    // A record for the first launch from another cost-model version, with a cost that would
    // win: it must be counted as stale and ignored.
    const compiler::TuningStep& s = steps->front();
    KbRecord r;
    r.key = kb_key(s.key);
    r.key.cost_model_version = device::cost::kCostModelVersion + 1;
    r.spec_name = spec.name;
    r.tiling = device::cost::default_tiling(s.work, spec);
    r.cost_ns = 1e-3;
    r.default_cost_ns = 1;
    r.method = "ga";
    ASSERT_TRUE(kb->put(r).ok());
    auto src = KbTilingSource::load(*kb, spec);
    ASSERT_TRUE(src.ok());
    EXPECT_FALSE((*src)->tiling_for(s.key).has_value()) << "a stale record reached lowering";
    TuneOptions o;
    o.trials = 200;
    o.kb = &*kb;
    auto t = tune_model(m, spec, o);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->kb_hits, 0);
    EXPECT_GE(t->kb_stale, 1);
    EXPECT_EQ(t->launches.front().stale, 1);
    EXPECT_NE(t->launches.front().source, "kb");
    EXPECT_GT(t->launches.front().tuned_ns, 1.0) << "the stale record's cost was taken";
}

TEST(TunerSpace, EveryDefaultTilingIsAPointAndEveryLegalPointDecodesToALegalTiling) {
    for (const char* preset : {"edge", "dc"}) {
        const DeviceSpec& spec = spec_named(preset);
        auto steps = compiler::tuning_steps(compiled(spec), spec);
        ASSERT_TRUE(steps.ok());
        for (const compiler::TuningStep& s : *steps) {
            auto tp = TilingProblem::make(s.work, spec);
            ASSERT_TRUE(tp.ok());
            const Tiling def = device::cost::default_tiling(s.work, spec);
            const Point p = (*tp)->encode(def);
            ASSERT_FALSE(p.empty()) << s.kernel->name << " default not encodable";
            EXPECT_TRUE((*tp)->problem().legal(p));
            EXPECT_EQ((*tp)->problem().cost(p), device::cost::work_cycles(spec, s.work, def));
            Rng rng(3);
            int legal = 0;
            for (int i = 0; i < 2000; ++i) {
                Point x(p.size());
                for (size_t d = 0; d < x.size(); ++d) x[d] = rng.below((*tp)->problem().radix[d]);
                if (!(*tp)->problem().legal(x)) continue;
                ++legal;
                const Tiling t = (*tp)->decode(x);
                EXPECT_TRUE(device::cost::tiling_legal(t, s.work, spec));
                EXPECT_EQ((*tp)->encode(t), x);
            }
            EXPECT_GT(legal, 0) << s.kernel->name;
        }
    }
}

TEST(TunerSpace, PrunedRangesKeepTheEndsTheLadderAndWholeRounds) {
    EXPECT_EQ(pruned_multiples(5, 1, 5, 2), (std::vector<int64_t>{1, 2, 3, 4, 5}));
    const std::vector<int64_t> p = pruned_multiples(10000, 1, 10000, 8);
    EXPECT_EQ(p.front(), 1);
    EXPECT_EQ(p.back(), 10000);
    EXPECT_LT(p.size(), 300u);
    for (int64_t c = 1; c <= 8; ++c) EXPECT_TRUE(std::binary_search(p.begin(), p.end(), (10000 + c - 1) / c)) << c;
    for (size_t i = 1; i < p.size(); ++i)
        EXPECT_LE(static_cast<double>(p[i]), 1.19 * static_cast<double>(p[i - 1]) + 1.5);
}

// Search quality on launches whose whole space can be costed: the best of a search with 5% of
// the space's evaluations against the exhaustive optimum.
TEST(TunerSearchQuality, WithinThreePercentOfTheExhaustiveOptimumWithFivePercentOfTheEvaluations) {
    const DeviceSpec& spec = spec_named("edge");
    auto steps = compiler::tuning_steps(compiled(spec), spec);
    ASSERT_TRUE(steps.ok());
    int ops = 0, close = 0;
    for (const compiler::TuningStep& s : *steps) {
        auto tp = TilingProblem::make(s.work, spec);
        ASSERT_TRUE(tp.ok());
        if ((*tp)->pruned() || (*tp)->size() > 400000 || (*tp)->size() < 2000) continue;
        auto best = exhaustive_search((*tp)->problem(), {});
        ASSERT_TRUE(best.ok());
        SearchOptions o;
        o.seed = 5;
        o.trials = (*tp)->size() / 20;
        const bool cube = s.work.kind == TilingKind::CUBE;
        const SearchResult r = cube ? genetic_search((*tp)->problem(), o) : tree_search((*tp)->problem(), o);
        EXPECT_LE(r.evaluations, o.trials);
        ++ops;
        if (r.best_cost <= 1.03 * best->best_cost) ++close;
        else
            ADD_FAILURE() << s.kernel->name << (cube ? " cube" : " vector") << " space " << (*tp)->size() << " evals "
                          << r.evaluations << " best " << r.best_cost << " optimum " << best->best_cost;
    }
    ASSERT_GT(ops, 0);
    EXPECT_GE(close * 10, ops * 9) << close << " of " << ops << " within 3%";
}

}  // namespace
}  // namespace loom::tuner::test_tuner
