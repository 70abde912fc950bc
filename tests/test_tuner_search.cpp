// The tuner's search strategies on spaces with a known optimum: they find it (or come within a
// stated distance) with a small share of the space costed, never cost an illegal point, keep
// to their budgets, and give the same result for a seed whatever the thread count.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "common/thread_pool.hpp"
#include "tuner/search.hpp"

namespace loom::tuner::test_tuner_search {  // apart from the rest of its unity batch
namespace {

// A rugged bowl over 6 dimensions of 16 choices (16.7 million points): the optimum is at
// `target`, where the cost is 100; each dimension adds a quadratic term, and a ripple makes
// neighbours of the optimum worse than a pure bowl would. Points whose first two choices sum
// past 24 are illegal (as a tiling whose buffers overflow).
struct Bowl {
    Point target{3, 11, 7, 0, 15, 9};
    std::atomic<int64_t> illegal_costed{0};

    Problem problem() {
        Problem p;
        p.radix = std::vector<int32_t>(6, 16);
        p.legal = [](const Point& x) { return x[0] + x[1] <= 24; };
        p.cost = [this](const Point& x) {
            if (x[0] + x[1] > 24) illegal_costed.fetch_add(1);
            double c = 100;
            for (size_t d = 0; d < x.size(); ++d) {
                const double e = static_cast<double>(x[d] - target[d]);
                c += (1.0 + static_cast<double>(d)) * e * e + (e != 0 ? 3.0 * std::abs(std::sin(e)) : 0.0);
            }
            return c;
        };
        p.feasible = [](const Point& x, size_t depth) { return depth < 2 || x[0] + x[1] <= 24; };
        return p;
    }
};

TEST(TunerSearch, GeneticFindsTheOptimumOfALargeSpaceCostingUnderOnePerMille) {
    Bowl b;
    SearchOptions o;
    o.seed = 7;
    o.trials = 4000;  // 0.024% of the space
    const SearchResult r = genetic_search(b.problem(), o);
    EXPECT_EQ(r.best, b.target);
    EXPECT_DOUBLE_EQ(r.best_cost, 100);
    EXPECT_LE(r.evaluations, o.trials);
    EXPECT_EQ(b.illegal_costed.load(), 0);
    EXPECT_FALSE(r.complete);
}

TEST(TunerSearch, TreeSearchComesWithinThreePercentOfTheOptimum) {
    Bowl b;
    SearchOptions o;
    o.seed = 3;
    o.trials = 4000;
    const SearchResult r = tree_search(b.problem(), o);
    EXPECT_LE(r.best_cost, 103) << r.evaluations << " evaluations, " << r.generations << " batches";
    EXPECT_LE(r.evaluations, o.trials);
    EXPECT_EQ(b.illegal_costed.load(), 0);
}

TEST(TunerSearch, BothBeatRandomSearchAtTheSameBudget) {
    Bowl b;
    SearchOptions o;
    o.seed = 11;
    o.trials = 1500;
    const double random = random_search(b.problem(), o).best_cost;
    EXPECT_LT(genetic_search(b.problem(), o).best_cost, random);
    EXPECT_LT(tree_search(b.problem(), o).best_cost, random);
}

TEST(TunerSearch, ASeedAtTheOptimumIsKept) {
    Bowl b;
    Problem p = b.problem();
    p.seeds = {b.target};
    SearchOptions o;
    o.trials = 50;
    EXPECT_DOUBLE_EQ(genetic_search(p, o).best_cost, 100);
    EXPECT_DOUBLE_EQ(tree_search(p, o).best_cost, 100);
}

TEST(TunerSearch, IllegalSeedsAreSkippedNotCosted) {
    Bowl b;
    Problem p = b.problem();
    p.seeds = {{15, 15, 0, 0, 0, 0}, {1, 2, 3}};  // illegal, and of the wrong size
    SearchOptions o;
    o.trials = 200;
    const SearchResult r = genetic_search(p, o);
    EXPECT_EQ(b.illegal_costed.load(), 0);
    EXPECT_GE(r.illegal, 1);
}

TEST(TunerSearch, ASpaceWithinTheBudgetIsCostedWholeAndTheResultIsTheOptimum) {
    Problem p;
    p.radix = {5, 7, 3};
    p.legal = [](const Point& x) { return (x[0] + x[1] + x[2]) % 4 != 0; };
    p.cost = [](const Point& x) { return std::abs(x[0] - 4) * 10.0 + std::abs(x[1] - 2) + 0.5 * x[2]; };
    SearchOptions o;
    o.trials = 200;  // the space holds 105
    for (const SearchResult& r : {genetic_search(p, o), tree_search(p, o), random_search(p, o)}) {
        EXPECT_TRUE(r.complete);
        EXPECT_EQ(r.best, (Point{4, 2, 0}));  // cost 0, and legal: 4 + 2 + 0 is not a multiple of 4
    }
}

TEST(TunerSearch, TheSameSeedGivesTheSameResultOnOneThreadAndOnSeveral) {
    ThreadPool one(1), four(4);
    for (int strategy = 0; strategy < 3; ++strategy) {
        SCOPED_TRACE(strategy);
        std::vector<SearchResult> runs;
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &one, &four, &four}) {
            Bowl b;
            SearchOptions o;
            o.seed = 42;
            o.trials = 700;
            o.pool = pool;
            runs.push_back(strategy == 0   ? genetic_search(b.problem(), o)
                           : strategy == 1 ? tree_search(b.problem(), o)
                                           : random_search(b.problem(), o));
        }
        for (const SearchResult& r : runs) {
            EXPECT_EQ(r.best, runs[0].best);
            EXPECT_EQ(r.evaluations, runs[0].evaluations);
            EXPECT_EQ(r.trace, runs[0].trace);
        }
    }
}

