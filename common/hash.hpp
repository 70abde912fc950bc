// FNV-1a 64: the checksum of compiled-model files and the content hashes of the compile cache.
// Not cryptographic; it detects corruption and change, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace loom {

inline constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

// Folds `n` bytes at `data` into the running hash `h` (start from kFnvBasis).
inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

// Incremental hashing of mixed fields; every field is length- or width-prefixed so that
// ("ab", "c") and ("a", "bc") differ.
class Hasher {
public:
    Hasher& bytes(const void* data, size_t n) {
        u64(n);
        h_ = fnv1a(h_, data, n);
        return *this;
    }
    Hasher& str(std::string_view s) { return bytes(s.data(), s.size()); }
    Hasher& u64(uint64_t v) {
        h_ = fnv1a(h_, &v, sizeof v);
        return *this;
    }
    Hasher& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
    uint64_t digest() const { return h_; }

private:
    uint64_t h_ = kFnvBasis;
};

}  // namespace loom
