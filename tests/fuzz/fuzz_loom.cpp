// A compiled model (.loom) through its loader. The header's checksum is recomputed over the
// mutated contents first, so mutations reach the description and the validation behind it
// instead of stopping at the checksum (which the loader still checks).
#include <cstring>
#include <string>

#include "common/hash.hpp"
#include "compiler/model_file.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace loom;
    std::string bytes(fuzz::as_text(data, size));
    constexpr size_t kHeader = 40;  // compiler/model_file.hpp: the layout
    if (bytes.size() >= kHeader && bytes.compare(0, 8, "LOOMMODL") == 0) {
        uint64_t json_bytes = 0;
        std::memcpy(&json_bytes, bytes.data() + 16, 8);
        if (json_bytes <= bytes.size() - kHeader) {
            const size_t weights_at = kHeader + json_bytes + (64 - (kHeader + json_bytes) % 64) % 64;
            uint64_t sum = fnv1a(kFnvBasis, bytes.data() + kHeader, json_bytes);
            if (weights_at <= bytes.size()) sum = fnv1a(sum, bytes.data() + weights_at, bytes.size() - weights_at);
            std::memcpy(bytes.data() + 32, &sum, 8);
        }
    }
    Result<compiler::CompiledModel> m = compiler::load_compiled_model(fuzz::scratch_file("model.loom", bytes));
    if (m.ok()) (void)compiler::compiled_model_json(*m);
    return 0;
}
