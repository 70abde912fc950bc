#include "tuner/space.hpp"

#include <algorithm>
#include <cmath>

namespace loom::tuner {

namespace {

using device::CubeTiling;
using device::Tiling;
using device::TilingKind;
using device::VectorAxis;
using device::VectorSchedule;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Index of `v` in sorted `values`, or -1.
int32_t index_of(const std::vector<int64_t>& values, int64_t v) {
    const auto it = std::lower_bound(values.begin(), values.end(), v);
    return it != values.end() && *it == v ? static_cast<int32_t>(it - values.begin()) : -1;
}

int32_t radix_of(size_t n) { return static_cast<int32_t>(std::max<size_t>(n, 1)); }

}  // namespace

std::vector<int64_t> pruned_multiples(int64_t count, int64_t units_per_multiple, int64_t units, int64_t cores_max) {
    std::vector<int64_t> out;
    if (count < 1) return out;
    if (count <= kVectorChoicesMax) {
        for (int64_t i = 1; i <= count; ++i) out.push_back(i);
        return out;
    }
    // The ladder: every size within 2^(1/4) of a kept one.
    for (int i = 0;; ++i) {
        const int64_t x = std::llround(std::exp2(i / 4.0));
        if (x >= count) break;
        out.push_back(x);
    }
    out.push_back(count);
    // Whole rounds: the smallest multiple that cuts the work into at most cores x r tiles.
    const int64_t per = std::max<int64_t>(1, units_per_multiple);
    for (int64_t c = 1; c <= std::max<int64_t>(cores_max, 1); ++c)
        for (int64_t r = 1; r <= 16; ++r) {
            const int64_t m = ceil_div(ceil_div(std::max<int64_t>(units, 1), c * r), per);
            if (m >= 1 && m <= count) out.push_back(m);
        }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

Result<std::unique_ptr<TilingProblem>> TilingProblem::make(const device::KernelWork& work,
                                                           const device::DeviceSpec& spec) {
    if (work.kind == TilingKind::NONE)
        return make_error(StatusCode::INVALID_ARGUMENT, "the launch takes no tiling: nothing to tune");
    std::unique_ptr<TilingProblem> t(new TilingProblem(work, spec));
    if (work.kind == TilingKind::CUBE) t->build_cube();
    else t->build_vector();
    t->add_seed(device::cost::default_tiling(work, spec));
    return t;
}

void TilingProblem::build_cube() {
    cube_ = device::cost::cube_space(work_.cube, spec_);
    auto max_count = [](const std::vector<int64_t>& counts) {
        return counts.empty() ? int64_t{1} : *std::max_element(counts.begin(), counts.end());
    };
    problem_.radix = {radix_of(cube_.m_l0.size()),
                      static_cast<int32_t>(max_count(cube_.m_l1_count)),
                      radix_of(cube_.n_l0.size()),
                      static_cast<int32_t>(max_count(cube_.n_l1_count)),
                      radix_of(cube_.k_l0.size()),
                      static_cast<int32_t>(max_count(cube_.k_l1_count)),
                      2,
                      2,
                      static_cast<int32_t>(std::max<int64_t>(cube_.cores_max, 1))};
    problem_.legal = [this](const Point& p) {
        if (cube_.m_l0.empty() || cube_.n_l0.empty() || cube_.k_l0.empty()) return false;
        if (p[1] >= cube_.m_l1_count[static_cast<size_t>(p[0])] ||
            p[3] >= cube_.n_l1_count[static_cast<size_t>(p[2])] || p[5] >= cube_.k_l1_count[static_cast<size_t>(p[4])])
            return false;
        return device::cost::cube_tiling_legal(std::get<CubeTiling>(decode(p)), work_.cube, spec_);
    };
    problem_.cost = [this](const Point& p) { return device::cost::work_cycles(spec_, work_, decode(p)); };
}

void TilingProblem::build_vector() {
    vector_ = device::cost::vector_space(work_.vector, spec_, false);
    const int64_t cores_max = std::max<int64_t>(vector_.cores_max, 1);
    size_t vt_max = 1, ub_max = 1;
    for (int ai = 0; ai < device::kVectorAxisCount; ++ai) {
        const auto a = static_cast<VectorAxis>(ai);
        auto& vts = vtiles_[ai];
        if (vector_.joinable[static_cast<size_t>(ai)] && vector_.ub_tile_count(a, 0) > 0) vts.push_back(0);
        const int64_t chunks_max = vector_.vector_tile_count(a);
        pruned_ = pruned_ || chunks_max > kVectorChoicesMax;
        for (int64_t m : pruned_multiples(chunks_max, 1, chunks_max, cores_max)) vts.push_back(m * vector_.block);
        for (int64_t vt : vts) {
            const int64_t count = vector_.ub_tile_count(a, vt);
            pruned_ = pruned_ || count > kVectorChoicesMax;
            std::vector<int64_t> ubs;
            if (vt == 0) {
                for (int64_t m : pruned_multiples(
                         count, 1, ceil_div(std::max<int64_t>(vector_.elements, 1), vector_.block), cores_max))
                    ubs.push_back(m * vector_.block);
            } else {
                const int64_t rows = vector_.lines(a) * ceil_div(vector_.extent[static_cast<size_t>(ai)], vt);
                for (int64_t m : pruned_multiples(count, 1, rows, cores_max)) ubs.push_back(m * vt);
            }
            ub_max = std::max(ub_max, ubs.size());
            ubtiles_[ai].push_back(std::move(ubs));
        }
        vt_max = std::max(vt_max, vts.size());
    }
    problem_.radix = {device::kVectorAxisCount,        static_cast<int32_t>(vt_max), static_cast<int32_t>(ub_max), 2,
                      static_cast<int32_t>(cores_max), vector_.in_place ? 2 : 1};
    auto in_lists = [this](const Point& p, size_t depth) {
        const auto ai = static_cast<size_t>(p[0]);
        if (depth >= 1 && vtiles_[ai].empty()) return false;
        if (depth >= 2 && static_cast<size_t>(p[1]) >= vtiles_[ai].size()) return false;
        if (depth >= 3 && static_cast<size_t>(p[2]) >= ubtiles_[ai][static_cast<size_t>(p[1])].size()) return false;
        return true;
    };
    problem_.feasible = in_lists;
    problem_.legal = [this, in_lists](const Point& p) {
        return in_lists(p, 3) &&
               device::cost::vector_schedule_legal(std::get<VectorSchedule>(decode(p)), work_.vector, spec_);
    };
    problem_.cost = [this](const Point& p) { return device::cost::work_cycles(spec_, work_, decode(p)); };
}

Tiling TilingProblem::decode(const Point& p) const {
    if (work_.kind == TilingKind::CUBE) {
        CubeTiling t;
        t.m_l0 = cube_.m_l0[static_cast<size_t>(p[0])], t.m_l1 = t.m_l0 * (p[1] + 1);
        t.n_l0 = cube_.n_l0[static_cast<size_t>(p[2])], t.n_l1 = t.n_l0 * (p[3] + 1);
        t.k_l0 = cube_.k_l0[static_cast<size_t>(p[4])], t.k_l1 = t.k_l0 * (p[5] + 1);
        t.n_outer = p[6] != 0, t.double_buffer = p[7] != 0, t.cores = p[8] + 1;
        return t;
    }
    VectorSchedule v;
    const auto ai = static_cast<size_t>(p[0]);
    v.vector_axis = static_cast<VectorAxis>(p[0]);
    v.vector_tile = vtiles_[ai][static_cast<size_t>(p[1])];
    v.ub_tile = ubtiles_[ai][static_cast<size_t>(p[1])][static_cast<size_t>(p[2])];
    v.double_buffer = p[3] != 0;
    v.cores = p[4] + 1;
    v.in_place = p[5] != 0;
    return v;
}

Point TilingProblem::encode(const Tiling& tiling) const {
    const int64_t cores_all = std::max<int64_t>(spec_.aicore_count, 1);
    if (const auto* t = std::get_if<CubeTiling>(&tiling); t && work_.kind == TilingKind::CUBE) {
        const int32_t m = index_of(cube_.m_l0, t->m_l0), n = index_of(cube_.n_l0, t->n_l0),
                      k = index_of(cube_.k_l0, t->k_l0);
        if (m < 0 || n < 0 || k < 0 || t->m_l1 % t->m_l0 || t->n_l1 % t->n_l0 || t->k_l1 % t->k_l0) return {};
        const int64_t cores = t->cores == 0 ? cores_all : t->cores;
        Point p{m,
                static_cast<int32_t>(t->m_l1 / t->m_l0 - 1),
                n,
                static_cast<int32_t>(t->n_l1 / t->n_l0 - 1),
                k,
                static_cast<int32_t>(t->k_l1 / t->k_l0 - 1),
                t->n_outer ? 1 : 0,
                t->double_buffer ? 1 : 0,
                static_cast<int32_t>(cores - 1)};
        for (size_t d = 0; d < p.size(); ++d)
            if (p[d] < 0 || p[d] >= problem_.radix[d]) return {};
        return p;
    }
    if (const auto* v = std::get_if<VectorSchedule>(&tiling); v && work_.kind == TilingKind::VECTOR) {
        if (v->fuse_input || v->fuse_output || v->fuse_ub_buffers) return {};
        const auto ai = static_cast<size_t>(v->vector_axis);
        if (ai >= device::kVectorAxisCount) return {};
        const int32_t vt = index_of(vtiles_[ai], v->vector_tile);
        if (vt < 0) return {};
        const int32_t ub = index_of(ubtiles_[ai][static_cast<size_t>(vt)], v->ub_tile);
        const int64_t cores = v->cores == 0 ? cores_all : v->cores;
        if (ub < 0 || cores < 1 || cores > problem_.radix[4] || (v->in_place && problem_.radix[5] < 2)) return {};
        return Point{static_cast<int32_t>(ai), vt, ub, v->double_buffer ? 1 : 0, static_cast<int32_t>(cores - 1),
                     v->in_place ? 1 : 0};
    }
    return {};
}

void TilingProblem::add_seed(const Tiling& t) {
    Point p = encode(t);
    if (!p.empty()) problem_.seeds.push_back(std::move(p));
}

double TilingProblem::cycles(const Tiling& t) const { return device::cost::work_cycles(spec_, work_, t); }

double TilingProblem::device_space_size() const {
    return work_.kind == TilingKind::CUBE ? cube_.size() : vector_.size();
}

}  // namespace loom::tuner
