// direct_conv's row (direct_conv_impl.hpp) built for AVX2 + FMA: one vector of eight output
// pixels a pass. Called only after the CPU check.
#include "device/kernels/cpu/direct_conv_impl.hpp"

namespace loom::device::cpu {

void direct_conv_row_avx2(const DirectRow& r) { dc_row(r); }

}  // namespace loom::device::cpu
