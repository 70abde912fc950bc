// An exact, order-independent sum of floats: each value's 24-bit significand is added, as an
// integer, into the bin of its exponent, so any split of the values into parts, summed in any
// order and merged, gives the same bins, and value() the same double. GlobalAveragePool sums with
// it so that a frame run in windows (executor/tiled.hpp) gets the whole frame's means bit for bit.
// A bin holds 2^63 / 2^24 = 2^39 values before it could overflow: far more than one plane.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace loom::device::cpu {

class ExactSum {
public:
    void add(const float* v, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
            const auto u = std::bit_cast<uint32_t>(v[i]);
            const uint32_t e = (u >> 23) & 0xffu;
            if (e == 0xffu) {
                special_ |= (u & 0x7fffffu) ? kNan : (u >> 31) ? kNegInf : kPosInf;
                continue;
            }
            // Subnormals (e 0) share exponent 1's unit without the implicit bit.
            const auto m = static_cast<int64_t>((u & 0x7fffffu) | (e ? 0x800000u : 0u));
            bins_[e ? e : 1] += (u >> 31) ? -m : m;
        }
    }
    void merge(const ExactSum& o) {
        for (int i = 0; i < 256; ++i) bins_[i] += o.bins_[i];
        special_ |= o.special_;
    }
    // The sum, rounded to double: a function of the bins alone. Carries are moved up exactly
    // first (each bin left 0 or 1), so the sum from the top rounds like the exact value.
    double value() const {
        if (special_ & kNan || (special_ & kPosInf && special_ & kNegInf))
            return std::numeric_limits<double>::quiet_NaN();
        if (special_ & kPosInf) return std::numeric_limits<double>::infinity();
        if (special_ & kNegInf) return -std::numeric_limits<double>::infinity();
        int64_t b[256];
        std::memcpy(b, bins_, sizeof(b));
        for (int i = 1; i < 255; ++i) {
            const int64_t carry = b[i] >> 1;  // floor: the remainder is 0 or 1
            b[i] -= 2 * carry;
            b[i + 1] += carry;
        }
        double s = 0;
        for (int i = 255; i >= 1; --i)
            if (b[i]) s += std::ldexp(static_cast<double>(b[i]), i - 150);
        return s;
    }

private:
    static constexpr unsigned kNan = 1, kPosInf = 2, kNegInf = 4;
    int64_t bins_[256] = {};
    unsigned special_ = 0;
};

}  // namespace loom::device::cpu
