// loomd: the pipeline daemon. This first version validates its configuration (the device spec
// and fault plan), brings the simulated NPU up and runs a self-test on it: `loomd --check` is
// what systemd's ExecStartPre runs. Serving pipelines arrives with the daemon issue.
#include <cstdio>
#include <vector>

#include "common/cli.hpp"
#include "common/log.hpp"
#include "device/runtime.hpp"

namespace {

using namespace loom;

// Uploads a pattern, runs one kernel and reads it back; fails if any byte is wrong.
Status self_test(device::Device& dev) {
    const device::KernelDef* k = device::find_kernel("eltwise");
    LOOM_ASSERT(k);
    constexpr size_t n = 4096;
    device::PinnedBuffer<float> a(n), b(n), c(n);
    for (size_t i = 0; i < n; ++i) {
        a[i] = static_cast<float>(i % 251) - 125.0f;
        b[i] = static_cast<float>((i * 7) % 113);
    }
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer da, dev.malloc(n * 4, "self-test a"));
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer db, dev.malloc(n * 4, "self-test b"));
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer dc, dev.malloc(n * 4, "self-test c"));
    device::Stream s = dev.create_stream();
    LOOM_TRY(s.copy_h2d(da.as<float>(), device::HostView<const float>(a)));
    LOOM_TRY(s.copy_h2d(db.as<float>(), device::HostView<const float>(b)));
    device::KernelLaunch l;
    LOOM_ASSIGN_OR_RETURN(auto ta, device::tensor_ref(da.as<float>(), {int64_t(n)}));
    LOOM_ASSIGN_OR_RETURN(auto tb, device::tensor_ref(db.as<float>(), {int64_t(n)}));
    LOOM_ASSIGN_OR_RETURN(auto tc, device::tensor_ref(dc.as<float>(), {int64_t(n)}));
    l.inputs = {ta, tb};
    l.outputs = {tc};
    l.attrs = {{"op", std::string("add")}, {"activation", std::string("relu")}};
    LOOM_TRY(s.launch(*k, std::move(l), "self-test"));
    LOOM_TRY(s.copy_d2h(device::HostView<float>(c), device::DevicePtr<const float>(dc.as<float>())));
    LOOM_TRY(s.synchronize().with_context("device self-test"));
    for (size_t i = 0; i < n; ++i)
        if (c[i] != std::max(a[i] + b[i], 0.0f))
            return make_error(StatusCode::INTERNAL, "device self-test: element {} is {}, expected {}", i, c[i],
                              std::max(a[i] + b[i], 0.0f));
    return {};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"loomd: the Loom pipeline daemon", "loomd"};
    cli::CommonOptions common;
    cli::add_common_options(app, common);
    std::string device_name = "edge", faults;
    bool check = false;
    app.add_option("--device", device_name, "device preset (edge, dc) or .toml spec")->capture_default_str();
    app.add_option("--faults", faults, "fault plan, e.g. launch=3,copy=5,alloc=2,stall=aicore:4");
    app.add_flag("--check", check, "validate the configuration, self-test the device, and exit")->required();
    return cli::run_main(app, common, argc, argv, [&]() -> Status {
        LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(device_name));
        device::DeviceOptions options;
        if (!faults.empty()) LOOM_TRY(device::parse_fault_plan(faults, "--faults", options.faults));
        LOOM_ASSIGN_OR_RETURN(auto dev, device::Device::create(spec, options));
        LOOM_TRY(self_test(*dev));
        device::DeviceStats st = dev->stats();
        log::info("loomd", "device={} spec_hash={:016x} self_test=ok sim_us={:.3f} wall_us={:.1f}", spec.name,
                  spec.hash(), device::sim_to_us(st.sim_now), st.wall_ms * 1e3);
        std::printf("loomd: configuration OK: device '%s' (%s), self-test passed in %.3f us simulated, %.1f us wall\n",
                    spec.name.c_str(), spec.description.c_str(), device::sim_to_us(st.sim_now), st.wall_ms * 1e3);
        return {};
    });
}