TEST(TunerSearch, AnotherSeedExploresOtherwise) {
    Bowl a, b;
    SearchOptions o;
    o.trials = 300;
    o.seed = 1;
    const SearchResult r1 = genetic_search(a.problem(), o);
    o.seed = 2;
    const SearchResult r2 = genetic_search(b.problem(), o);
    EXPECT_NE(r1.trace, r2.trace);
}

TEST(TunerSearch, TheTreeNeverExpandsAnInfeasiblePrefix) {
    Problem p;
    p.radix = {8, 8, 8, 8};
    std::atomic<int> infeasible_reached{0};
    p.feasible = [](const Point& x, size_t depth) { return depth < 1 || x[0] != 5; };
    p.legal = [&](const Point& x) {
        if (x[0] == 5) infeasible_reached.fetch_add(1);
        return x[0] != 5;
    };
    p.cost = [](const Point& x) { return 1.0 + x[0] + x[1] + x[2] + x[3]; };
    SearchOptions o;
    o.trials = 300;
    const SearchResult r = tree_search(p, o);
    EXPECT_EQ(infeasible_reached.load(), 0);
    EXPECT_DOUBLE_EQ(r.best_cost, 1.0);
}

TEST(TunerSearch, ExhaustiveRefusesASpaceOverItsLimit) {
    Bowl b;
    auto r = exhaustive_search(b.problem(), {}, 1000);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("16777216 points"), std::string::npos) << r.status().message();
}

TEST(TunerSearch, ATimeBudgetStopsTheSearchBetweenBatches) {
    Problem p;
    p.radix = std::vector<int32_t>(8, 32);
    p.cost = [](const Point& x) {
        volatile double s = 0;
        for (int i = 0; i < 20000; ++i) s = s + std::sqrt(static_cast<double>(i + x[0]));
        return 1.0 + x[1];
    };
    SearchOptions o;
    o.trials = 100000000;
    o.budget_s = 0.2;
    GaOptions ga;
    ga.stall_generations = 1 << 30;  // only the clock stops it
    const SearchResult r = genetic_search(p, o, ga);
    EXPECT_TRUE(r.out_of_time);
    EXPECT_LT(r.seconds, 2.0);
    EXPECT_GT(r.evaluations, 0);
}

TEST(TunerSearch, RngIsTheSameSequenceEverywhere) {
    Rng rng(1);
    // xoshiro256** seeded through splitmix64 from 1 (values of the reference algorithms), so a
    // search's choices do not depend on the standard library.
    EXPECT_EQ(rng.next(), 0xb3f2af6d0fc710c5ull);
    EXPECT_EQ(rng.next(), 0x853b559647364ceaull);
    EXPECT_EQ(rng.next(), 0x92f89756082a4514ull);
    for (int i = 0; i < 1000; ++i) {
        const int32_t v = rng.below(7);
        EXPECT_GE(v, 0);
        EXPECT_LT(v, 7);
        const double u = rng.unit();
        EXPECT_GE(u, 0.0);
        EXPECT_LT(u, 1.0);
    }
}

}  // namespace
}  // namespace loom::tuner::test_tuner_search
