// The integer F(4,3) block transforms (winograd_i8_impl.hpp) built for AVX2: eight int32 lanes
// (one YMM register) a vector. Called only after the CPU check.
#include "device/kernels/cpu/winograd_i8_impl.hpp"

namespace loom::device::cpu {

void winograd_i8_input_avx2(const WinogradI8Block& b, int16_t* v) { wi8_input(b, v); }

void winograd_i8_output_avx2(const int32_t* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, float* y, int64_t Ho,
                             int64_t Wo, int64_t oy0, int64_t ox0, const WinogradI8Epilogue* ep, bool stream) {
    wi8_output(m, es, ks, tiles, K, y, Ho, Wo, oy0, ox0, ep, stream);
}

}  // namespace loom::device::cpu
