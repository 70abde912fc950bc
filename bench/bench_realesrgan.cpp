// Operator-library benchmark: Real-ESRGAN animevideov3 (SRVGGNetCompact: 3x3 convs with PReLU,
// a 3x3 conv to 3 r^2 channels, PixelShuffle, plus the nearest-upsampled input) on the host
// kernels, fp32, one frame at a time. bench/realesrgan.sh runs it next to ONNX Runtime on the
// same weights and input and compares speed and accuracy.
//
// The model comes from its ncnn files (.param + .bin from scripts/fetch-models). This loader
// reads the layer types SRVGGNetCompact uses (Input, Split, Convolution, PReLU, PixelShuffle,
// Interp, BinaryOp) and refuses anything else by name; the general importer is the compiler's.
// A PReLU that alone consumes a Convolution's output is fused into it, as the compiler does.
//
// Usage: loom_bench_realesrgan --param P --bin B --shape 1x3xHxW [--input in.f32]
//          [--output out.f32] [--threads 2] [--warmup 1] [--iters 5] [--isa avx2|generic]
// Prints one JSON line: ms per frame (median, min, all), the direct-convolution GFLOP per frame
// and GFLOPS, and the FMA peak of the same threads measured here.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/types.hpp"

namespace loom::bench {
double fma_peak_gflops_avx2(double seconds);
}

namespace {

using namespace loom;
using namespace loom::device;

struct Layer {
    std::string type, name;
    std::vector<std::string> in, out;
    std::map<int, std::string> params;
    int line = 0;

    // Reads param `key` as T (int64_t or double), `fallback` when the layer does not set it.
    template <typename T>
    Result<T> param(int key, T fallback) const {
        auto it = params.find(key);
        if (it == params.end()) return fallback;
        try {
            if constexpr (std::is_integral_v<T>) return static_cast<T>(std::stoll(it->second));
            else return static_cast<T>(std::stod(it->second));
        } catch (const std::exception&) {
            return make_error(StatusCode::PARSE_ERROR, "line {}: layer {}: param {}={} is not {}", line, name, key,
                              it->second, std::is_integral_v<T> ? "an integer" : "a number");
        }
    }
    Result<int64_t> param_int(int key, int64_t fallback) const { return param<int64_t>(key, fallback); }
    Result<double> param_float(int key, double fallback) const { return param<double>(key, fallback); }
};

Result<std::vector<Layer>> read_param(const std::string& path) {
    std::ifstream f(path);
    if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot open", path);
    std::string line;
    int64_t magic = 0, layers = 0, blobs = 0;
    if (!(f >> magic) || magic != 7767517) return make_error(StatusCode::PARSE_ERROR, "{}:1: not an ncnn param file", path);
    if (!(f >> layers >> blobs) || layers <= 0 || layers > 100000)
        return make_error(StatusCode::PARSE_ERROR, "{}:2: bad layer/blob counts", path);
    std::getline(f, line);
    std::vector<Layer> out;
    for (int n = 3; std::getline(f, line); ++n) {
        std::istringstream s(line);
        Layer l;
        l.line = n;
        size_t nin = 0, nout = 0;
        if (!(s >> l.type)) continue;
        if (!(s >> l.name >> nin >> nout) || nin > 64 || nout > 64)
            return make_error(StatusCode::PARSE_ERROR, "{}:{}: malformed layer line", path, n);
        l.in.resize(nin), l.out.resize(nout);
        for (auto& b : l.in) s >> b;
        for (auto& b : l.out) s >> b;
        std::string kv;
        while (s >> kv) {
            auto eq = kv.find('=');
            if (eq == std::string::npos)
                return make_error(StatusCode::PARSE_ERROR, "{}:{}: layer {}: '{}' is not key=value", path, n, l.name, kv);
            l.params[std::stoi(kv.substr(0, eq))] = kv.substr(eq + 1);
        }
        out.push_back(std::move(l));
    }
    if (static_cast<int64_t>(out.size()) != layers)
        return make_error(StatusCode::PARSE_ERROR, "{}: header says {} layers, file has {}", path, layers, out.size());
    return out;
}

// Sequential reader of the .bin weights, ncnn's ModelBin rules: type 0 data starts with a
// 4-byte tag (0: fp32, 0x01306B47: fp16, padded to 4 bytes); type 1 data is raw fp32.
struct Bin {
    std::vector<char> data;
    size_t pos = 0;
    std::string path;

