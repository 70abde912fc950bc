// Signed 64-bit arithmetic that records overflow instead of wrapping (undefined behaviour in
// C++): sizes computed from numbers a file or a message supplied (dims, strides, pads, block
// sizes) go through Checked, and the result is checked once, where it becomes a size.
#pragma once

#include <cstdint>
#include <optional>

namespace loom {

class Checked {
public:
    constexpr Checked(int64_t v = 0) : v_(v) {}  // NOLINT: implicit, so plain ints mix in

    // False once any step overflowed (or divided by zero).
    constexpr bool ok() const { return ok_; }
    // The value, or nullopt after an overflow.
    constexpr std::optional<int64_t> get() const { return ok_ ? std::optional<int64_t>(v_) : std::nullopt; }

    friend constexpr Checked operator+(Checked a, Checked b) {
        Checked r;
        r.ok_ = a.ok_ && b.ok_ && !__builtin_add_overflow(a.v_, b.v_, &r.v_);
        return r;
    }
    friend constexpr Checked operator-(Checked a, Checked b) {
        Checked r;
        r.ok_ = a.ok_ && b.ok_ && !__builtin_sub_overflow(a.v_, b.v_, &r.v_);
        return r;
    }
    friend constexpr Checked operator*(Checked a, Checked b) {
        Checked r;
        r.ok_ = a.ok_ && b.ok_ && !__builtin_mul_overflow(a.v_, b.v_, &r.v_);
        return r;
    }
    // Truncating division, as C++'s; a zero divisor (or INT64_MIN / -1) is an overflow.
    friend constexpr Checked operator/(Checked a, Checked b) {
        Checked r;
        r.ok_ = a.ok_ && b.ok_ && b.v_ != 0 && !(a.v_ == INT64_MIN && b.v_ == -1);
        r.v_ = r.ok_ ? a.v_ / b.v_ : 0;
        return r;
    }
    friend constexpr Checked operator%(Checked a, Checked b) {
        Checked r;
        r.ok_ = a.ok_ && b.ok_ && b.v_ != 0 && !(a.v_ == INT64_MIN && b.v_ == -1);
        r.v_ = r.ok_ ? a.v_ % b.v_ : 0;
        return r;
    }

private:
    int64_t v_ = 0;
    bool ok_ = true;
};

}  // namespace loom
