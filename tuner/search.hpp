// The tuner's search strategies over a finite product space: a genetic algorithm (Cube
// tilings), Monte-Carlo tree search (Vector schedules), random and exhaustive search (the
// baselines the benchmark compares against). They know nothing of kernels: a Problem gives the
// number of choices per dimension, a cheap legality test and a cost, and the kernel adapters
// (tuner/space.hpp) map points to tilings.
//
// Determinism: every random choice comes from a generator seeded by SearchOptions::seed (its
// own, not std::mt19937's distributions, whose results differ between standard libraries), and
// candidates are generated in batches whose size does not depend on the thread count: a batch
// is costed in parallel and consumed in order. So the same seed and trial budget give the same
// result on any machine and any thread count. A wall-time budget is checked between batches
// only: a search it stops returns what the finished batches found.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::tuner {

// One choice per dimension, each in [0, radix[d]).
using Point = std::vector<int32_t>;

// What a search needs of a space. The functions must be pure (the same point always gets the
// same answer) and thread-safe: a batch is costed on several threads at once.
struct Problem {
    std::vector<int32_t> radix;  // choices per dimension, each at least 1
    // Cheap legality (no allocation): illegal points are never costed.
    std::function<bool(const Point&)> legal;
    // The cost of a legal point, lower is better; +infinity when the cost model refuses it.
    std::function<double(const Point&)> cost;
    // Optional, for the tree search: false when no completion of the first `depth` choices
    // of `prefix` can be legal (the rest of `prefix` is to be ignored). Null: always true.
    std::function<bool(const Point& prefix, size_t depth)> feasible;
    // Points to start from (the default heuristic's choice, the knowledge base's nearest
    // shapes); illegal ones are skipped.
    std::vector<Point> seeds;
};

// Returns the number of points of the product space (saturating at 2^62).
int64_t space_size(const Problem& p);

struct SearchOptions {
    uint64_t seed = 1;
    int64_t trials = 1000;       // the most distinct points costed (the evaluation budget)
    double budget_s = 0;         // wall-time budget; 0 = none (checked between batches)
    ThreadPool* pool = nullptr;  // costs each batch in parallel when set
};

struct SearchResult {
    Point best;  // empty when no legal point was found
    double best_cost = std::numeric_limits<double>::infinity();
    int64_t evaluations = 0;   // distinct legal points costed
    int64_t illegal = 0;       // candidates refused by `legal` before costing
    int64_t generations = 0;   // GA generations / MCTS batches / random batches run
    bool complete = false;     // the whole space was costed (the result is the optimum)
    bool out_of_time = false;  // stopped by budget_s
    double seconds = 0;
    // The best cost after each evaluation, for convergence plots (evaluations entries).
    std::vector<double> trace;
};

struct GaOptions {
    int population = 24;
    int elites = 2;              // best individuals carried over unchanged
    int tournament = 3;          // parents are the best of this many drawn at random
    double crossover = 0.9;      // probability that a child mixes two parents (else a copy of one)
    double mutation = 0.2;       // per-gene probability of a mutation
    double local_step = 0.7;     // of mutations, the share that moves a gene by one choice
    int stall_generations = 12;  // restart after this many generations without improvement
    int restarts = 1000;         // at most this many restarts (the trial budget usually ends it first)
};

struct MctsOptions {
    double exploration = 1.0;   // UCT constant (values are in [0, 1])
    int batch = 8;              // leaves selected (with virtual loss) and costed per batch
    int rollout_attempts = 16;  // random completions tried per leaf until one is legal
    // Share of a rollout's choices taken from the best point so far (half of them its own
    // choice, half a neighbour of it); the rest are uniform. 0 = plain random rollouts.
    double guided = 0.6;
    int stall_batches = 100000;  // stop after this many batches without improvement
};

// A space no larger than the trial budget is costed exhaustively by every strategy (the
// result is then the optimum). Otherwise the genetic and tree searches end with a coordinate
// descent from their best point (its legal neighbours one choice away, until none is better),
// within the same trial budget.

// Genetic algorithm: tournament selection, uniform crossover, mutation (a step to a
// neighbouring choice or a random one), elitism; an illegal child is mutated again (up to a
// bound) instead of being costed, and a child costed before is re-mutated rather than counted.
// A population that stops improving is restarted around the best point (kept as the elite)
// with fresh mutants and random points, until the trial budget is spent.
SearchResult genetic_search(const Problem& p, const SearchOptions& o, const GaOptions& ga = {});
// Monte-Carlo tree search: one tree level per dimension (the adapters put the decisions that
// matter most first), UCT selection with virtual loss, legal rollouts guided by the best point
// so far; a subtree's value is the best cost found in it relative to the best anywhere (max
// backup: the search looks for one best point, not a good average).
SearchResult tree_search(const Problem& p, const SearchOptions& o, const MctsOptions& mcts = {});
// Uniform random legal points (the baseline at the same budget).
SearchResult random_search(const Problem& p, const SearchOptions& o);
// Every point in order (trials ignored; refuse spaces larger than `max_points`).
Result<SearchResult> exhaustive_search(const Problem& p, const SearchOptions& o, int64_t max_points = int64_t{1} << 24);

// splitmix64-seeded xoshiro256**: the same sequence everywhere.
class Rng {
public:
    explicit Rng(uint64_t seed);
    uint64_t next();
    // Uniform in [0, n), n >= 1 (Lemire's multiply-shift; the bias for n << 2^64 is negligible).
    int32_t below(int32_t n);
    // Uniform in [0, 1).
    double unit();

private:
    uint64_t s_[4];
};

}  // namespace loom::tuner