    Result<std::vector<float>> raw(size_t n, const Layer& l) {
        if (data.size() - pos < n * 4)
            return make_error(StatusCode::PARSE_ERROR, "{}: truncated at layer {} (needs {} more bytes)", path, l.name, n * 4);
        std::vector<float> v(n);
        std::memcpy(v.data(), data.data() + pos, n * 4);
        pos += n * 4;
        return v;
    }
    Result<std::vector<float>> tagged(size_t n, const Layer& l) {
        if (data.size() - pos < 4) return make_error(StatusCode::PARSE_ERROR, "{}: truncated at layer {}", path, l.name);
        uint32_t tag;
        std::memcpy(&tag, data.data() + pos, 4);
        pos += 4;
        if (tag == 0) return raw(n, l);
        if (tag != 0x01306B47)
            return make_error(StatusCode::UNSUPPORTED, "{}: layer {}: weight storage tag {:#x} (fp32 0 and fp16 0x01306b47 are read)",
                              path, l.name, tag);
        const size_t bytes = (n * 2 + 3) / 4 * 4;
        if (data.size() - pos < bytes)
            return make_error(StatusCode::PARSE_ERROR, "{}: truncated at layer {}", path, l.name);
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) {
            f16 h;
            std::memcpy(&h.bits, data.data() + pos + 2 * i, 2);
            v[i] = f16_to_f32(h);
        }
        pos += bytes;
        return v;
    }
};

struct Blob {
    std::vector<int64_t> dims;
    std::vector<float> data;
    TensorRef ref() {
        TensorRef t;
        t.dtype = DType::F32;
        for (int64_t d : dims) t.dims[static_cast<size_t>(t.rank++)] = d;
        t.data = data.data();
        return t;
    }
};

struct Step {
    const KernelDef* kernel = nullptr;
    std::vector<std::string> in;  // blob names; "#w", "#b", "#s" are the step's own constants
    std::string out;
    KernelAttrs attrs;
    std::vector<int64_t> wdims;
    std::vector<float> w, b, s;
    std::vector<int64_t> out_dims;  // filled by plan()
};

struct Model {
    std::vector<Step> steps;
    std::map<std::string, std::string> alias;  // Split outputs
    std::string input, output;
    double conv_flops = 0;
};

const KernelDef* kernel(const char* name) {
    const KernelDef* k = find_kernel(name);
    LOOM_ASSERT_MSG(k != nullptr, "kernel {} is not registered", name);
    return k;
}

