#include "tuner/search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "common/hash.hpp"
#include "common/thread_pool.hpp"

namespace loom::tuner {

namespace {

using Clock = std::chrono::steady_clock;

struct PointHash {
    size_t operator()(const Point& p) const {
        return static_cast<size_t>(fnv1a(kFnvBasis, p.data(), p.size() * sizeof(int32_t)));
    }
};

// Costs points once each, in batches (in parallel when a pool is given), and keeps the
// result's counters, best point and trace. Every strategy goes through it.
class Evaluator {
public:
    Evaluator(const Problem& p, const SearchOptions& o, SearchResult& r) : p_(p), o_(o), r_(r), start_(Clock::now()) {}

    bool seen(const Point& x) const { return costs_.count(x) != 0; }
    // The cost of a point costed before (NaN otherwise).
    double cached(const Point& x) const {
        auto it = costs_.find(x);
        return it == costs_.end() ? std::nan("") : it->second;
    }
    int64_t remaining() const { return std::max<int64_t>(0, o_.trials - r_.evaluations); }
    // False once the trial budget is spent or the time budget is over.
    bool can_continue() {
        if (remaining() == 0) return false;
        if (o_.budget_s > 0 && seconds() >= o_.budget_s) {
            r_.out_of_time = true;
            return false;
        }
        return true;
    }
    double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

    // Returns the cost of every point of `batch` (legal points only), NaN for those left
    // uncosted by the trial budget. New points are costed in parallel and recorded in order.
    std::vector<double> evaluate(const std::vector<Point>& batch) {
        std::vector<double> out(batch.size(), std::nan(""));
        std::vector<size_t> fresh;  // indices of the first occurrence of each new point
        std::unordered_set<Point, PointHash> in_batch;
        for (size_t i = 0; i < batch.size(); ++i) {
            if (seen(batch[i])) continue;
            if (static_cast<int64_t>(fresh.size()) >= remaining()) break;
            if (in_batch.insert(batch[i]).second) fresh.push_back(i);
        }
        std::vector<double> costs(fresh.size());
        auto work = [&](size_t b, size_t e) {
            for (size_t j = b; j < e; ++j) costs[j] = p_.cost(batch[fresh[j]]);
        };
        if (o_.pool && fresh.size() > 1) o_.pool->parallel_for(fresh.size(), 1, work);
        else work(0, fresh.size());
        for (size_t j = 0; j < fresh.size(); ++j) {
            const Point& x = batch[fresh[j]];
            const double c = std::isnan(costs[j]) ? std::numeric_limits<double>::infinity() : costs[j];
            costs_.emplace(x, c);
            ++r_.evaluations;
            if (c < r_.best_cost) {
                r_.best_cost = c;
                r_.best = x;
            }
            r_.trace.push_back(r_.best_cost);
        }
        for (size_t i = 0; i < batch.size(); ++i) out[i] = cached(batch[i]);
        return out;
    }

