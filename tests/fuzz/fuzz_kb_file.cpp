// A knowledge-base file (SQLite) as `loomc kb` and the tuner open and use it: damaged pages, a
// foreign or altered schema, rows of the wrong type or that disagree with their key must end in
// a Status that names the file, never in a crash, a hang or a huge allocation.
#include <filesystem>

#include "tests/fuzz/fuzz.hpp"
#include "tuner/kb.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace loom;
    const std::string path = fuzz::scratch_file("kb.db", fuzz::as_text(data, size));
    std::error_code ignored;  // a previous input's WAL must not replay into this one
    std::filesystem::remove(path + "-wal", ignored);
    std::filesystem::remove(path + "-shm", ignored);
    tuner::KbOptions options;
    options.busy_wait_ms = 0;
    Result<tuner::KnowledgeBase> kb = tuner::KnowledgeBase::open(path, options);
    if (!kb.ok()) return 0;
    tuner::KbKey key;
    key.kernel = "conv";
    key.signature = "f16,f16->f16";
    key.dims = {{1, 16, 8, 8}, {16, 16, 3, 3}, {1, 16, 8, 8}};
    key.attrs = "group=1";
    key.spec_hash = 0x0123456789abcdefull;
    key.cost_model_version = 1;
    (void)kb->integrity_check();
    (void)kb->lookup(key);
    (void)kb->nearest(key, 4);
    (void)kb->list();
    (void)kb->show("0123");
    (void)kb->export_json();
    tuner::KbRecord r;
    r.key = key;
    r.spec_name = "edge";
    device::CubeTiling t;
    t.m_l1 = t.n_l1 = t.k_l1 = 32;
    t.m_l0 = t.n_l0 = t.k_l0 = 16;
    r.tiling = t;
    r.cost_ns = 100;
    r.default_cost_ns = 150;
    r.method = "ga";
    (void)kb->put(r);
    tuner::KbPrune prune;
    prune.spec = "edge";
    (void)kb->prune(prune);
    return 0;
}