Result<Model> load(const std::string& param, const std::string& bin_path) {
    LOOM_ASSIGN_OR_RETURN(std::vector<Layer> layers, read_param(param));
    Bin bin;
    bin.path = bin_path;
    {
        std::ifstream f(bin_path, std::ios::binary);
        if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot open", bin_path);
        bin.data.assign(std::istreambuf_iterator<char>(f), {});
    }
    std::map<std::string, int> consumers;
    for (const Layer& l : layers)
        for (const auto& b : l.in) ++consumers[b];
    Model m;
    auto resolve = [&](const std::string& b) {
        auto it = m.alias.find(b);
        return it == m.alias.end() ? b : it->second;
    };
    for (size_t i = 0; i < layers.size(); ++i) {
        const Layer& l = layers[i];
        if (l.type == "Input") {
            m.input = l.out.at(0);
        } else if (l.type == "Split") {
            for (const auto& o : l.out) m.alias[o] = resolve(l.in.at(0));
        } else if (l.type == "Convolution") {
            Step st;
            st.kernel = kernel("conv");
            LOOM_ASSIGN_OR_RETURN(int64_t k, l.param_int(0, 0));
            LOOM_ASSIGN_OR_RETURN(int64_t kw, l.param_int(1, 0));
            LOOM_ASSIGN_OR_RETURN(int64_t kh, l.param_int(11, kw));
            LOOM_ASSIGN_OR_RETURN(int64_t dil, l.param_int(2, 1));
            LOOM_ASSIGN_OR_RETURN(int64_t stride, l.param_int(3, 1));
            LOOM_ASSIGN_OR_RETURN(int64_t pad, l.param_int(4, 0));
            LOOM_ASSIGN_OR_RETURN(int64_t bias, l.param_int(5, 0));
            LOOM_ASSIGN_OR_RETURN(int64_t wsize, l.param_int(6, 0));
            LOOM_ASSIGN_OR_RETURN(int64_t act, l.param_int(9, 0));
            if (k <= 0 || kw <= 0 || kh <= 0 || wsize <= 0 || wsize % (k * kh * kw))
                return make_error(StatusCode::PARSE_ERROR, "{}:{}: layer {}: inconsistent sizes", param, l.line, l.name);
            if (act != 0)
                return make_error(StatusCode::UNSUPPORTED, "{}:{}: layer {}: fused activation 9={}", param, l.line, l.name, act);
            const int64_t c = wsize / (k * kh * kw);
            st.wdims = {k, c, kh, kw};
            LOOM_ASSIGN_OR_RETURN(st.w, bin.tagged(static_cast<size_t>(wsize), l));
            if (bias) {
                LOOM_ASSIGN_OR_RETURN(st.b, bin.raw(static_cast<size_t>(k), l));
            }
            st.attrs = {{"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                        {"strides", std::vector<int64_t>{stride, stride}},
                        {"dilations", std::vector<int64_t>{dil, dil}}};
            st.in = {resolve(l.in.at(0)), "#w", bias ? "#b" : "", "", ""};
            st.out = l.out.at(0);
            // Fuse a following PReLU that is the only consumer.
            if (i + 1 < layers.size() && layers[i + 1].type == "PReLU" && consumers[st.out] == 1 &&
                layers[i + 1].in.at(0) == st.out) {
                const Layer& p = layers[++i];
                LOOM_ASSIGN_OR_RETURN(int64_t ns, p.param_int(0, 1));
                LOOM_ASSIGN_OR_RETURN(st.s, bin.raw(static_cast<size_t>(ns), p));
                st.attrs.set("activation", std::string("prelu"));
                st.in[4] = "#s";
                st.out = p.out.at(0);
            }
            m.steps.push_back(std::move(st));
        } else if (l.type == "PixelShuffle") {
            Step st;
            st.kernel = kernel("depth_to_space");
            LOOM_ASSIGN_OR_RETURN(int64_t r, l.param_int(0, 1));
            st.attrs = {{"blocksize", r}, {"mode", std::string("CRD")}};
            st.in = {resolve(l.in.at(0))};
            st.out = l.out.at(0);
            m.steps.push_back(std::move(st));
        } else if (l.type == "Interp") {
            Step st;
            st.kernel = kernel("resize");
            LOOM_ASSIGN_OR_RETURN(int64_t type, l.param_int(0, 0));
            LOOM_ASSIGN_OR_RETURN(double hs, l.param_float(1, 1));
            LOOM_ASSIGN_OR_RETURN(double ws, l.param_float(2, 1));
            if (type != 1)
                return make_error(StatusCode::UNSUPPORTED, "{}:{}: layer {}: Interp type {} (1 = nearest is read)", param,
                                  l.line, l.name, type);
            // ncnn's nearest: source = floor(destination / scale).
            st.attrs = {{"mode", std::string("nearest")},
                        {"coordinate_transformation_mode", std::string("asymmetric")},
                        {"nearest_mode", std::string("floor")},
                        {"scales", std::vector<double>{1, 1, hs, ws}}};
            st.in = {resolve(l.in.at(0))};
            st.out = l.out.at(0);
            m.steps.push_back(std::move(st));
        } else if (l.type == "BinaryOp") {
            LOOM_ASSIGN_OR_RETURN(int64_t op, l.param_int(0, 0));
            if (op != 0)
                return make_error(StatusCode::UNSUPPORTED, "{}:{}: layer {}: BinaryOp {} (0 = add is read)", param, l.line,
                                  l.name, op);
            Step st;
            st.kernel = kernel("binary");
            st.attrs = {{"op", std::string("add")}};
            st.in = {resolve(l.in.at(0)), resolve(l.in.at(1))};
            st.out = l.out.at(0);
            m.steps.push_back(std::move(st));
        } else {
            return make_error(StatusCode::UNSUPPORTED, "{}:{}: layer {} has type {} (this benchmark reads "
                              "SRVGGNetCompact's layers only)", param, l.line, l.name, l.type);
        }
    }
    if (bin.pos != bin.data.size())
        return make_error(StatusCode::PARSE_ERROR, "{}: {} bytes left after the last layer", bin_path, bin.data.size() - bin.pos);
    if (m.input.empty() || m.steps.empty()) return make_error(StatusCode::PARSE_ERROR, "{}: no input or no layers", param);
    m.output = m.steps.back().out;
    return m;
}

// Output shapes of every step for input dims `in`, and the direct-convolution flops.
void plan(Model& m, const std::vector<int64_t>& in) {
    std::map<std::string, std::vector<int64_t>> dims{{m.input, in}};
    m.conv_flops = 0;
    for (Step& st : m.steps) {
        const auto& x = dims.at(st.in[0]);
        if (st.kernel->name == std::string("conv")) {
            st.out_dims = {x[0], st.wdims[0], x[2], x[3]};  // 3x3, pad 1, stride 1 in these models
            m.conv_flops += 2.0 * static_cast<double>(x[0] * st.wdims[0] * x[2] * x[3] * st.wdims[1] * st.wdims[2] * st.wdims[3]);
        } else if (st.kernel->name == std::string("depth_to_space")) {
            const int64_t r = *st.attrs.get_int("blocksize");
            st.out_dims = {x[0], x[1] / (r * r), x[2] * r, x[3] * r};
        } else if (st.kernel->name == std::string("resize")) {
            const auto sc = *st.attrs.get_floats("scales");
            st.out_dims = {x[0], x[1], static_cast<int64_t>(std::floor(static_cast<double>(x[2]) * sc[2])),
                           static_cast<int64_t>(std::floor(static_cast<double>(x[3]) * sc[3]))};
        } else {
            st.out_dims = x;
        }
        dims[st.out] = st.out_dims;
    }
}

Status run(Model& m, std::map<std::string, Blob>& blobs, ThreadPool& pool) {
    for (Step& st : m.steps) {
        KernelLaunch l;
        for (const std::string& name : st.in) {
            if (name == "#w") l.inputs.push_back(TensorRef{DType::F32, 4, {st.wdims[0], st.wdims[1], st.wdims[2], st.wdims[3]}, st.w.data(), 0});
            else if (name == "#b") l.inputs.push_back(TensorRef{DType::F32, 1, {static_cast<int64_t>(st.b.size())}, st.b.data(), 0});
            else if (name == "#s") l.inputs.push_back(TensorRef{DType::F32, 1, {static_cast<int64_t>(st.s.size())}, st.s.data(), 0});
            else if (name.empty()) l.inputs.push_back(TensorRef{DType::F32, 1, {0}, nullptr, 0});
            else l.inputs.push_back(blobs.at(name).ref());
        }
        Blob& out = blobs[st.out];
        if (out.dims != st.out_dims) {
            out.dims = st.out_dims;
            int64_t n = 1;
            for (int64_t d : out.dims) n *= d;
            out.data.resize(static_cast<size_t>(n));
        }
        l.outputs = {out.ref()};
        l.attrs = st.attrs;
        LOOM_TRY(st.kernel->run(l, pool).with_context(st.out));
    }
    return {};
}

std::vector<int64_t> parse_shape(const std::string& s) {
    std::vector<int64_t> d;
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, 'x')) d.push_back(std::stoll(part));
    return d;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app("Real-ESRGAN animevideov3 on Loom's host kernels");
    std::string param, bin, shape = "1x3x240x320", input, output, isa_want;
    int threads = 2, warmup = 1, iters = 5;
    app.add_option("--param", param, "ncnn .param")->required();
    app.add_option("--bin", bin, "ncnn .bin")->required();
    app.add_option("--shape", shape, "input NxCxHxW");
    app.add_option("--input", input, "raw float32 input (default: uniform [0,1), fixed seed)");
    app.add_option("--output", output, "write the output as raw float32");
    app.add_option("--threads", threads, "threads running the kernels");
    app.add_option("--warmup", warmup);
    app.add_option("--iters", iters);
    app.add_option("--isa", isa_want, "avx2 or generic (default: detected)");
    CLI11_PARSE(app, argc, argv);
    if (isa_want == "generic") cpu::set_isa(cpu::Isa::GENERIC);
    else if (isa_want == "avx2") cpu::set_isa(cpu::Isa::AVX2);

    auto fail = [](const Status& s) {
        std::fprintf(stderr, "loom_bench_realesrgan: %s\n", s.to_string().c_str());
        return 1;
    };
    auto model = load(param, bin);
    if (!model.ok()) return fail(model.status());
    const std::vector<int64_t> dims = parse_shape(shape);
    if (dims.size() != 4 || dims[1] != 3) return fail(Status(StatusCode::INVALID_ARGUMENT, "--shape must be 1x3xHxW"));
    plan(*model, dims);

    std::map<std::string, Blob> blobs;
    Blob& x = blobs[model->input];
    x.dims = dims;
    x.data.resize(static_cast<size_t>(dims[0] * dims[1] * dims[2] * dims[3]));
    if (!input.empty()) {
        std::ifstream f(input, std::ios::binary);
        if (!f.read(reinterpret_cast<char*>(x.data.data()), static_cast<std::streamsize>(x.data.size() * 4)))
            return fail(Status(StatusCode::IO_ERROR, input + ": cannot read " + std::to_string(x.data.size()) + " floats"));
    } else {
        std::mt19937 rng(20261122);
        std::uniform_real_distribution<float> u(0.0f, 1.0f);
        for (float& v : x.data) v = u(rng);
    }

    // The kernels run inside a pool job, as on the device: the job's worker plus the others.
    ThreadPool pool(static_cast<unsigned>(threads));
    auto on_pool = [&](auto fn) {
        std::promise<Status> done;
        auto fut = done.get_future();
        pool.submit([&] { done.set_value(fn()); });
        return fut.get();
    };
    std::vector<double> ms;
    for (int i = 0; i < warmup + iters; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        Status st = on_pool([&] { return run(*model, blobs, pool); });
        double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!st.ok()) return fail(st);
        if (i >= warmup) ms.push_back(t);
    }
    if (!output.empty()) {
        const Blob& y = blobs.at(model->output);
        std::ofstream f(output, std::ios::binary);
        f.write(reinterpret_cast<const char*>(y.data.data()), static_cast<std::streamsize>(y.data.size() * 4));
        if (!f) return fail(Status(StatusCode::IO_ERROR, output + ": cannot write"));
    }
    // FMA peak of the same number of threads, measured now.
    double peak = 0;
    if (cpu::isa() == cpu::Isa::AVX2) {
        std::vector<std::future<double>> f;
        for (int t = 0; t < threads; ++t) f.push_back(std::async(std::launch::async, [] { return bench::fma_peak_gflops_avx2(0.3); }));
        for (auto& x : f) peak += x.get();
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    nlohmann::json j{{"model", param}, {"shape", shape}, {"threads", threads}, {"isa", cpu::isa_name(cpu::isa())},
                     {"ms_median", median}, {"ms_min", sorted.front()}, {"ms_all", ms},
                     {"conv_gflop", model->conv_flops / 1e9}, {"gflops", model->conv_flops / 1e9 / (median / 1e3)},
                     {"fma_peak_gflops", peak}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
}