    void finish() { r_.seconds = seconds(); }

private:
    const Problem& p_;
    const SearchOptions& o_;
    SearchResult& r_;
    Clock::time_point start_;
    std::unordered_map<Point, double, PointHash> costs_;
};

bool legal(const Problem& p, const Point& x) { return !p.legal || p.legal(x); }

Point random_point(const Problem& p, Rng& rng) {
    Point x(p.radix.size());
    for (size_t d = 0; d < x.size(); ++d) x[d] = rng.below(p.radix[d]);
    return x;
}

// Moves gene d: with probability local_step to a neighbouring choice (reflected at the ends),
// else to a different random choice.
void mutate_gene(const Problem& p, Point& x, size_t d, double local_step, Rng& rng) {
    const int32_t n = p.radix[d];
    if (n <= 1) return;
    if (rng.unit() < local_step) {
        int32_t v = x[d] + (rng.below(2) == 0 ? -1 : 1);
        if (v < 0) v = 1;
        if (v >= n) v = n - 2;
        x[d] = v;
    } else {
        int32_t v = rng.below(n - 1);
        x[d] = v >= x[d] ? v + 1 : v;
    }
}

// The first legal seeds, deduplicated.
std::vector<Point> legal_seeds(const Problem& p, SearchResult& r) {
    std::vector<Point> out;
    for (const Point& s : p.seeds) {
        if (s.size() != p.radix.size()) continue;
        bool in_range = true;
        for (size_t d = 0; d < s.size(); ++d) in_range = in_range && s[d] >= 0 && s[d] < p.radix[d];
        if (!in_range) continue;
        if (!legal(p, s)) {
            ++r.illegal;
            continue;
        }
        if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
    return out;
}

// Coordinate descent from the best point: its legal neighbours one choice away in each
// dimension are costed as one batch, again from each new best, until none is better or the
// budget is spent. Both global searches end with it, so their result is a local optimum.
void polish(const Problem& p, Evaluator& ev, SearchResult& r) {
    while (!r.best.empty() && ev.can_continue()) {
        const double before = r.best_cost;
        std::vector<Point> batch;
        for (size_t d = 0; d < r.best.size(); ++d)
            for (int32_t step : {-1, 1}) {
                Point x = r.best;
                x[d] += step;
                if (x[d] < 0 || x[d] >= p.radix[d] || ev.seen(x)) continue;
                if (!legal(p, x)) {
                    ++r.illegal;
                    continue;
                }
                batch.push_back(std::move(x));
            }
        if (batch.empty()) return;
        ev.evaluate(batch);
        ++r.generations;
        if (!(r.best_cost < before)) return;
    }
}

// The trials a global search leaves for polish(): a few sweeps, at most a tenth of the budget.
int64_t polish_reserve(const Problem& p, const SearchOptions& o) {
    return std::min<int64_t>(o.trials / 10, 4 * 2 * static_cast<int64_t>(p.radix.size()));
}

// When the whole space fits the trial budget, every strategy costs all of it.
bool small_enough(const Problem& p, const SearchOptions& o) { return space_size(p) <= o.trials; }

}  // namespace

Rng::Rng(uint64_t seed) {
    uint64_t z = seed;
    for (uint64_t& s : s_) {
        z += 0x9e3779b97f4a7c15ull;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        s = x ^ (x >> 31);
    }
}

uint64_t Rng::next() {
    auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

int32_t Rng::below(int32_t n) {
    return static_cast<int32_t>((static_cast<unsigned __int128>(next()) * static_cast<uint64_t>(n)) >> 64);
}

double Rng::unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

int64_t space_size(const Problem& p) {
    constexpr int64_t kMax = int64_t{1} << 62;
    int64_t n = 1;
    for (int32_t r : p.radix) {
        if (r < 1) return 0;
        if (n > kMax / r) return kMax;
        n *= r;
    }
    return n;
}

Result<SearchResult> exhaustive_search(const Problem& p, const SearchOptions& o, int64_t max_points) {
    const int64_t n = space_size(p);
    if (n > max_points)
        return make_error(StatusCode::INVALID_ARGUMENT, "exhaustive search: the space holds {} points (at most {})", n,
                          max_points);
    SearchResult r;
    SearchOptions all = o;
    all.trials = n;
    Evaluator ev(p, all, r);
    Point x(p.radix.size(), 0);
    constexpr size_t kBatch = 256;
    std::vector<Point> batch;
    bool done = n == 0;
    while (!done) {
        batch.clear();
        while (batch.size() < kBatch && !done) {
            if (legal(p, x)) batch.push_back(x);
            else ++r.illegal;
            // Next point in mixed radix, last dimension fastest.
            size_t d = x.size();
            while (d > 0) {
                --d;
                if (++x[d] < p.radix[d]) break;
                x[d] = 0;
                if (d == 0) done = true;
            }
            if (x.empty()) done = true;
        }
        ev.evaluate(batch);
        ++r.generations;
        if (o.budget_s > 0 && ev.seconds() >= o.budget_s && !done) {
            r.out_of_time = true;
            break;
        }
    }
    r.complete = !r.out_of_time;
    ev.finish();
    return r;
}

namespace {

// Runs the exhaustive search when the space fits the trial budget; returns false otherwise.
bool try_exhaustive(const Problem& p, const SearchOptions& o, SearchResult& out) {
    if (!small_enough(p, o)) return false;
    auto r = exhaustive_search(p, o, o.trials);
    if (!r.ok()) return false;
    out = std::move(*r);
    return true;
}

}  // namespace

SearchResult random_search(const Problem& p, const SearchOptions& o) {
    SearchResult r;
    if (try_exhaustive(p, o, r)) return r;
    Evaluator ev(p, o, r);
    Rng rng(o.seed);
    constexpr int kBatch = 32;
    int fruitless = 0;  // batches that found no new legal point
    while (ev.can_continue() && fruitless < 64) {
        std::vector<Point> batch;
        for (int attempt = 0; attempt < kBatch * 64 && static_cast<int>(batch.size()) < kBatch; ++attempt) {
            Point x = random_point(p, rng);
            if (!legal(p, x)) {
                ++r.illegal;
                continue;
            }
            if (!ev.seen(x)) batch.push_back(std::move(x));
        }
        const int64_t before = r.evaluations;
        ev.evaluate(batch);
        fruitless = r.evaluations == before ? fruitless + 1 : 0;
        ++r.generations;
    }
    ev.finish();
    return r;
}

SearchResult genetic_search(const Problem& p, const SearchOptions& o, const GaOptions& ga) {
    SearchResult r;
    if (try_exhaustive(p, o, r)) return r;
    Evaluator ev(p, o, r);
    Rng rng(o.seed);
    const int pop_size = std::max(4, ga.population);
    const int elites = std::clamp(ga.elites, 0, pop_size - 1);

    struct Individual {
        Point x;
        double cost;
    };
    std::vector<Individual> pop;
    auto admit = [&](const std::vector<Point>& batch) {
        const std::vector<double> costs = ev.evaluate(batch);
        std::vector<Individual> out;
        for (size_t i = 0; i < batch.size(); ++i)
            if (!std::isnan(costs[i])) out.push_back({batch[i], costs[i]});
        return out;
    };

    // A population: `base` (the seeds, or the best so far on a restart), mutants of its first
    // few (each gene mutated with probability `heat`), then random legal points.
    auto populate = [&](std::vector<Point> base, double heat) {
        std::unordered_set<Point, PointHash> chosen(base.begin(), base.end());
        const size_t parents = std::min<size_t>(base.size(), 4);
        for (int attempt = 0; attempt < pop_size * 64 && static_cast<int>(base.size()) < pop_size; ++attempt) {
            Point x;
            if (parents > 0 && attempt % 2 == 0) {
                x = base[static_cast<size_t>(rng.below(static_cast<int32_t>(parents)))];
                for (size_t d = 0; d < x.size(); ++d)
                    if (rng.unit() < heat) mutate_gene(p, x, d, ga.local_step, rng);
            } else {
                x = random_point(p, rng);
            }
            if (!legal(p, x)) {
                ++r.illegal;
                continue;
            }
            if (chosen.insert(x).second && !ev.seen(x)) base.push_back(std::move(x));
        }
        return base;
    };
    // Generation 0: the seeds, mutants of them, random legal points.
    pop = admit(populate(legal_seeds(p, r), 0.3));
    ++r.generations;

    auto tournament = [&]() -> const Individual& {
        const Individual* best = &pop[static_cast<size_t>(rng.below(static_cast<int32_t>(pop.size())))];
        for (int i = 1; i < ga.tournament; ++i) {
            const Individual& c = pop[static_cast<size_t>(rng.below(static_cast<int32_t>(pop.size())))];
            if (c.cost < best->cost) best = &c;
        }
        return *best;
    };

    int stall = 0, restarts = 0, barren = 0;
    double best_before = r.best_cost;
    const int64_t reserve = polish_reserve(p, o);
    while (!pop.empty() && ev.can_continue() && r.evaluations + reserve < o.trials && barren < 3) {
        if (stall >= ga.stall_generations) {
            // Converged: restart around the best point (kept as the elite) while the budget lasts.
            if (restarts++ >= ga.restarts) break;
            const int64_t before = r.evaluations;
            std::vector<Individual> keep{{r.best, r.best_cost}};
            std::vector<Individual> fresh = admit(populate({r.best}, 0.5));
            for (Individual& i : fresh)
                if (i.x != r.best) keep.push_back(std::move(i));
            pop = std::move(keep);
            ++r.generations;
            barren = r.evaluations == before ? barren + 1 : 0;
            stall = 0;
            best_before = r.best_cost;
            continue;
        }
        const int64_t before = r.evaluations;
        std::stable_sort(pop.begin(), pop.end(),
                         [](const Individual& a, const Individual& b) { return a.cost < b.cost; });
        std::vector<Individual> next(
            pop.begin(), pop.begin() + std::min<std::ptrdiff_t>(elites, static_cast<std::ptrdiff_t>(pop.size())));
        std::vector<Point> children;
        std::unordered_set<Point, PointHash> in_batch;
        const int want = pop_size - static_cast<int>(next.size());
        for (int attempt = 0; attempt < want * 32 && static_cast<int>(children.size()) < want; ++attempt) {
            const Individual& a = tournament();
            Point child = a.x;
            if (rng.unit() < ga.crossover) {
                const Individual& b = tournament();
                for (size_t d = 0; d < child.size(); ++d)
                    if (rng.below(2) == 1) child[d] = b.x[d];
            }
            for (size_t d = 0; d < child.size(); ++d)
                if (rng.unit() < ga.mutation) mutate_gene(p, child, d, ga.local_step, rng);
            // A child costed before, or illegal, is mutated again: never costed twice, never clamped.
            for (int retry = 0; retry < 8 && (ev.seen(child) || in_batch.count(child) || !legal(p, child)); ++retry) {
                if (!legal(p, child)) ++r.illegal;
                mutate_gene(p, child, static_cast<size_t>(rng.below(static_cast<int32_t>(child.size()))), ga.local_step,
                            rng);
            }
            if (ev.seen(child) || in_batch.count(child)) continue;
            if (!legal(p, child)) {
                ++r.illegal;
                continue;
            }
            in_batch.insert(child);
            children.push_back(std::move(child));
        }
        const size_t kept = next.size();
        std::vector<Individual> born = admit(children);
        next.insert(next.end(), born.begin(), born.end());
        // Too few new children (a nearly exhausted neighbourhood): keep the best of the old
        // population so selection still has a choice.
        for (size_t i = kept; i < pop.size() && static_cast<int>(next.size()) < pop_size; ++i) next.push_back(pop[i]);
        pop = std::move(next);
        ++r.generations;
        stall = r.best_cost < best_before ? 0 : stall + 1;
        best_before = r.best_cost;
        barren = r.evaluations == before ? barren + 1 : 0;
    }
    polish(p, ev, r);
    ev.finish();
    return r;
}

namespace {

// One node of the search tree: the choices of dimensions [0, depth) are fixed by the path.
struct Node {
    int32_t depth = 0;
    int32_t choice = -1;  // the choice of dimension depth - 1 that leads here
    int32_t parent = -1;
    std::vector<int32_t> children;  // node indices
    std::vector<int32_t> untried;   // choices of dimension `depth` not expanded yet (shuffled)
    double visits = 0;
    double best = std::numeric_limits<double>::infinity();  // the lowest cost found below
    bool exhausted = false;                                 // every completion below was costed (or is illegal)
};

}  // namespace

SearchResult tree_search(const Problem& p, const SearchOptions& o, const MctsOptions& mc) {
    SearchResult r;
    if (try_exhaustive(p, o, r)) return r;
    Evaluator ev(p, o, r);
    Rng rng(o.seed);
    const size_t dims = p.radix.size();
    std::vector<Node> tree;
    auto feasible = [&](const Point& prefix, size_t depth) { return !p.feasible || p.feasible(prefix, depth); };
    auto make_node = [&](int32_t parent, int32_t choice, int32_t depth) {
        Node n;
        n.parent = parent, n.choice = choice, n.depth = depth;
        if (static_cast<size_t>(depth) < dims) {
            n.untried.resize(static_cast<size_t>(p.radix[static_cast<size_t>(depth)]));
            for (int32_t i = 0; i < static_cast<int32_t>(n.untried.size()); ++i) n.untried[static_cast<size_t>(i)] = i;
            for (size_t i = n.untried.size(); i > 1; --i)
                std::swap(n.untried[i - 1], n.untried[static_cast<size_t>(rng.below(static_cast<int32_t>(i)))]);
        }
        tree.push_back(std::move(n));
        return static_cast<int32_t>(tree.size() - 1);
    };
    auto path_point = [&](int32_t node) {
        Point x(dims, 0);
        for (int32_t n = node; tree[static_cast<size_t>(n)].parent >= 0; n = tree[static_cast<size_t>(n)].parent)
            x[static_cast<size_t>(tree[static_cast<size_t>(n)].depth - 1)] = tree[static_cast<size_t>(n)].choice;
        return x;
    };
    auto mark_exhausted = [&](int32_t node) {
        for (int32_t n = node; n >= 0; n = tree[static_cast<size_t>(n)].parent) {
            Node& nd = tree[static_cast<size_t>(n)];
            if (static_cast<size_t>(nd.depth) < dims) {
                if (!nd.untried.empty()) return;
                for (int32_t c : nd.children)
                    if (!tree[static_cast<size_t>(c)].exhausted) return;
            }
            nd.exhausted = true;
        }
    };
    make_node(-1, -1, 0);

    // The seeds are costed first, so rewards are measured against the default from the start.
    std::vector<Point> seeds = legal_seeds(p, r);
    ev.evaluate(seeds);

    struct Leaf {
        int32_t node;
        Point x;
        bool costed;  // a legal completion was found
    };
    int stall = 0;
    double best_before = r.best_cost;
    const int64_t reserve = polish_reserve(p, o);
    while (ev.can_continue() && r.evaluations + reserve < o.trials && !tree[0].exhausted && stall < mc.stall_batches) {
        std::vector<Leaf> leaves;
        for (int b = 0; b < mc.batch && !tree[0].exhausted; ++b) {
            // Selection: descend through fully expanded nodes by UCT (virtual loss: the
            // visit is counted now, its reward added after costing).
            int32_t n = 0;
            while (true) {
                Node& nd = tree[static_cast<size_t>(n)];
                nd.visits += 1;
                if (static_cast<size_t>(nd.depth) == dims) break;
                if (!nd.untried.empty()) {
                    // Expansion: the next untried choice whose prefix can still be legal.
                    Point prefix = path_point(n);
                    int32_t child = -1;
                    while (!tree[static_cast<size_t>(n)].untried.empty() && child < 0) {
                        const int32_t c = tree[static_cast<size_t>(n)].untried.back();
                        tree[static_cast<size_t>(n)].untried.pop_back();
                        prefix[static_cast<size_t>(tree[static_cast<size_t>(n)].depth)] = c;
                        if (feasible(prefix, static_cast<size_t>(tree[static_cast<size_t>(n)].depth) + 1)) {
                            const int32_t depth = tree[static_cast<size_t>(n)].depth + 1;
                            child = make_node(n, c, depth);
                            tree[static_cast<size_t>(n)].children.push_back(child);
                        }
                    }
                    if (child >= 0) {
                        n = child;
                        tree[static_cast<size_t>(n)].visits += 1;
                        break;
                    }
                    if (tree[static_cast<size_t>(n)].children.empty()) {
                        mark_exhausted(n);
                        break;
                    }
                }
                const Node& cur = tree[static_cast<size_t>(n)];
                int32_t best = -1;
                double best_score = -1;
                const double log_n = std::log(std::max(1.0, cur.visits));
                for (int32_t c : cur.children) {
                    const Node& ch = tree[static_cast<size_t>(c)];
                    if (ch.exhausted) continue;
                    // Max backup (single-player MCTS for optimisation): a subtree is worth the
                    // best point found in it, relative to the best anywhere, so values do not go
                    // stale as the incumbent improves.
                    const double value = std::isfinite(ch.best) && ch.best > 0 ? r.best_cost / ch.best : 0.0;
                    const double score = value + mc.exploration * std::sqrt(log_n / std::max(1.0, ch.visits));
                    if (score > best_score) best_score = score, best = c;
                }
                if (best < 0) {
                    mark_exhausted(n);
                    break;
                }
                n = best;
            }
            // Rollout: a random legal completion of the leaf's prefix.
            Leaf leaf{n, path_point(n), false};
            const size_t depth = static_cast<size_t>(tree[static_cast<size_t>(n)].depth);
            if (depth == dims) {
                leaf.costed = legal(p, leaf.x);
                if (!leaf.costed) ++r.illegal;
                if (ev.seen(leaf.x) || !leaf.costed) mark_exhausted(n);
            } else {
                for (int a = 0; a < mc.rollout_attempts && !leaf.costed; ++a) {
                    Point x = leaf.x;
                    for (size_t d = depth; d < dims; ++d) {
                        // Guided by the incumbent: its choice, a neighbour of it, or any.
                        const double u = rng.unit();
                        if (r.best.empty() || u >= mc.guided) {
                            x[d] = rng.below(p.radix[d]);
                        } else {
                            x[d] = r.best[d];
                            if (u >= mc.guided / 2) mutate_gene(p, x, d, 1.0, rng);
                        }
                    }
                    if (legal(p, x)) {
                        leaf.x = std::move(x);
                        leaf.costed = true;
                    } else {
                        ++r.illegal;
                    }
                }
            }
            leaves.push_back(std::move(leaf));
        }
        std::vector<Point> batch;
        for (const Leaf& l : leaves)
            if (l.costed) batch.push_back(l.x);
        ev.evaluate(batch);
        // Backpropagation in batch order: every node on the path keeps the lowest cost below it.
        for (const Leaf& l : leaves) {
            if (!l.costed) continue;
            const double c = ev.cached(l.x);
            if (static_cast<size_t>(tree[static_cast<size_t>(l.node)].depth) == dims) mark_exhausted(l.node);
            if (std::isnan(c)) continue;
            for (int32_t n = l.node; n >= 0; n = tree[static_cast<size_t>(n)].parent)
                tree[static_cast<size_t>(n)].best = std::min(tree[static_cast<size_t>(n)].best, c);
        }
        ++r.generations;
        stall = r.best_cost < best_before ? 0 : stall + 1;
        best_before = r.best_cost;
    }
    r.complete = tree[0].exhausted && !r.out_of_time;
    if (!r.complete) polish(p, ev, r);
    ev.finish();
    return r;
}

}  // namespace loom::tuner
