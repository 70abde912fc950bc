// Two restore engines of one model on one device context against the same two engines on two
// contexts (two devices, as two pipelines each with its own device had it before the context):
// the device memory each arrangement takes, what the shared weights save, how long the second
// engine takes to prepare (the model is neither compiled nor uploaded again), and the frames
// over wall time of both engines restoring at once against each alone, on the same frames.
//
//   loom_bench_context --models DIR [--size 640x480] [--frames 6] [--device edge] [--json]
//                      [--model NAME ...]
//
// Frames: seeded 4:2:0 samples of the size given. The compile cache is used (its default folder)
// so that both arrangements start from the same compiled model.
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file.hpp"
#include "common/thread_pool.hpp"
#include "compiler/compile_cache.hpp"
#include "restore/engine.hpp"

namespace {

using namespace loom;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

template <typename T>
T unwrap(Result<T> r, const std::string& what) {
    if (!r.ok()) {
        std::fprintf(stderr, "loom_bench_context: %s: %s\n", what.c_str(), r.status().to_string().c_str());
        std::exit(1);
    }
    return std::move(*r);
}

std::shared_ptr<restore::DeviceContext> context(const std::string& device) {
    restore::ContextOptions o;
    o.device = device;
    o.threads = ThreadPool::threads_from_environment();
    return unwrap(restore::DeviceContext::create(o), "context");
}

// Restores `frames` frames through every engine at once (one submitting thread each); returns
// the wall ms from the first submit to the last completion, and in `done_ms` when each engine
// finished (equal shares of the pool finish together).
double restore_all(const std::vector<restore::Engine*>& engines, const std::vector<uint8_t>& frame, int frames,
                   std::vector<double>* done_ms = nullptr) {
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    std::vector<double> done(engines.size());
    for (size_t k = 0; k < engines.size(); ++k)
        threads.emplace_back([e = engines[k], &frame, frames, &done, k, t0] {
            const FrameView v = FrameView::tight(e->input_format().layout, frame.data());
            for (int i = 0; i < frames; ++i) {
                Status st = e->submit(v, [](restore::RestoredFrame r) {
                    if (!r.status.ok()) std::fprintf(stderr, "frame failed: %s\n", r.status.to_string().c_str());
                });
                if (!st.ok()) std::fprintf(stderr, "submit failed: %s\n", st.to_string().c_str());
            }
            e->flush();
            done[k] = ms_since(t0);
        });
    for (std::thread& t : threads) t.join();
    if (done_ms) *done_ms = done;
    return ms_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"two restore engines on one device context against two contexts"};
    std::string models_dir, size = "640x480", device = "edge";
    std::vector<std::string> models{"realesr-animevideov3-x2", "realcugan-se/up2x-conservative",
                                    "waifu2x-cunet/noise0_scale2.0x_model", "waifu2x-upconv7/noise0_scale2.0x_model"};
    int frames = 6;
    bool json = false;
    app.add_option("--models", models_dir, "the models folder (scripts/fetch-models)")->required();
    app.add_option("--model", models, "model names (repeatable)");
    app.add_option("--size", size, "frame size WxH")->capture_default_str();
    app.add_option("--frames", frames, "frames per engine in the throughput rows")->capture_default_str();
    app.add_option("--device", device, "device preset")->capture_default_str();
    app.add_flag("--json", json, "print JSON");
    CLI11_PARSE(app, argc, argv);
    int w = 0, h = 0;
    if (std::sscanf(size.c_str(), "%dx%d", &w, &h) != 2 || w < 1 || h < 1) {
        std::fprintf(stderr, "--size %s: expected WxH\n", size.c_str());
        return 2;
    }
    const FrameLayout layout{PixelFormat::YUV420P, w, h};
    std::vector<uint8_t> frame(layout.bytes());
    std::mt19937 rng(1);
    for (uint8_t& x : frame) x = static_cast<uint8_t>(16 + rng() % 220);

    nlohmann::json rows = nlohmann::json::array();
    for (const std::string& name : models) {
        restore::EngineOptions o;
        o.model.model = name;
        o.model.where = name;
        o.model.models_dir = models_dir;
        o.model.cache_dir = compiler::default_cache_dir();
        const restore::FrameFormat in{layout, {}};

        // Shared: one context, two engines.
        auto shared = context(device);
        const size_t base = shared->device().stats().memory_used;
        auto t0 = Clock::now();
        auto a = unwrap(restore::Engine::create(shared, o, in), name);
        const double prepare_first_ms = ms_since(t0);
        t0 = Clock::now();
        double rss0 = resident_memory().rss_mib;
        auto b = unwrap(restore::Engine::create(shared, o, in), name);
        const double prepare_second_ms = ms_since(t0);
        const double host_second_mib = resident_memory().rss_mib - rss0;
        const size_t mem_shared = shared->device().stats().memory_used - base;
        const restore::EngineStats sa = a->stats();

        // Separate: two contexts, one engine each.
        auto c1 = context(device), c2 = context(device);
        auto e1 = unwrap(restore::Engine::create(c1, o, in), name);
        rss0 = resident_memory().rss_mib;
        t0 = Clock::now();
        auto e2 = unwrap(restore::Engine::create(c2, o, in), name);
        const double prepare_separate_ms = ms_since(t0);
        const double host_separate_mib = resident_memory().rss_mib - rss0;
        const size_t mem_separate = c1->device().stats().memory_used + c2->device().stats().memory_used;
        e1.reset();
        e2.reset();

        // Throughput on the shared device: one engine alone, then both at once.
        restore_all({a.get()}, frame, 1);  // warm
        const double alone_ms = restore_all({a.get()}, frame, frames);
        std::vector<double> done;
        const double both_ms = restore_all({a.get(), b.get()}, frame, frames, &done);
        const double alone_fps = frames * 1e3 / alone_ms, both_fps = 2.0 * frames * 1e3 / both_ms;

        nlohmann::json r = {{"model", name},
                            {"size", size},
                            {"weight_bytes", sa.weight_bytes},
                            {"engine_reserved_bytes", sa.device_memory_reserved},
                            {"device_memory_two_contexts", mem_separate},
                            {"device_memory_one_context", mem_shared},
                            {"saved_bytes", mem_separate - mem_shared},
                            {"prepare_first_ms", prepare_first_ms},
                            {"prepare_second_ms", prepare_second_ms},
                            {"prepare_on_own_context_ms", prepare_separate_ms},
                            {"host_mib_second_engine", host_second_mib},
                            {"host_mib_engine_on_own_context", host_separate_mib},
                            {"fps_one_engine", alone_fps},
                            {"fps_two_engines_at_once", both_fps},
                            {"two_at_once_done_ms", done}};
        rows.push_back(r);
        if (!json)
            std::printf("%-40s %s: weights %.2f MiB, per engine %.1f MiB more; two contexts %.1f MiB, one context "
                        "%.1f MiB (saved %.2f MiB); prepare %.0f ms then %.0f ms; %.2f fps alone, %.2f fps for two "
                        "at once (done at %.0f and %.0f ms)\n",
                        name.c_str(), size.c_str(), sa.weight_bytes / 1048576.0,
                        sa.device_memory_reserved / 1048576.0, mem_separate / 1048576.0, mem_shared / 1048576.0,
                        (mem_separate - mem_shared) / 1048576.0, prepare_first_ms, prepare_second_ms, alone_fps,
                        both_fps, done[0], done[1]);
    }
    if (json) std::printf("%s\n", rows.dump(2).c_str());
    return 0;
}
