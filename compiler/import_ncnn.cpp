#include "compiler/import_ncnn.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "common/file.hpp"
#include "common/text.hpp"

namespace loom::compiler {

namespace {

static_assert(std::endian::native == std::endian::little, "the .bin reader assumes a little-endian host");

constexpr std::string_view kMagic = "7767517";
constexpr int kParamIdCount = 32;                          // NCNN_MAX_PARAM_COUNT: ids 0..31
constexpr int kArrayKeyBase = -23300;                      // an array parameter id k is written as -23300 - k
constexpr int kParamShapeHints = 30, kParamFeatMask = 31;  // read by ncnn's Net for every layer
constexpr int64_t kUnset = -233;                           // ncnn's "not given"; also "SAME_UPPER" for paddings
constexpr int64_t kSameLower = -234;
constexpr int64_t kSliceToEnd = std::numeric_limits<int64_t>::max();
constexpr int64_t kOnnxFloat = 1, kOnnxInt64 = 7;  // TensorProto data types, for Cast's "to"
constexpr int64_t kCountMax = int64_t{1} << 20;    // layers or blobs in one .param
constexpr uintmax_t kParamBytesMax = uintmax_t{64} << 20;
constexpr uintmax_t kBinBytesMax = uintmax_t{16} << 30;

// Storage tags of ModelBin::load(type 0) data (ncnn src/modelbin.cpp).
constexpr uint32_t kTagF16 = 0x01306B47, kTagI8 = 0x000D4B38, kTagF32Scaled = 0x0002C056;

// One "id=value" of a layer line. Scalars keep whether they were written as floats (with '.' or
// an exponent, ncnn's rule); array elements convert to double, remembering the same.
struct Param {
    bool array = false;
    bool is_float = false;
    int64_t i = 0;
    double f = 0;
    std::vector<double> values;
    std::vector<bool> value_is_float;
};

struct Layer {
    int line = 0;
    std::string type, name;
    std::vector<std::string> bottoms, tops;
    std::map<int, Param> params;
};

// A blob: the value holding it and its ncnn rank (1: w, 2: h x w, 3: c x h x w); the graph
// value has one more, leading axis of size 1.
struct Blob {
    int value = -1;
    int rank = 3;
};

// A fused activation (activation_type 9=, activation_params -23310=), ncnn's fused_activation.h.
struct Activation {
    int64_t type = 0;
    std::vector<double> params;
};

// One Slice of a Crop: graph axis, start, end.
struct Cut {
    int64_t axis, start, end;
};


// Returns `s` escaped and in single quotes: how every name read from a file appears in a message.
std::string quote(std::string_view s) {
    std::string out(1, '\'');
    out += printable(s);  // appended, not operator+: GCC 12 warns falsely (-Wrestrict) on "'" + s
    out += '\'';
    return out;
}

std::optional<int64_t> parse_int(std::string_view s) {
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
    return v;
}

std::optional<double> parse_float(std::string_view s) {
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
    return v;
}

// ncnn's vstr_is_float: a '.' or an exponent makes a float.
bool looks_float(std::string_view s) { return s.find_first_of(".eE") != std::string_view::npos; }

// Parses one "id=value" or "-233xx=n,v1,...,vn" token into `params`.
Status parse_param(std::string_view token, std::map<int, Param>& params, const std::string& where) {
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos)
        return make_error(StatusCode::PARSE_ERROR, "{}: parameter {} is not id=value", where, quote(token));
    const std::optional<int64_t> key = parse_int(token.substr(0, eq));
    if (!key) return make_error(StatusCode::PARSE_ERROR, "{}: parameter {} has no integer id", where, quote(token));
    const std::string_view text = token.substr(eq + 1);
    Param p;
    int64_t id = *key;
    if (id <= kArrayKeyBase) {
        id = kArrayKeyBase - id;
        p.array = true;
        std::vector<std::string_view> parts;
        for (size_t start = 0;;) {
            const size_t comma = text.find(',', start);
            parts.push_back(
                text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
            if (comma == std::string_view::npos) break;
            start = comma + 1;
        }
        const std::optional<int64_t> count = parse_int(parts[0]);
        if (!count || *count < 0)
            return make_error(StatusCode::PARSE_ERROR, "{}: array parameter {} does not start with its length", where,
                              quote(token));
        if (static_cast<size_t>(*count) != parts.size() - 1)
            return make_error(StatusCode::PARSE_ERROR, "{}: array parameter {} says {} values but has {}", where,
                              quote(token), *count, parts.size() - 1);
        for (size_t i = 1; i < parts.size(); ++i) {
            const bool is_float = looks_float(parts[i]);
            std::optional<double> v;
            if (is_float) {
                v = parse_float(parts[i]);
            } else if (const auto iv = parse_int(parts[i]); iv && *iv >= INT32_MIN && *iv <= INT32_MAX) {
                v = static_cast<double>(*iv);
            }
            if (!v)
                return make_error(StatusCode::PARSE_ERROR, "{}: array parameter {}: {} is not a number", where,
                                  quote(token), quote(parts[i]));
            p.values.push_back(*v);
            p.value_is_float.push_back(is_float);
        }
    } else {
        p.is_float = looks_float(text);
        if (p.is_float) {
            const std::optional<double> v = parse_float(text);
            if (!v)
                return make_error(StatusCode::PARSE_ERROR, "{}: parameter {}: {} is not a number", where, quote(token),
                                  quote(text));
            p.f = *v;
        } else {
            const std::optional<int64_t> v = parse_int(text);
            if (!v)
                return make_error(StatusCode::PARSE_ERROR, "{}: parameter {}: {} is not a number", where, quote(token),
                                  quote(text));
            if (*v < INT32_MIN || *v > INT32_MAX)
                return make_error(StatusCode::PARSE_ERROR, "{}: parameter {} does not fit ncnn's 32-bit int", where,
                                  quote(token));
            p.i = *v;
            p.f = static_cast<double>(*v);
        }
    }
    if (id < 0 || id >= kParamIdCount)
        return make_error(StatusCode::PARSE_ERROR, "{}: parameter id {} is outside ncnn's 0..{}", where, id,
                          kParamIdCount - 1);
    if (!params.emplace(static_cast<int>(id), std::move(p)).second)
        return make_error(StatusCode::PARSE_ERROR, "{}: parameter id {} is given twice", where, id);
    return {};
}

struct ParamFile {
    std::vector<Layer> layers;
    int64_t blob_count = 0;
};

// Reads the text .param: magic, "layer_count blob_count", then one layer per line.
Result<ParamFile> parse_param_file(const std::string& path, const std::string& text) {
    std::vector<std::string_view> lines;
    for (size_t start = 0; start <= text.size();) {
        size_t nl = text.find('\n', start);
        if (nl == std::string::npos) nl = text.size();
        lines.emplace_back(text.data() + start, nl - start);
        start = nl + 1;
    }
    auto trimmed = [](std::string_view s) {
        while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
        while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
        return s;
    };
    if (lines.empty() || trimmed(lines[0]) != kMagic)
        return make_error(StatusCode::PARSE_ERROR, "{}:1: not a text ncnn .param (the first line must be {})", path,
                          kMagic);
    ParamFile pf;
    int64_t layer_count = 0;
    {
        std::istringstream s(lines.size() > 1 ? std::string(lines[1]) : std::string());
        std::string a, b, extra;
        s >> a >> b;
        const auto la = parse_int(a), lb = parse_int(b);
        if (!la || !lb || (s >> extra))
            return make_error(StatusCode::PARSE_ERROR, "{}:2: expected 'layer_count blob_count'", path);
        if (*la <= 0 || *la > kCountMax || *lb <= 0 || *lb > kCountMax)
            return make_error(StatusCode::PARSE_ERROR, "{}:2: layer count {} and blob count {} must be in 1..{}", path,
                              *la, *lb, kCountMax);
        layer_count = *la;
        pf.blob_count = *lb;
    }
    for (size_t n = 2; n < lines.size(); ++n) {
        const int line = static_cast<int>(n + 1);
        std::istringstream s{std::string(lines[n])};
        std::vector<std::string> tok;
        for (std::string t; s >> t;) tok.push_back(std::move(t));
        if (tok.empty()) continue;
        if (static_cast<int64_t>(pf.layers.size()) == layer_count)
            return make_error(StatusCode::PARSE_ERROR, "{}:{}: more layers than the {} the header declares", path, line,
                              layer_count);
        if (tok.size() < 4)
            return make_error(StatusCode::PARSE_ERROR, "{}:{}: expected 'type name bottom_count top_count ...'", path,
                              line);
        Layer l;
        l.line = line;
        l.type = tok[0];
        l.name = tok[1];
        const std::string where = fmt::format("{}:{}: layer {} ({})", path, line, quote(l.name), printable(l.type));
        const auto nb = parse_int(tok[2]), nt = parse_int(tok[3]);
        if (!nb || !nt || *nb < 0 || *nt < 0)
            return make_error(StatusCode::PARSE_ERROR, "{}: blob counts {} {} are not non-negative integers", where,
                              quote(tok[2]), quote(tok[3]));
        const int64_t listed = static_cast<int64_t>(tok.size()) - 4;
        if (*nb > listed || *nt > listed - *nb)
            return make_error(StatusCode::PARSE_ERROR, "{}: declares {} input and {} output blobs but lists {} names",
                              where, *nb, *nt, tok.size() - 4);
        const auto b0 = tok.begin() + 4, t0 = b0 + *nb, p0 = t0 + *nt;
        l.bottoms.assign(b0, t0);
        l.tops.assign(t0, p0);
        // Names travel into the compiled model's JSON and into replies: UTF-8 only.
        for (auto it = tok.begin(); it != p0; ++it)
            if (it - tok.begin() != 2 && it - tok.begin() != 3 && utf8_invalid_at(*it) != std::string::npos)
                return make_error(StatusCode::PARSE_ERROR, "{}: {} {} is not valid UTF-8 (byte {})", where,
                                  it == tok.begin() ? "type" : it == tok.begin() + 1 ? "name" : "blob name",
                                  quote(*it), utf8_invalid_at(*it));
        for (auto it = p0; it != tok.end(); ++it) LOOM_TRY(parse_param(*it, l.params, where));
        pf.layers.push_back(std::move(l));
    }
    if (static_cast<int64_t>(pf.layers.size()) != layer_count)
        return make_error(StatusCode::PARSE_ERROR, "{}:2: the header declares {} layers, the file has {}", path,
                          layer_count, pf.layers.size());
    return pf;
}

// Returns a * b, or nullopt past 2^62.
std::optional<int64_t> mul(int64_t a, int64_t b) {
    if (a < 0 || b < 0) return std::nullopt;
    if (a != 0 && b > (int64_t{1} << 62) / a) return std::nullopt;
    return a * b;
}

float as_float(double v) { return static_cast<float>(v); }

class Importer {
public:
    Importer(std::string param_path, std::string bin_path)
        : param_path_(std::move(param_path)), bin_path_(std::move(bin_path)) {}

    Result<Graph> run();

private:
    using Handler = Status (Importer::*)(const Layer&);
    struct LayerKind {
        std::string_view type;
        Handler handle;
    };
    static const LayerKind kLayers[];

    // ---- messages ----------------------------------------------------------------------------

    template <typename... Args>
    Status fail(const Layer& l, StatusCode code, fmt::format_string<Args...> f, Args&&... args) const {
        return Status(code, fmt::format("{}:{}: layer {} ({}): {}", param_path_, l.line, quote(l.name), printable(l.type),
                                        fmt::format(f, std::forward<Args>(args)...)));
    }

    // ---- parameters --------------------------------------------------------------------------

    Status check_keys(const Layer& l, std::initializer_list<int> known) const {
        for (const auto& [id, p] : l.params) {
            if (id == kParamShapeHints || id == kParamFeatMask) continue;
            if (std::find(known.begin(), known.end(), id) == known.end())
                return fail(l, StatusCode::UNSUPPORTED, "parameter {}= is not one this importer knows for {}",
                            p.array ? kArrayKeyBase - id : id, l.type);
        }
        return {};
    }

    Result<int64_t> get_int(const Layer& l, int id, int64_t fallback) const {
        auto it = l.params.find(id);
        if (it == l.params.end()) return fallback;
        if (it->second.array || it->second.is_float)
            return fail(l, StatusCode::INVALID_ARGUMENT, "parameter {} must be an integer", id);
        return it->second.i;
    }

    // Floats are rounded to float32, as ncnn stores them; an integer is accepted.
    Result<double> get_float(const Layer& l, int id, double fallback) const {
        auto it = l.params.find(id);
        if (it == l.params.end()) return fallback;
        if (it->second.array) return fail(l, StatusCode::INVALID_ARGUMENT, "parameter {} must be a number", id);
        return static_cast<double>(as_float(it->second.f));
    }

    Result<std::vector<double>> get_floats(const Layer& l, int id) const {
        auto it = l.params.find(id);
        if (it == l.params.end()) return std::vector<double>{};
        if (!it->second.array)
            return fail(l, StatusCode::INVALID_ARGUMENT, "parameter {} must be an array ({}=n,...)", id,
                        kArrayKeyBase - id);
        std::vector<double> v;
        for (double x : it->second.values) v.push_back(static_cast<double>(as_float(x)));
        return v;
    }

    Result<std::vector<int64_t>> get_ints(const Layer& l, int id) const {
        auto it = l.params.find(id);
        if (it == l.params.end()) return std::vector<int64_t>{};
        const Param& p = it->second;
        if (!p.array || std::find(p.value_is_float.begin(), p.value_is_float.end(), true) != p.value_is_float.end())
            return fail(l, StatusCode::INVALID_ARGUMENT, "parameter {} must be an array of integers ({}=n,...)", id,
                        kArrayKeyBase - id);
        std::vector<int64_t> v;
        for (double x : p.values) v.push_back(static_cast<int64_t>(x));
        return v;
    }

    // Reads parameter `id` (default `fallback`) and refuses values below `min`.
    Result<int64_t> get_int_min(const Layer& l, int id, int64_t fallback, int64_t min, std::string_view what) const {
        LOOM_ASSIGN_OR_RETURN(int64_t v, get_int(l, id, fallback));
        if (v < min)
            return fail(l, StatusCode::INVALID_ARGUMENT, "{} ({}=) is {}, must be at least {}", what, id, v, min);
        return v;
    }

    Status blob_counts(const Layer& l, size_t bottoms, size_t tops) const {
        if (l.bottoms.size() != bottoms || l.tops.size() != tops)
            return fail(l, StatusCode::INVALID_ARGUMENT, "expected {} input and {} output blob(s), got {} and {}",
                        bottoms, tops, l.bottoms.size(), l.tops.size());
        return {};
    }

    Status need_rank(const Layer& l, const Blob& b, int rank, std::string_view why) const {
        if (b.rank != rank)
            return fail(l, StatusCode::UNSUPPORTED, "input blob is {}-D; {} is mapped for {}-D blobs only", b.rank, why,
                        rank);
        return {};
    }

    // Maps an ncnn axis of a `rank`-D blob (negative counts from the end) to the graph axis.
    Result<int64_t> graph_axis(const Layer& l, int64_t axis, int rank) const {
        const int64_t a = axis < 0 ? axis + rank : axis;
        if (a < 0 || a >= rank)
            return fail(l, StatusCode::INVALID_ARGUMENT, "axis {} is out of range for a {}-D blob", axis, rank);
        return a + 1;
    }

    // ---- graph building ----------------------------------------------------------------------

    Blob in(const Layer& l, size_t i) const { return blobs_.at(l.bottoms[i]); }

    // Creates the value of output blob i (named after it) with ncnn rank `rank`.
    int top(const Layer& l, size_t i, int rank) {
        const int v = g_.add_value(l.tops[i]);
        blobs_[l.tops[i]] = Blob{v, rank};
        return v;
    }

    // Makes output blob i another name for `b` (Split, Noop, identity layers).
    void alias(const Layer& l, size_t i, Blob b) { blobs_[l.tops[i]] = b; }

    std::string fresh(std::string_view base) const {
        std::string name(base);
        for (int i = 1; g_.find_value(name) >= 0 || blob_names_.contains(name); ++i)
            name = fmt::format("{}_{}", base, i);
        return name;
    }

    int temp(const Layer& l, std::string_view suffix) {
        return g_.add_value(fresh(fmt::format("{}_{}", l.name, suffix)));
    }

    int constant(const Layer& l, std::string_view suffix, HostTensor t) {
        return g_.add_constant(fresh(fmt::format("{}_{}", l.name, suffix)), std::move(t));
    }

    int const_f32(const Layer& l, std::string_view suffix, std::vector<int64_t> dims, const std::vector<float>& v) {
        HostTensor t(DType::F32, std::move(dims));
        LOOM_ASSERT(static_cast<size_t>(t.elements()) == v.size());
        if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
        return constant(l, suffix, std::move(t));
    }

    int scalar_f32(const Layer& l, std::string_view suffix, double v) {
        return const_f32(l, suffix, {}, {as_float(v)});
    }

    int const_i64(const Layer& l, std::string_view suffix, const std::vector<int64_t>& v) {
        HostTensor t(DType::I64, {static_cast<int64_t>(v.size())});
        if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int64_t));
        return constant(l, suffix, std::move(t));
    }

    // Appends a node named after the layer (suffixed for the extra nodes of one layer).
    void node(const Layer& l, std::string_view suffix, std::string op, std::vector<int> inputs,
              std::vector<int> outputs, KernelAttrs attrs = {}) {
        const std::string base = suffix.empty() ? l.name : fmt::format("{}_{}", l.name, suffix);
        std::string name = base;
        for (int i = 1; node_names_.contains(name); ++i) name = fmt::format("{}_{}", base, i);
        node_names_.insert(name);
        Node n;
        n.op = std::move(op);
        n.name = std::move(name);
        n.inputs = std::move(inputs);
        n.outputs = std::move(outputs);
        n.attrs = std::move(attrs);
        g_.nodes.push_back(std::move(n));
    }

    // ---- .bin ---------------------------------------------------------------------------------

    template <typename... Args>
    Status bin_fail(const Layer& l, StatusCode code, fmt::format_string<Args...> f, Args&&... args) const {
        return Status(code, fmt::format("{}: offset {}: layer {} ({}, {}:{}): {}", bin_path_, bin_pos_,
                                        quote(l.name), printable(l.type), param_path_, l.line, fmt::format(f, std::forward<Args>(args)...)));
    }

    size_t bin_left() const { return bin_.size() - bin_pos_; }

    Status need_bytes(const Layer& l, uint64_t bytes, std::string_view what) const {
        if (bytes > bin_left())
            return bin_fail(l, StatusCode::PARSE_ERROR,
                            "{} needs {} bytes, the file has {} left (.param and .bin disagree)", what, bytes,
                            bin_left());
        return {};
    }

    // Reads the weights of `dims` in ncnn's ModelBin form: `tagged` is type 0 (a 4-byte storage
    // tag: fp16, int8, fp32 or a quantisation table), else type 1 (raw fp32). Sizes are checked
    // against the bytes left before anything is allocated.
    Result<HostTensor> load(const Layer& l, std::vector<int64_t> dims, bool tagged, std::string_view what) {
        int64_t count = 1;
        for (int64_t d : dims) {
            const auto c = mul(count, d);
            if (!c || *c > INT32_MAX) return fail(l, StatusCode::INVALID_ARGUMENT, "{} has too many elements", what);
            count = *c;
        }
        if (count <= 0) return fail(l, StatusCode::INVALID_ARGUMENT, "{} is empty", what);
        const uint64_t n = static_cast<uint64_t>(count);
        uint32_t tag = 0;
        if (tagged) {
            LOOM_TRY(need_bytes(l, 4, fmt::format("the storage tag of its {}", what)));
            std::memcpy(&tag, bin_.data() + bin_pos_, 4);
            bin_pos_ += 4;
        }
        auto align4 = [](uint64_t b) { return (b + 3) & ~uint64_t{3}; };
        if (tag == kTagI8)
            return bin_fail(l, StatusCode::UNSUPPORTED,
                            "its {} are int8 (storage tag 0x{:08X}); quantised int8 models are not supported", what,
                            tag);
        const bool f16 = tag == kTagF16;
        const bool table = tag != 0 && tag != kTagF16 && tag != kTagF32Scaled;
        if (table)
            LOOM_TRY(need_bytes(l, 256 * 4 + align4(n), fmt::format("its {} (quantisation table and indices)", what)));
        else
            LOOM_TRY(need_bytes(l, f16 ? align4(2 * n) : 4 * n, fmt::format("its {} ({} values)", what, n)));
        HostTensor t(DType::F32, std::move(dims));
        float* out = t.as<float>();
        const char* src = bin_.data() + bin_pos_;
        if (f16) {
            for (uint64_t i = 0; i < n; ++i) {
                device::f16 h;
                std::memcpy(&h.bits, src + 2 * i, 2);
                out[i] = device::f16_to_f32(h);
            }
            bin_pos_ += align4(2 * n);
        } else if (table) {
            float values[256];
            std::memcpy(values, src, sizeof(values));
            const auto* index = reinterpret_cast<const unsigned char*>(src + sizeof(values));
            for (uint64_t i = 0; i < n; ++i) out[i] = values[index[i]];
            bin_pos_ += sizeof(values) + align4(n);
        } else {
            std::memcpy(out, src, 4 * n);
            bin_pos_ += 4 * n;
        }
        return t;
    }

    // ---- shared pieces -------------------------------------------------------------------------

    Result<Activation> read_activation(const Layer& l) const {
        Activation a;
        LOOM_ASSIGN_OR_RETURN(a.type, get_int(l, 9, 0));
        LOOM_ASSIGN_OR_RETURN(a.params, get_floats(l, 10));
        static constexpr size_t kParamsNeeded[] = {0, 0, 1, 2, 0, 0, 2};
        if (a.type < 0 || a.type > 6)
            return fail(l, StatusCode::UNSUPPORTED,
                        "activation_type {} (9=) is not one of 0 none, 1 ReLU, 2 LeakyReLU, 3 Clip, 4 Sigmoid, 5 Mish, "
                        "6 HardSwish",
                        a.type);
        if (a.params.size() < kParamsNeeded[a.type])
            return fail(l, StatusCode::INVALID_ARGUMENT,
                        "activation_type {} needs {} activation_params (-23310=), got {}", a.type,
                        kParamsNeeded[a.type], a.params.size());
        return a;
    }

    // True when the activation maps 0 to 0 (so a zero border after it stays zero).
    static bool keeps_zero(const Activation& a) {
        if (a.type == 4) return false;  // sigmoid(0) = 0.5
        if (a.type == 3) return a.params[0] <= 0 && a.params[1] >= 0;
        return true;  // relu, leaky relu, mish and hardswish of 0 are 0
    }

    // Emits `a` reading value x and writing value y.
    void activation(const Layer& l, const Activation& a, int x, int y) {
        switch (a.type) {
            case 1: node(l, "relu", "Relu", {x}, {y}); break;
            case 2: node(l, "leakyrelu", "LeakyRelu", {x}, {y}, {{"alpha", a.params[0]}}); break;
            case 3:
                node(l, "clip", "Clip", {x, scalar_f32(l, "min", a.params[0]), scalar_f32(l, "max", a.params[1])}, {y});
                break;
            case 4: node(l, "sigmoid", "Sigmoid", {x}, {y}); break;
            case 5: {
                // mish(x) = x * tanh(softplus(x)), as ncnn computes it.
                const int sp = temp(l, "softplus"), th = temp(l, "tanh");
                node(l, "softplus", "Softplus", {x}, {sp});
                node(l, "tanh", "Tanh", {sp}, {th});
                node(l, "mish", "Mul", {x, th}, {y});
                break;
            }
            case 6: {
                // ncnn's hardswish(x) = x * clamp(alpha * x + beta, 0, 1) = x * HardSigmoid(x).
                const int hs = temp(l, "hardsigmoid");
                node(l, "hardsigmoid", "HardSigmoid", {x}, {hs}, {{"alpha", a.params[0]}, {"beta", a.params[1]}});
                node(l, "hardswish", "Mul", {x, hs}, {y});
                break;
            }
            default: LOOM_ASSERT_MSG(false, "activation {} reaches emit", a.type);
        }
    }

    // The 4 paddings of a convolution-like layer: left 4=, right 15=, top 14=, bottom 16=.
    struct Pads {
        int64_t left, right, top, bottom;
        bool any_positive() const { return left > 0 || right > 0 || top > 0 || bottom > 0; }
        bool all(int64_t v) const { return left == v && right == v && top == v && bottom == v; }
        bool any(int64_t v) const { return left == v || right == v || top == v || bottom == v; }
        bool none_negative() const { return left >= 0 && right >= 0 && top >= 0 && bottom >= 0; }
    };

    Result<Pads> read_pads(const Layer& l) const {
        Pads p{};
        LOOM_ASSIGN_OR_RETURN(p.left, get_int(l, 4, 0));
        LOOM_ASSIGN_OR_RETURN(p.right, get_int(l, 15, p.left));
        LOOM_ASSIGN_OR_RETURN(p.top, get_int(l, 14, p.left));
        LOOM_ASSIGN_OR_RETURN(p.bottom, get_int(l, 16, p.top));
        return p;
    }

    // Kernel, dilation and stride of a convolution-like layer (1= 11=, 2= 12=, 3= 13=).
    struct Window {
        int64_t num_output, kernel_w, kernel_h, dilation_w, dilation_h, stride_w, stride_h;
    };

    Result<Window> read_window(const Layer& l) const {
        Window w{};
        LOOM_ASSIGN_OR_RETURN(w.num_output, get_int_min(l, 0, 0, 1, "num_output"));
        LOOM_ASSIGN_OR_RETURN(w.kernel_w, get_int_min(l, 1, 0, 1, "kernel_w"));
        LOOM_ASSIGN_OR_RETURN(w.kernel_h, get_int_min(l, 11, w.kernel_w, 1, "kernel_h"));
        LOOM_ASSIGN_OR_RETURN(w.dilation_w, get_int_min(l, 2, 1, 1, "dilation_w"));
        LOOM_ASSIGN_OR_RETURN(w.dilation_h, get_int_min(l, 12, w.dilation_w, 1, "dilation_h"));
        LOOM_ASSIGN_OR_RETURN(w.stride_w, get_int_min(l, 3, 1, 1, "stride_w"));
        LOOM_ASSIGN_OR_RETURN(w.stride_h, get_int_min(l, 13, w.stride_w, 1, "stride_h"));
        return w;
    }

    // Input channels per group from weight_data_size = num_output * in_per_group * kh * kw.
    Result<int64_t> in_per_group(const Layer& l, const Window& w, int64_t weight_data_size) const {
        const auto per_input = mul(w.num_output, w.kernel_w * w.kernel_h);
        if (!per_input || weight_data_size % *per_input != 0)
            return fail(l, StatusCode::INVALID_ARGUMENT,
                        "weight_data_size {} (6=) is not a multiple of num_output {} x kernel {}x{}", weight_data_size,
                        w.num_output, w.kernel_w, w.kernel_h);
        return weight_data_size / *per_input;
    }

    // ---- layers --------------------------------------------------------------------------------

    Status on_input(const Layer& l);
    Status on_alias(const Layer& l);
    Status on_dropout(const Layer& l);
    Status on_convolution(const Layer& l);
    Status on_deconvolution(const Layer& l);
    Status on_innerproduct(const Layer& l);
    Status on_prelu(const Layer& l);
    Status on_relu(const Layer& l);
    Status on_sigmoid(const Layer& l);
    Status on_clip(const Layer& l);
    Status on_binaryop(const Layer& l);
    Status on_eltwise(const Layer& l);
    Status on_concat(const Layer& l);
    Status on_crop(const Layer& l);
    Status crop_to_reference(const Layer& l);
    Status on_pooling(const Layer& l);
    Status on_interp(const Layer& l);
    Status on_pixelshuffle(const Layer& l);
    Status on_padding(const Layer& l);
    Status on_reshape(const Layer& l);
    Status on_flatten(const Layer& l);
    Status on_permute(const Layer& l);
    Status on_softmax(const Layer& l);
    Status on_scale(const Layer& l);
    Status on_batchnorm(const Layer& l);

    Status check_blobs(int64_t blob_count);
    Dim input_channels(size_t layer_index) const;
    // Returns the graph value of `b` raised to `rank` the way ncnn's BinaryOp broadcasts a
    // lower-rank operand.
    int broadcast_operand(const Layer& l, Blob b, int rank, std::string_view suffix);

    std::string param_path_, bin_path_;
    std::string bin_;
    size_t bin_pos_ = 0;
    std::vector<Layer> layers_;
    Graph g_;
    std::unordered_map<std::string, Blob> blobs_;
    std::unordered_set<std::string> blob_names_;  // every blob of the file; temporaries avoid them
    std::unordered_set<std::string> node_names_;
    int inputs_seen_ = 0;
};

// Listed once; the refusal message for an unknown type lists them.
const Importer::LayerKind Importer::kLayers[] = {
    {"BatchNorm", &Importer::on_batchnorm},
    {"BinaryOp", &Importer::on_binaryop},
    {"Clip", &Importer::on_clip},
    {"Concat", &Importer::on_concat},
    {"Convolution", &Importer::on_convolution},
    {"ConvolutionDepthWise", &Importer::on_convolution},
    {"Crop", &Importer::on_crop},
    {"Deconvolution", &Importer::on_deconvolution},
    {"DeconvolutionDepthWise", &Importer::on_deconvolution},
    {"Dropout", &Importer::on_dropout},
    {"Eltwise", &Importer::on_eltwise},
    {"Flatten", &Importer::on_flatten},
    {"InnerProduct", &Importer::on_innerproduct},
    {"Input", &Importer::on_input},
    {"Interp", &Importer::on_interp},
    {"Noop", &Importer::on_alias},
    {"PReLU", &Importer::on_prelu},
    {"Padding", &Importer::on_padding},
    {"Permute", &Importer::on_permute},
    {"PixelShuffle", &Importer::on_pixelshuffle},
    {"Pooling", &Importer::on_pooling},
    {"ReLU", &Importer::on_relu},
    {"Reshape", &Importer::on_reshape},
    {"Scale", &Importer::on_scale},
    {"Sigmoid", &Importer::on_sigmoid},
    {"Softmax", &Importer::on_softmax},
    {"Split", &Importer::on_alias},
};

// Every bottom must name an earlier top; tops are unique and number exactly blob_count.
Status Importer::check_blobs(int64_t blob_count) {
    std::unordered_map<std::string, const Layer*> producer;
    int64_t index = 0;
    for (const Layer& l : layers_) {
        for (const std::string& b : l.bottoms)
            if (!producer.contains(b))
                return fail(l, StatusCode::PARSE_ERROR, "input blob {} is not produced by any earlier layer", quote(b));
        for (const std::string& t : l.tops) {
            if (index >= blob_count)
                return fail(l, StatusCode::PARSE_ERROR,
                            "output blob {} has index {}, out of range: the header declares {} blobs", quote(t), index,
                            blob_count);
            auto [it, fresh_blob] = producer.emplace(t, &l);
            if (!fresh_blob)
                return fail(l, StatusCode::PARSE_ERROR, "output blob {} is already produced by layer {} at line {}",
                            quote(t), quote(it->second->name), it->second->line);
            blob_names_.insert(t);
            ++index;
        }
    }
    if (index != blob_count)
        return make_error(StatusCode::PARSE_ERROR, "{}:2: the header declares {} blobs, the layers produce {}",
                          param_path_, blob_count, index);
    return {};
}

Result<Graph> Importer::run() {
    LOOM_ASSIGN_OR_RETURN(std::string text, read_file(param_path_, kParamBytesMax));
    LOOM_ASSIGN_OR_RETURN(ParamFile pf, parse_param_file(param_path_, text));
    layers_ = std::move(pf.layers);
    LOOM_TRY(check_blobs(pf.blob_count));
    LOOM_ASSIGN_OR_RETURN(bin_, read_file(bin_path_, kBinBytesMax));
    g_.name = std::filesystem::path(param_path_).stem().string();
    g_.source = param_path_;

    for (const Layer& l : layers_) {
        const auto kind =
            std::find_if(std::begin(kLayers), std::end(kLayers), [&](const LayerKind& k) { return k.type == l.type; });
        if (kind == std::end(kLayers)) {
            std::string known;
            for (const LayerKind& k : kLayers) known += fmt::format("{}{}", known.empty() ? "" : ", ", k.type);
            return fail(l, StatusCode::UNSUPPORTED, "layer type {} is not supported (supported: {})", quote(l.type), known);
        }
        LOOM_TRY((this->*kind->handle)(l));
    }
    if (bin_pos_ != bin_.size())
        return make_error(StatusCode::PARSE_ERROR,
                          "{}: {} bytes left after the last layer's data at offset {} (.param and .bin disagree)",
                          bin_path_, bin_.size() - bin_pos_, bin_pos_);
    if (g_.inputs.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "{}: no Input layer", param_path_);

    // Outputs: blobs no layer reads, in the order they were produced (Input blobs excepted).
    std::unordered_set<std::string> consumed;
    for (const Layer& l : layers_)
        for (const std::string& b : l.bottoms) consumed.insert(b);
    for (const Layer& l : layers_) {
        if (l.type == "Input") continue;
        for (const std::string& t : l.tops) {
            if (consumed.contains(t)) continue;
            const int v = blobs_.at(t).value;
            if (std::find(g_.outputs.begin(), g_.outputs.end(), v) == g_.outputs.end()) g_.outputs.push_back(v);
        }
    }
    if (g_.outputs.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: no output: every blob is read by some layer", param_path_);
    LOOM_TRY(g_.topo_sort());
    return std::move(g_);
}

// Channels of the Input layer at `layer_index`: from the first layer reading it (through
// Split, Noop and channel-preserving layers) whose parameters fix them.
Dim Importer::input_channels(size_t layer_index) const {
    auto raw = [](const Layer& l, int id, int64_t fallback) {
        auto it = l.params.find(id);
        return it == l.params.end() || it->second.array || it->second.is_float ? fallback : it->second.i;
    };
    std::unordered_set<std::string> names{layers_[layer_index].tops[0]};
    for (size_t i = layer_index + 1; i < layers_.size(); ++i) {
        const Layer& l = layers_[i];
        if (l.bottoms.empty() || !names.contains(l.bottoms[0])) continue;
        if (l.type == "Convolution" || l.type == "ConvolutionDepthWise") {
            const int64_t n = raw(l, 0, 0), kw = raw(l, 1, 0), kh = raw(l, 11, kw), size = raw(l, 6, 0);
            const int64_t group = l.type == "Convolution" ? 1 : raw(l, 7, 1);
            const auto per_input = kw > 0 && kh > 0 ? mul(n, kw * kh) : std::nullopt;
            if (per_input && *per_input > 0 && group > 0 && size > 0 && size % *per_input == 0)
                return Dim(size / *per_input * group);
            continue;
        }
        if ((l.type == "BatchNorm" || l.type == "Scale") && raw(l, 0, 0) > 0) return Dim(raw(l, 0, 0));
        if (l.type == "PReLU" && raw(l, 0, 0) > 1) return Dim(raw(l, 0, 0));
        if (l.type == "Split") {
            for (const std::string& t : l.tops) names.insert(t);
            continue;
        }
        const bool unary = l.type == "Noop" || l.type == "Dropout" || l.type == "ReLU" || l.type == "Sigmoid" ||
                           l.type == "Clip" || (l.type == "BinaryOp" && l.bottoms.size() == 1);
        if (unary && !l.tops.empty()) names.insert(l.tops[0]);
    }
    return Dim::sym("C");
}

Status Importer::on_input(const Layer& l) {
    LOOM_TRY(blob_counts(l, 0, 1));
    LOOM_TRY(check_keys(l, {0, 1, 2}));
    LOOM_TRY(get_int_min(l, 0, 0, 0, "w").status());
    LOOM_TRY(get_int_min(l, 1, 0, 0, "h").status());
    LOOM_ASSIGN_OR_RETURN(int64_t c, get_int_min(l, 2, 0, 0, "c"));
    const size_t index = static_cast<size_t>(&l - layers_.data());
    // ncnn's Input layer only copies w, h and c into the blob's shape hint (30=); Net runs any
    // size fed to it. So H and W stay symbolic whatever the hint says (the first input's are H
    // and W, further inputs get their own symbols) and --shape or the frame size binds them. The
    // channels come from the first layer whose weights fix them, else from the hint.
    const std::string suffix = inputs_seen_ == 0 ? "" : std::to_string(inputs_seen_);
    ++inputs_seen_;
    Dim channels = input_channels(index);
    if (!channels.known() && c > 0) channels = Dim(c);
    const int v = top(l, 0, 3);
    Value& val = g_.value(v);
    val.dtype = DType::F32;
    val.shape = {Dim(1), channels, Dim::sym("H" + suffix), Dim::sym("W" + suffix)};
    val.typed = true;
    g_.inputs.push_back(v);
    return {};
}

// Split copies its input to every output; Noop passes blob i through to output i.
Status Importer::on_alias(const Layer& l) {
    LOOM_TRY(check_keys(l, {}));
    if (l.type == "Split") {
        if (l.bottoms.size() != 1 || l.tops.empty())
            return fail(l, StatusCode::INVALID_ARGUMENT, "expected 1 input and at least 1 output, got {} and {}",
                        l.bottoms.size(), l.tops.size());
        for (size_t i = 0; i < l.tops.size(); ++i) alias(l, i, in(l, 0));
        return {};
    }
    if (l.tops.size() > l.bottoms.size())
        return fail(l, StatusCode::INVALID_ARGUMENT, "{} outputs for {} inputs", l.tops.size(), l.bottoms.size());
    for (size_t i = 0; i < l.tops.size(); ++i) alias(l, i, in(l, i));
    return {};
}

// ncnn's Dropout at inference multiplies by 0=scale (1: identity).
Status Importer::on_dropout(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0}));
    LOOM_ASSIGN_OR_RETURN(double scale, get_float(l, 0, 1.0));
    const Blob x = in(l, 0);
    if (scale == 1.0) {
        alias(l, 0, x);
        return {};
    }
    const int y = top(l, 0, x.rank);
    node(l, "", "Mul", {x.value, scalar_f32(l, "scale", scale)}, {y});
    return {};
}

Status Importer::on_convolution(const Layer& l) {
    const bool depthwise = l.type == "ConvolutionDepthWise";
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1, 11, 2, 12, 3, 13, 4, 15, 14, 16, 18, 5, 6, 7, 8, 9, 10, 19}));
    LOOM_ASSIGN_OR_RETURN(Window w, read_window(l));
    LOOM_ASSIGN_OR_RETURN(Pads pads, read_pads(l));
    LOOM_ASSIGN_OR_RETURN(double pad_value, get_float(l, 18, 0.0));
    LOOM_ASSIGN_OR_RETURN(int64_t bias_term, get_int(l, 5, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t weight_data_size, get_int_min(l, 6, 0, 1, "weight_data_size"));
    LOOM_ASSIGN_OR_RETURN(int64_t group, get_int_min(l, 7, 1, 1, "group"));
    LOOM_ASSIGN_OR_RETURN(int64_t int8_scale_term, get_int(l, 8, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t dynamic_weight, get_int(l, 19, 0));
    LOOM_ASSIGN_OR_RETURN(Activation act, read_activation(l));
    if (!depthwise && group != 1)
        return fail(l, StatusCode::INVALID_ARGUMENT, "Convolution has no group; 7={} needs ConvolutionDepthWise",
                    group);
    if (int8_scale_term)
        return fail(l, StatusCode::UNSUPPORTED, "int8 convolution (8={}) is not supported", int8_scale_term);
    if (dynamic_weight)
        return fail(l, StatusCode::UNSUPPORTED, "weights from a blob (19={}) are not supported", dynamic_weight);
    if (w.num_output % group != 0)
        return fail(l, StatusCode::INVALID_ARGUMENT, "num_output {} is not a multiple of group {}", w.num_output,
                    group);
    LOOM_ASSIGN_OR_RETURN(int64_t cin_g, in_per_group(l, w, weight_data_size));
    const Blob x = in(l, 0);
    LOOM_TRY(need_rank(l, x, 3, "convolution"));

    KernelAttrs attrs{{"kernel_shape", std::vector<int64_t>{w.kernel_h, w.kernel_w}},
                      {"strides", std::vector<int64_t>{w.stride_h, w.stride_w}},
                      {"dilations", std::vector<int64_t>{w.dilation_h, w.dilation_w}},
                      {"group", group}};
    // ncnn pads when any side is positive (with pad_value), or all four say SAME (-233 upper,
    // -234 lower); anything else means no padding.
    bool pad_node = false;
    if (pads.any_positive()) {
        if (!pads.none_negative())
            return fail(l, StatusCode::UNSUPPORTED, "paddings {} {} {} {} mix positive and negative values", pads.left,
                        pads.right, pads.top, pads.bottom);
        pad_node = pad_value != 0.0;
        attrs.set("pads", pad_node ? std::vector<int64_t>{0, 0, 0, 0}
                                   : std::vector<int64_t>{pads.top, pads.left, pads.bottom, pads.right});
    } else if (pads.all(kUnset) || pads.all(kSameLower)) {
        if (pad_value != 0.0)
            return fail(l, StatusCode::UNSUPPORTED, "SAME padding with pad_value {} (18=) has no exact ONNX form",
                        pad_value);
        attrs.set("auto_pad", pads.all(kUnset) ? "SAME_UPPER" : "SAME_LOWER");
    } else if (!pads.all(0)) {
        return fail(l, StatusCode::UNSUPPORTED, "paddings {} {} {} {} (4= 15= 14= 16=) are not a form ncnn applies",
                    pads.left, pads.right, pads.top, pads.bottom);
    }

    LOOM_ASSIGN_OR_RETURN(HostTensor weight, load(l, {w.num_output, cin_g, w.kernel_h, w.kernel_w}, true, "weights"));
    std::vector<int> inputs{x.value, -1};
    if (pad_node) {
        const int padded = temp(l, "padded");
        node(l, "pad", "Pad",
             {x.value, const_i64(l, "pads", {0, 0, pads.top, pads.left, 0, 0, pads.bottom, pads.right}),
              scalar_f32(l, "pad_value", pad_value)},
             {padded}, {{"mode", "constant"}});
        inputs[0] = padded;
    }
    inputs[1] = constant(l, "weight", std::move(weight));
    if (bias_term) {
        LOOM_ASSIGN_OR_RETURN(HostTensor bias, load(l, {w.num_output}, false, "bias"));
        inputs.push_back(constant(l, "bias", std::move(bias)));
    }
    const int y = top(l, 0, 3);
    const int conv_out = act.type ? temp(l, "conv") : y;
    node(l, "", "Conv", std::move(inputs), {conv_out}, std::move(attrs));
    if (act.type) activation(l, act, conv_out, y);
    return {};
}

// ncnn computes the full transposed convolution (bias, activation), pads it with zeros at the
// bottom and right by output_pad (18= 19=), then cuts the paddings, or (paddings all SAME and
// output size 20= 21= given) cuts down to the output size.
Status Importer::on_deconvolution(const Layer& l) {
    const bool depthwise = l.type == "DeconvolutionDepthWise";
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1, 11, 2, 12, 3, 13, 4, 15, 14, 16, 18, 19, 20, 21, 5, 6, 7, 9, 10, 28}));
    LOOM_ASSIGN_OR_RETURN(Window w, read_window(l));
    LOOM_ASSIGN_OR_RETURN(Pads pads, read_pads(l));
    LOOM_ASSIGN_OR_RETURN(int64_t out_pad_w, get_int_min(l, 18, 0, 0, "output_pad_right"));
    LOOM_ASSIGN_OR_RETURN(int64_t out_pad_h, get_int_min(l, 19, out_pad_w, 0, "output_pad_bottom"));
    LOOM_ASSIGN_OR_RETURN(int64_t out_w, get_int(l, 20, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t out_h, get_int(l, 21, out_w));
    LOOM_ASSIGN_OR_RETURN(int64_t bias_term, get_int(l, 5, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t weight_data_size, get_int_min(l, 6, 0, 1, "weight_data_size"));
    LOOM_ASSIGN_OR_RETURN(int64_t group, get_int_min(l, 7, 1, 1, "group"));
    LOOM_ASSIGN_OR_RETURN(int64_t dynamic_weight, get_int(l, 28, 0));
    LOOM_ASSIGN_OR_RETURN(Activation act, read_activation(l));
    if (!depthwise && group != 1)
        return fail(l, StatusCode::INVALID_ARGUMENT, "Deconvolution has no group; 7={} needs DeconvolutionDepthWise",
                    group);
    if (dynamic_weight)
        return fail(l, StatusCode::UNSUPPORTED, "weights from a blob (28={}) are not supported", dynamic_weight);
    if (w.num_output % group != 0)
        return fail(l, StatusCode::INVALID_ARGUMENT, "num_output {} is not a multiple of group {}", w.num_output,
                    group);
    LOOM_ASSIGN_OR_RETURN(int64_t cin_g, in_per_group(l, w, weight_data_size));
    const Blob x = in(l, 0);
    LOOM_TRY(need_rank(l, x, 3, "deconvolution"));
    const int64_t cout_g = w.num_output / group;
    const bool zero_fill_exact = !bias_term && keeps_zero(act);

    KernelAttrs attrs{{"kernel_shape", std::vector<int64_t>{w.kernel_h, w.kernel_w}},
                      {"strides", std::vector<int64_t>{w.stride_h, w.stride_w}},
                      {"dilations", std::vector<int64_t>{w.dilation_h, w.dilation_w}},
                      {"group", group}};
    int64_t border_h = 0, border_w = 0;  // zero rows/columns appended after the activation
    if (pads.any_positive() || !(out_w > 0 && out_h > 0)) {
        if (pads.any_positive() && !pads.none_negative())
            return fail(l, StatusCode::UNSUPPORTED, "paddings {} {} {} {} mix positive and negative values", pads.left,
                        pads.right, pads.top, pads.bottom);
        if (!pads.any_positive()) {
            for (int64_t p : {pads.left, pads.right, pads.top, pads.bottom})
                if (p != 0 && p != kUnset && p != kSameLower)
                    return fail(l, StatusCode::UNSUPPORTED, "padding {} is not a form ncnn applies", p);
            pads = Pads{0, 0, 0, 0};  // SAME markers without an output size cut nothing
        }
        // The zero border of output_pad survives where it exceeds the cut at that side: there
        // ONNX's output_padding would hold bias and activation(bias), ncnn zeros, so a Pad
        // node adds it after the activation.
        const int64_t cut_bottom = pads.bottom - out_pad_h, cut_right = pads.right - out_pad_w;
        border_h = std::max<int64_t>(0, -cut_bottom);
        border_w = std::max<int64_t>(0, -cut_right);
        attrs.set("pads", std::vector<int64_t>{pads.top, pads.left, std::max<int64_t>(0, cut_bottom),
                                               std::max<int64_t>(0, cut_right)});
        // Where the border is zero anyway, ONNX's output_padding says it (kept below the stride,
        // as ONNX runtimes require).
        if (zero_fill_exact && (border_h || border_w) && border_h < w.stride_h && border_w < w.stride_w) {
            attrs.set("output_padding", std::vector<int64_t>{border_h, border_w});
            border_h = border_w = 0;
        }
    } else {
        if (!pads.any(kUnset) && !pads.any(kSameLower))
            return fail(l, StatusCode::INVALID_ARGUMENT,
                        "an output size (20= 21=) needs SAME paddings (-233 or -234); ncnn produces no output here");
        if ((out_pad_w || out_pad_h) && !zero_fill_exact)
            return fail(l, StatusCode::UNSUPPORTED,
                        "output_pad with an output size and a bias or activation has no exact ONNX form (ncnn pads "
                        "with zeros after the bias)");
        attrs.set("auto_pad", pads.any(kUnset) ? "SAME_UPPER" : "SAME_LOWER");
        attrs.set("output_shape", std::vector<int64_t>{out_h, out_w});
        if (out_pad_w || out_pad_h) attrs.set("output_padding", std::vector<int64_t>{out_pad_h, out_pad_w});
    }

    // ncnn: [group][out/group][in/group][kh][kw]; ONNX ConvTranspose: [in][out/group][kh][kw].
    LOOM_ASSIGN_OR_RETURN(HostTensor ncnn_weight,
                          load(l, {group, cout_g, cin_g, w.kernel_h, w.kernel_w}, true, "weights"));
    HostTensor weight(DType::F32, {group * cin_g, cout_g, w.kernel_h, w.kernel_w});
    const int64_t maxk = w.kernel_h * w.kernel_w;
    const float* src = ncnn_weight.as<float>();
    float* dst = weight.as<float>();
    for (int64_t g = 0; g < group; ++g)
        for (int64_t o = 0; o < cout_g; ++o)
            for (int64_t i = 0; i < cin_g; ++i)
                std::memcpy(dst + ((g * cin_g + i) * cout_g + o) * maxk, src + ((g * cout_g + o) * cin_g + i) * maxk,
                            static_cast<size_t>(maxk) * sizeof(float));
    std::vector<int> inputs{x.value, constant(l, "weight", std::move(weight))};
    if (bias_term) {
        LOOM_ASSIGN_OR_RETURN(HostTensor bias, load(l, {w.num_output}, false, "bias"));
        inputs.push_back(constant(l, "bias", std::move(bias)));
    }
    const int y = top(l, 0, 3);
    const bool border = border_h || border_w;
    const int act_out = border ? temp(l, "activated") : y;
    const int deconv_out = act.type ? temp(l, "deconv") : act_out;
    node(l, "", "ConvTranspose", std::move(inputs), {deconv_out}, std::move(attrs));
    if (act.type) activation(l, act, deconv_out, act_out);
    if (border)
        node(l, "output_pad", "Pad",
             {act_out, const_i64(l, "output_pad", {0, 0, 0, 0, 0, 0, border_h, border_w}), scalar_f32(l, "zero", 0.0)},
             {y}, {{"mode", "constant"}});
    return {};
}

// InnerProduct flattens its input (a 3-D or 1-D blob) and multiplies by [num_output][num_input].
Status Importer::on_innerproduct(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1, 2, 8, 9, 10}));
    LOOM_ASSIGN_OR_RETURN(int64_t num_output, get_int_min(l, 0, 0, 1, "num_output"));
    LOOM_ASSIGN_OR_RETURN(int64_t bias_term, get_int(l, 1, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t weight_data_size, get_int_min(l, 2, 0, 1, "weight_data_size"));
    LOOM_ASSIGN_OR_RETURN(int64_t int8_scale_term, get_int(l, 8, 0));
    LOOM_ASSIGN_OR_RETURN(Activation act, read_activation(l));
    if (int8_scale_term)
        return fail(l, StatusCode::UNSUPPORTED, "int8 inner product (8={}) is not supported", int8_scale_term);
    if (weight_data_size % num_output != 0)
        return fail(l, StatusCode::INVALID_ARGUMENT, "weight_data_size {} (2=) is not a multiple of num_output {}",
                    weight_data_size, num_output);
    const Blob x = in(l, 0);
    if (x.rank == 2)
        return fail(l, StatusCode::UNSUPPORTED,
                    "InnerProduct of a 2-D blob works per row or flattened depending on its width; not mapped");
    LOOM_ASSIGN_OR_RETURN(HostTensor weight, load(l, {num_output, weight_data_size / num_output}, true, "weights"));
    int a = x.value;
    if (x.rank == 3) {
        a = temp(l, "flat");
        node(l, "flatten", "Flatten", {x.value}, {a}, {{"axis", int64_t{1}}});
    }
    std::vector<int> inputs{a, constant(l, "weight", std::move(weight))};
    if (bias_term) {
        LOOM_ASSIGN_OR_RETURN(HostTensor bias, load(l, {num_output}, false, "bias"));
        inputs.push_back(constant(l, "bias", std::move(bias)));
    }
    const int y = top(l, 0, 1);
    const int gemm_out = act.type ? temp(l, "gemm") : y;
    node(l, "", "Gemm", std::move(inputs), {gemm_out}, {{"transB", int64_t{1}}});
    if (act.type) activation(l, act, gemm_out, y);
    return {};
}

Status Importer::on_prelu(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0}));
    LOOM_ASSIGN_OR_RETURN(int64_t num_slope, get_int_min(l, 0, 0, 1, "num_slope"));
    const Blob x = in(l, 0);
    // One slope for everything, or one per channel (per row of a 2-D blob, per element of 1-D).
    std::vector<int64_t> dims{num_slope};
    if (num_slope > 1) dims.resize(static_cast<size_t>(x.rank), 1);
    LOOM_ASSIGN_OR_RETURN(HostTensor slope, load(l, dims, false, "slopes"));
    const int y = top(l, 0, x.rank);
    node(l, "", "PRelu", {x.value, constant(l, "slope", std::move(slope))}, {y});
    return {};
}

Status Importer::on_relu(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0}));
    LOOM_ASSIGN_OR_RETURN(double slope, get_float(l, 0, 0.0));
    const Blob x = in(l, 0);
    const int y = top(l, 0, x.rank);
    if (slope == 0.0)
        node(l, "", "Relu", {x.value}, {y});
    else
        node(l, "", "LeakyRelu", {x.value}, {y}, {{"alpha", slope}});
    return {};
}

Status Importer::on_sigmoid(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {}));
    const Blob x = in(l, 0);
    node(l, "", "Sigmoid", {x.value}, {top(l, 0, x.rank)});
    return {};
}

Status Importer::on_clip(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1}));
    LOOM_ASSIGN_OR_RETURN(double lo, get_float(l, 0, -FLT_MAX));
    LOOM_ASSIGN_OR_RETURN(double hi, get_float(l, 1, FLT_MAX));
    const Blob x = in(l, 0);
    const int y = top(l, 0, x.rank);
    node(l, "", "Clip", {x.value, scalar_f32(l, "min", lo), scalar_f32(l, "max", hi)}, {y});
    return {};
}

// ncnn's BinaryOp raises a lower-rank operand on its inner axes: a 2-D h x w blob becomes
// h x w x 1; a 1-D blob becomes per-channel (c x 1 x 1) against a 3-D one and a column against a
// 2-D one. (ncnn makes that 1-D choice when the width matches the channels or rows and otherwise
// broadcasts along rows; that second reading is not mapped, and its shapes then fail inference.)
int Importer::broadcast_operand(const Layer& l, Blob b, int rank, std::string_view suffix) {
    if (b.rank == rank) return b.value;
    std::vector<int64_t> axes;
    for (int a = b.rank + 1; a <= rank; ++a) axes.push_back(a);
    const int out = temp(l, suffix);
    node(l, suffix, "Unsqueeze", {b.value, const_i64(l, fmt::format("{}_axes", suffix), axes)}, {out});
    return out;
}

Status Importer::on_binaryop(const Layer& l) {
    LOOM_TRY(check_keys(l, {0, 1, 2}));
    LOOM_ASSIGN_OR_RETURN(int64_t op_type, get_int(l, 0, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t with_scalar, get_int(l, 1, 0));
    LOOM_ASSIGN_OR_RETURN(double b_scalar, get_float(l, 2, 0.0));
    // 0 add, 1 sub, 2 mul, 3 div, 4 max, 5 min, 6 pow, 7 rsub, 8 rdiv, 9 rpow (r*: b op a).
    static constexpr const char* kOps[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Sub", "Div", "Pow"};
    if (op_type < 0 || op_type > 9)
        return fail(l, StatusCode::UNSUPPORTED,
                    "op_type {} is not one of 0 add, 1 sub, 2 mul, 3 div, 4 max, 5 min, 6 pow, 7 rsub, 8 rdiv, 9 rpow "
                    "(atan2 has no ONNX op)",
                    op_type);
    int a = -1, b = -1, rank = 0;
    if (with_scalar) {
        LOOM_TRY(blob_counts(l, 1, 1));
        const Blob x = in(l, 0);
        a = x.value;
        b = scalar_f32(l, "b", b_scalar);
        rank = x.rank;
    } else {
        LOOM_TRY(blob_counts(l, 2, 1));
        const Blob x0 = in(l, 0), x1 = in(l, 1);
        rank = std::max(x0.rank, x1.rank);
        a = broadcast_operand(l, x0, rank, "a_expanded");
        b = broadcast_operand(l, x1, rank, "b_expanded");
    }
    if (op_type >= 7) std::swap(a, b);
    node(l, "", kOps[op_type], {a, b}, {top(l, 0, rank)});
    return {};
}

Status Importer::on_eltwise(const Layer& l) {
    LOOM_TRY(check_keys(l, {0, 1}));
    LOOM_ASSIGN_OR_RETURN(int64_t op_type, get_int(l, 0, 0));
    LOOM_ASSIGN_OR_RETURN(std::vector<double> coeffs, get_floats(l, 1));
    if (l.bottoms.size() < 2 || l.tops.size() != 1)
        return fail(l, StatusCode::INVALID_ARGUMENT, "expected at least 2 inputs and 1 output, got {} and {}",
                    l.bottoms.size(), l.tops.size());
    if (op_type < 0 || op_type > 2)
        return fail(l, StatusCode::UNSUPPORTED, "op_type {} is not one of 0 prod, 1 sum, 2 max", op_type);
    std::vector<int> xs;
    const int rank = in(l, 0).rank;
    for (size_t i = 0; i < l.bottoms.size(); ++i) {
        if (in(l, i).rank != rank)
            return fail(l, StatusCode::INVALID_ARGUMENT, "inputs have different ranks ({}-D and {}-D)", rank,
                        in(l, i).rank);
        xs.push_back(in(l, i).value);
    }
    const int y = top(l, 0, rank);
    if (op_type == 0) {
        // Mul takes two inputs: a chain, in ncnn's order.
        int acc = xs[0];
        for (size_t i = 1; i < xs.size(); ++i) {
            const int out = i + 1 == xs.size() ? y : temp(l, fmt::format("prod{}", i));
            node(l, i + 1 == xs.size() ? "" : fmt::format("mul{}", i), "Mul", {acc, xs[i]}, {out});
            acc = out;
        }
        return {};
    }
    if (op_type == 2) {
        node(l, "", "Max", xs, {y});
        return {};
    }
    if (!coeffs.empty() && coeffs.size() != xs.size())
        return fail(l, StatusCode::INVALID_ARGUMENT, "{} coefficients (-23301=) for {} inputs", coeffs.size(),
                    xs.size());
    for (size_t i = 0; i < coeffs.size(); ++i) {
        if (coeffs[i] == 1.0) continue;
        const int scaled = temp(l, fmt::format("term{}", i));
        node(l, fmt::format("mul{}", i), "Mul", {xs[i], scalar_f32(l, fmt::format("coeff{}", i), coeffs[i])}, {scaled});
        xs[i] = scaled;
    }
    node(l, "", xs.size() == 2 ? "Add" : "Sum", xs, {y});
    return {};
}

Status Importer::on_concat(const Layer& l) {
    LOOM_TRY(check_keys(l, {0}));
    LOOM_ASSIGN_OR_RETURN(int64_t axis, get_int(l, 0, 0));
    if (l.bottoms.empty() || l.tops.size() != 1)
        return fail(l, StatusCode::INVALID_ARGUMENT, "expected inputs and 1 output, got {} and {}", l.bottoms.size(),
                    l.tops.size());
    const int rank = in(l, 0).rank;
    std::vector<int> xs;
    for (size_t i = 0; i < l.bottoms.size(); ++i) {
        if (in(l, i).rank != rank)
            return fail(l, StatusCode::INVALID_ARGUMENT, "inputs have different ranks ({}-D and {}-D)", rank,
                        in(l, i).rank);
        xs.push_back(in(l, i).value);
    }
    LOOM_ASSIGN_OR_RETURN(int64_t graph_ax, graph_axis(l, axis, rank));
    node(l, "", "Concat", std::move(xs), {top(l, 0, rank)}, {{"axis", graph_ax}});
    return {};
}

// Crop with offsets (w 0= h 1= c 2=, sizes 3= 4= 5=, far offsets 6= 7= 8=; -233 = all) or
// numpy-style starts/ends/axes (-23309= -23310= -23311=) becomes Slice.
Status Importer::on_crop(const Layer& l) {
    LOOM_TRY(check_keys(l, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
    if (l.bottoms.size() == 2) return crop_to_reference(l);
    LOOM_TRY(blob_counts(l, 1, 1));
    const Blob x = in(l, 0);
    const int r = x.rank;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> starts, get_ints(l, 9));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> ends, get_ints(l, 10));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, get_ints(l, 11));
    std::vector<Cut> first, second;  // second: the size limit after a far-side offset
    if (!starts.empty() || !ends.empty() || !axes.empty()) {
        if (starts.empty() || ends.empty())
            return fail(l, StatusCode::INVALID_ARGUMENT,
                        "numpy-style Crop needs both starts (-23309=) and ends (-23310=)");
        const size_t n = axes.empty() ? static_cast<size_t>(r) : axes.size();
        if (starts.size() != n || ends.size() != n)
            return fail(l, StatusCode::INVALID_ARGUMENT, "{} starts and {} ends for {} axes", starts.size(),
                        ends.size(), n);
        for (size_t i = 0; i < n; ++i) {
            LOOM_ASSIGN_OR_RETURN(int64_t ax, graph_axis(l, axes.empty() ? static_cast<int64_t>(i) : axes[i], r));
            for (const Cut& c : first)
                if (c.axis == ax) return fail(l, StatusCode::INVALID_ARGUMENT, "axis {} is cropped twice", ax - 1);
            // ncnn: start -233 = 0; end -233 or 0 = the end; negatives count from the end.
            const int64_t s = starts[i] == kUnset ? 0 : starts[i];
            const int64_t e = ends[i] == kUnset || ends[i] == 0 ? kSliceToEnd : ends[i];
            first.push_back({ax, s, e});
        }
    } else {
        LOOM_ASSIGN_OR_RETURN(int64_t woffset, get_int(l, 0, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t hoffset, get_int(l, 1, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t coffset, get_int(l, 2, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t outw, get_int(l, 3, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t outh, get_int(l, 4, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t outc, get_int(l, 5, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t woffset2, get_int(l, 6, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t hoffset2, get_int(l, 7, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t coffset2, get_int(l, 8, 0));
        struct AxisCrop {
            int64_t axis, offset, size, offset2;  // graph axis
        };
        std::vector<AxisCrop> crops;
        const int64_t gw = r, gh = r - 1, gc = r - 2;  // graph axes of w, h, c
        // ncnn's short forms: hoffset -233 moves the w parameters to the next axis out.
        if (r == 1) {
            crops = {{gw, woffset, outw, woffset2}};
        } else if (r == 2) {
            if (hoffset == kUnset)
                crops = {{gh, woffset, outw, woffset2}};
            else
                crops = {{gw, woffset, outw, woffset2}, {gh, hoffset, outh, hoffset2}};
        } else if (hoffset == kUnset && coffset == kUnset) {
            crops = {{gc, woffset, outw, woffset2}};
        } else if (coffset == kUnset) {
            crops = {{gh, woffset, outw, woffset2}, {gc, hoffset, outh, hoffset2}};
        } else {
            crops = {{gw, woffset, outw, woffset2}, {gh, hoffset, outh, hoffset2}, {gc, coffset, outc, coffset2}};
        }
        for (const AxisCrop& c : crops) {
            if (c.offset < 0 || c.offset2 < 0)
                return fail(l, StatusCode::INVALID_ARGUMENT, "negative crop offset {} / {} on axis {}", c.offset,
                            c.offset2, c.axis - 1);
            if (c.size != kUnset && c.size <= 0)
                return fail(l, StatusCode::INVALID_ARGUMENT,
                            "crop size {} on axis {} (ncnn gives an empty blob; -233 keeps the rest)", c.size,
                            c.axis - 1);
            if (c.offset == 0 && c.offset2 == 0 && c.size == kUnset) continue;
            const int64_t far_end = c.offset2 > 0 ? -c.offset2 : kSliceToEnd;
            if (c.size == kUnset) {
                first.push_back({c.axis, c.offset, far_end});
            } else if (c.offset2 == 0) {
                first.push_back({c.axis, c.offset, c.offset + c.size});
            } else {
                // min(size, extent - offset - offset2): cut both offsets, then limit the size.
                first.push_back({c.axis, c.offset, far_end});
                second.push_back({c.axis, 0, c.size});
            }
        }
    }
    if (first.empty()) {
        alias(l, 0, x);
        return {};
    }
    const int y = top(l, 0, r);
    auto slice = [&](const std::vector<Cut>& cuts, int from, int to, std::string_view suffix) {
        std::vector<int64_t> s, e, a;
        for (const Cut& c : cuts) s.push_back(c.start), e.push_back(c.end), a.push_back(c.axis);
        const std::string p = suffix.empty() ? std::string() : fmt::format("{}_", suffix);
        node(l, suffix, "Slice",
             {from, const_i64(l, p + "starts", s), const_i64(l, p + "ends", e), const_i64(l, p + "axes", a)}, {to});
    };
    if (second.empty()) {
        slice(first, x.value, y, "");
    } else {
        const int mid = temp(l, "offsets");
        slice(first, x.value, mid, "offsets");
        slice(second, mid, y, "");
    }
    return {};
}

// Crop with a second, reference blob (UNet skip connections): ncnn cuts the first blob at the
// offsets 0= 1= 2= (w, h, c) to the reference's w and h, and its c when the reference is 3-D.
// The reference's size is known only once shapes are, so the ends are Shape(reference) plus the
// offsets, which constant folding settles at compile time.
Status Importer::crop_to_reference(const Layer& l) {
    LOOM_TRY(blob_counts(l, 2, 1));
    for (const auto& [id, p] : l.params)
        if (id > 2 && id != kParamShapeHints && id != kParamFeatMask)
            return fail(l, StatusCode::UNSUPPORTED, "parameter {}= with a reference blob is not supported",
                        p.array ? kArrayKeyBase - id : id);
    LOOM_ASSIGN_OR_RETURN(int64_t woffset, get_int(l, 0, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t hoffset, get_int(l, 1, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t coffset, get_int(l, 2, 0));
    if (woffset == kUnset)
        return fail(l, StatusCode::UNSUPPORTED, "crop offsets and sizes read from a blob (0=-233) are not supported");
    if (woffset < 0 || hoffset < 0 || coffset < 0)
        return fail(l, StatusCode::INVALID_ARGUMENT, "negative crop offset (w {}, h {}, c {})", woffset, hoffset,
                    coffset);
    const Blob x = in(l, 0), ref = in(l, 1);
    // Cropped axes, innermost last: w; h, w; c, h, w (c only against a 3-D reference).
    const int n = x.rank == 3 ? (ref.rank == 3 ? 3 : 2) : x.rank;
    if (ref.rank < n || (x.rank == 3 && ref.rank < 2))
        return fail(l, StatusCode::UNSUPPORTED, "a {}-D reference blob for a {}-D input is not supported", ref.rank,
                    x.rank);
    if (n < 3 && x.rank == 3 && coffset != 0)
        return fail(l, StatusCode::INVALID_ARGUMENT,
                    "channel offset {} (2=) with a {}-D reference keeps every channel and overruns", coffset,
                    ref.rank);
    const std::vector<int64_t> all_offsets{coffset, hoffset, woffset};
    const std::vector<int64_t> offsets(all_offsets.end() - n, all_offsets.end());
    std::vector<int64_t> axes;
    for (int a = x.rank + 1 - n; a <= x.rank; ++a) axes.push_back(a);
    const int starts = const_i64(l, "starts", offsets);
    const int sizes = temp(l, "sizes"), ends = temp(l, "ends");
    node(l, "sizes", "Shape", {ref.value}, {sizes},
         {{"start", int64_t{ref.rank + 1 - n}}, {"end", int64_t{ref.rank + 1}}});
    node(l, "ends", "Add", {starts, sizes}, {ends});
    node(l, "", "Slice", {x.value, starts, ends, const_i64(l, "axes", axes)}, {top(l, 0, x.rank)});
    return {};
}

Status Importer::on_pooling(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1, 11, 2, 12, 3, 14, 13, 15, 4, 5, 6, 7, 8, 18}));
    LOOM_ASSIGN_OR_RETURN(int64_t type, get_int(l, 0, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t global, get_int(l, 4, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t adaptive, get_int(l, 7, 0));
    if (type != 0 && type != 1)
        return fail(l, StatusCode::UNSUPPORTED, "pooling_type {} is not 0 max or 1 average", type);
    const Blob x = in(l, 0);
    LOOM_TRY(need_rank(l, x, 3, "pooling"));
    const bool max = type == 0;
    if (global) {
        // ncnn's global pooling gives a 1-D blob of the channels.
        const int pooled = temp(l, "pooled");
        node(l, "", max ? "GlobalMaxPool" : "GlobalAveragePool", {x.value}, {pooled});
        node(l, "flatten", "Flatten", {pooled}, {top(l, 0, 1)}, {{"axis", int64_t{1}}});
        return {};
    }
    if (adaptive) {
        LOOM_ASSIGN_OR_RETURN(int64_t out_w, get_int(l, 8, 0));
        LOOM_ASSIGN_OR_RETURN(int64_t out_h, get_int(l, 18, out_w));
        if (out_w != 1 || out_h != 1)
            return fail(l, StatusCode::UNSUPPORTED, "adaptive pooling to {}x{} has no ONNX op (only 1x1 is mapped)",
                        out_h, out_w);
        node(l, "", max ? "GlobalMaxPool" : "GlobalAveragePool", {x.value}, {top(l, 0, 3)});
        return {};
    }
    LOOM_ASSIGN_OR_RETURN(int64_t kernel_w, get_int_min(l, 1, 0, 1, "kernel_w"));
    LOOM_ASSIGN_OR_RETURN(int64_t kernel_h, get_int_min(l, 11, kernel_w, 1, "kernel_h"));
    LOOM_ASSIGN_OR_RETURN(int64_t stride_w, get_int_min(l, 2, 1, 1, "stride_w"));
    LOOM_ASSIGN_OR_RETURN(int64_t stride_h, get_int_min(l, 12, stride_w, 1, "stride_h"));
    LOOM_ASSIGN_OR_RETURN(int64_t pad_left, get_int_min(l, 3, 0, 0, "pad_left"));
    LOOM_ASSIGN_OR_RETURN(int64_t pad_right, get_int_min(l, 14, pad_left, 0, "pad_right"));
    LOOM_ASSIGN_OR_RETURN(int64_t pad_top, get_int_min(l, 13, pad_left, 0, "pad_top"));
    LOOM_ASSIGN_OR_RETURN(int64_t pad_bottom, get_int_min(l, 15, pad_top, 0, "pad_bottom"));
    LOOM_ASSIGN_OR_RETURN(int64_t pad_mode, get_int(l, 5, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t include_pad, get_int(l, 6, 0));
    if (pad_mode < 0 || pad_mode > 3)
        return fail(l, StatusCode::UNSUPPORTED, "pad_mode {} is not 0 full, 1 valid, 2 SAME_UPPER or 3 SAME_LOWER",
                    pad_mode);
    const bool strided = stride_w > 1 || stride_h > 1;
    KernelAttrs attrs{{"kernel_shape", std::vector<int64_t>{kernel_h, kernel_w}},
                      {"strides", std::vector<int64_t>{stride_h, stride_w}}};
    const std::vector<int64_t> pads{pad_top, pad_left, pad_bottom, pad_right};
    const bool any_pad = pad_top || pad_left || pad_bottom || pad_right;
    if (pad_mode == 0) {
        // Full padding: ncnn extends the bottom/right so the last window fits, i.e. ceil mode.
        if (!max && include_pad && strided)
            return fail(l, StatusCode::UNSUPPORTED,
                        "average pooling with full padding (5=0), 6=1 and stride > 1 divides edge windows by the whole "
                        "kernel including the ceil-mode tail, which ONNX AveragePool does not");
        attrs.set("pads", pads);
        if (strided) attrs.set("ceil_mode", int64_t{1});
    } else if (pad_mode == 1) {
        attrs.set("pads", pads);
    } else {
        // ncnn's average over SAME padding counts the padded zeros (its exclusion only knows the
        // 3= 13= 14= 15= paddings, which SAME modes do not apply).
        if (!max && !include_pad && any_pad)
            return fail(l, StatusCode::UNSUPPORTED,
                        "average pooling with SAME padding (5={}) and paddings given has no exact ONNX form", pad_mode);
        attrs.set("auto_pad", pad_mode == 2 ? "SAME_UPPER" : "SAME_LOWER");
    }
    if (!max) attrs.set("count_include_pad", int64_t{pad_mode >= 2 ? 1 : (include_pad ? 1 : 0)});
    node(l, "", max ? "MaxPool" : "AveragePool", {x.value}, {top(l, 0, 3)}, std::move(attrs));
    return {};
}

// Interp: 1 nearest (source = floor(dst / scale)), 2 bilinear, 3 bicubic (A = -0.75, edge
// taps clamped), half-pixel centres unless align_corner (6=1; nearest ignores it, as ncnn).
// The output is floor(in * scale) (1= h, 2= w) or the fixed size 3= h, 4= w.
Status Importer::on_interp(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1, 2, 3, 4, 5, 6}));
    LOOM_ASSIGN_OR_RETURN(int64_t type, get_int(l, 0, 0));
    LOOM_ASSIGN_OR_RETURN(double height_scale, get_float(l, 1, 1.0));
    LOOM_ASSIGN_OR_RETURN(double width_scale, get_float(l, 2, 1.0));
    LOOM_ASSIGN_OR_RETURN(int64_t out_h, get_int_min(l, 3, 0, 0, "output_height"));
    LOOM_ASSIGN_OR_RETURN(int64_t out_w, get_int_min(l, 4, 0, 0, "output_width"));
    LOOM_ASSIGN_OR_RETURN(int64_t dynamic, get_int(l, 5, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t align_corner, get_int(l, 6, 0));
    if (type < 1 || type > 3)
        return fail(l, StatusCode::UNSUPPORTED, "resize_type {} is not 1 nearest, 2 bilinear or 3 bicubic", type);
    if (dynamic) return fail(l, StatusCode::UNSUPPORTED, "a target size from a blob (5={}) is not supported", dynamic);
    if ((out_h > 0) != (out_w > 0))
        return fail(l, StatusCode::UNSUPPORTED,
                    "only one of output_height {} and output_width {} is set (ncnn then mixes scale and size)", out_h,
                    out_w);
    const bool fixed = out_h > 0;
    if (!fixed &&
        (!(height_scale > 0) || !(width_scale > 0) || !std::isfinite(height_scale) || !std::isfinite(width_scale)))
        return fail(l, StatusCode::INVALID_ARGUMENT, "scales {} x {} must be positive", height_scale, width_scale);
    const Blob x = in(l, 0);
    LOOM_TRY(need_rank(l, x, 3, "Interp"));

    KernelAttrs attrs;
    if (type == 1) {
        attrs = {{"mode", "nearest"}, {"coordinate_transformation_mode", "asymmetric"}, {"nearest_mode", "floor"}};
    } else {
        attrs = {{"mode", type == 2 ? "linear" : "cubic"},
                 {"coordinate_transformation_mode", align_corner ? "align_corners" : "half_pixel"}};
        if (type == 3) attrs.set("cubic_coeff_a", -0.75).set("exclude_outside", int64_t{0});
    }
    const int y = top(l, 0, 3);
    auto whole = [](double s) { return s >= 1 && s == std::floor(s); };
    if (!fixed && (type == 1 || (whole(height_scale) && whole(width_scale)))) {
        // Nearest maps with the scale itself, as ncnn does; with whole scales in/out = scale.
        node(l, "", "Resize",
             {x.value, -1, const_f32(l, "scales", {4}, {1.f, 1.f, as_float(height_scale), as_float(width_scale)})}, {y},
             std::move(attrs));
        return {};
    }
    // Linear and cubic map with in/out, so the output size is computed as ncnn does:
    // int(float(h) * scale), or the fixed size.
    const int nc = temp(l, "nc");
    node(l, "nc", "Shape", {x.value}, {nc}, {{"start", int64_t{0}}, {"end", int64_t{2}}});
    int hw = -1;
    if (fixed) {
        hw = const_i64(l, "size", {out_h, out_w});
    } else {
        const int in_hw = temp(l, "hw"), in_hwf = temp(l, "hw_float"), scaled = temp(l, "hw_scaled");
        hw = temp(l, "hw_out");
        node(l, "hw", "Shape", {x.value}, {in_hw}, {{"start", int64_t{2}}, {"end", int64_t{4}}});
        node(l, "hw_float", "Cast", {in_hw}, {in_hwf}, {{"to", kOnnxFloat}});
        node(l, "hw_scaled", "Mul",
             {in_hwf, const_f32(l, "scale_hw", {2}, {as_float(height_scale), as_float(width_scale)})}, {scaled});
        node(l, "hw_out", "Cast", {scaled}, {hw}, {{"to", kOnnxInt64}});
    }
    const int sizes = temp(l, "sizes");
    node(l, "sizes", "Concat", {nc, hw}, {sizes}, {{"axis", int64_t{0}}});
    node(l, "", "Resize", {x.value, -1, -1, sizes}, {y}, std::move(attrs));
    return {};
}

// PixelShuffle mode 0 reads input channel c*r*r + i*r + j (PyTorch, ONNX DepthToSpace CRD);
// mode 1 reads (i*r + j)*C + c (DCR).
Status Importer::on_pixelshuffle(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1}));
    LOOM_ASSIGN_OR_RETURN(int64_t factor, get_int_min(l, 0, 1, 1, "upscale_factor"));
    LOOM_ASSIGN_OR_RETURN(int64_t mode, get_int(l, 1, 0));
    if (mode != 0 && mode != 1) return fail(l, StatusCode::UNSUPPORTED, "mode {} is not 0 or 1", mode);
    const Blob x = in(l, 0);
    LOOM_TRY(need_rank(l, x, 3, "PixelShuffle"));
    node(l, "", "DepthToSpace", {x.value}, {top(l, 0, 3)},
         {{"blocksize", factor}, {"mode", mode == 0 ? "CRD" : "DCR"}});
    return {};
}

// Padding: top 0=, bottom 1=, left 2=, right 3=, front 7=, behind 8= (channels); type 4= 0
// constant (value 5=), 1 replicate, 2 reflect.
Status Importer::on_padding(const Layer& l) {
    LOOM_TRY(check_keys(l, {0, 1, 2, 3, 4, 5, 6, 7, 8}));
    if (l.bottoms.size() != 1)
        return fail(l, StatusCode::UNSUPPORTED, "paddings from a blob ({} inputs) are not supported", l.bottoms.size());
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_ASSIGN_OR_RETURN(int64_t top_pad, get_int(l, 0, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t bottom, get_int(l, 1, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t left, get_int(l, 2, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t right, get_int(l, 3, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t type, get_int(l, 4, 0));
    LOOM_ASSIGN_OR_RETURN(double value, get_float(l, 5, 0.0));
    LOOM_ASSIGN_OR_RETURN(int64_t per_channel, get_int(l, 6, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t front, get_int(l, 7, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t behind, get_int(l, 8, 0));
    if (per_channel)
        return fail(l, StatusCode::UNSUPPORTED, "per-channel pad values (6={}) have no ONNX Pad form", per_channel);
    for (int64_t p : {top_pad, bottom, left, right, front, behind})
        if (p < 0) return fail(l, StatusCode::UNSUPPORTED, "negative padding {} is not supported", p);
    static constexpr const char* kModes[] = {"constant", "edge", "reflect"};
    if (type < 0 || type > 2)
        return fail(l, StatusCode::UNSUPPORTED, "type {} is not 0 constant, 1 replicate or 2 reflect", type);
    const Blob x = in(l, 0);
    std::vector<int64_t> pads;  // graph axes: begins then ends; ncnn ignores the sides a rank lacks
    if (x.rank == 1)
        pads = {0, left, 0, right};
    else if (x.rank == 2)
        pads = {0, top_pad, left, 0, bottom, right};
    else
        pads = {0, front, top_pad, left, 0, behind, bottom, right};
    if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) {
        alias(l, 0, x);
        return {};
    }
    std::vector<int> inputs{x.value, const_i64(l, "pads", pads)};
    if (type == 0) inputs.push_back(scalar_f32(l, "value", value));
    node(l, "", "Pad", std::move(inputs), {top(l, 0, x.rank)}, {{"mode", kModes[type]}});
    return {};
}

// Reshape to w 0=, h 1=, c 2= (-233: absent, which sets the rank); 0 copies the input's
// dim of the same name, -1 is inferred.
Status Importer::on_reshape(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1, 2, 3, 11}));
    LOOM_ASSIGN_OR_RETURN(int64_t w, get_int(l, 0, kUnset));
    LOOM_ASSIGN_OR_RETURN(int64_t h, get_int(l, 1, kUnset));
    LOOM_ASSIGN_OR_RETURN(int64_t c, get_int(l, 2, kUnset));
    LOOM_ASSIGN_OR_RETURN(int64_t d, get_int(l, 11, kUnset));
    LOOM_ASSIGN_OR_RETURN(int64_t permute, get_int(l, 3, 0));
    if (d != kUnset) return fail(l, StatusCode::UNSUPPORTED, "4-D reshape (11={}) is not supported", d);
    if (permute) return fail(l, StatusCode::UNSUPPORTED, "reshape in HWC order (3={}) is not supported", permute);
    const int rank = c != kUnset ? 3 : h != kUnset ? 2 : w != kUnset ? 1 : 0;
    if (rank == 0) return fail(l, StatusCode::INVALID_ARGUMENT, "no target shape (0= 1= 2=)");
    const std::vector<int64_t> dims = rank == 3   ? std::vector<int64_t>{c, h, w}
                                      : rank == 2 ? std::vector<int64_t>{h, w}
                                                  : std::vector<int64_t>{w};
    const Blob x = in(l, 0);
    std::vector<int64_t> shape{1};
    int inferred = 0;
    for (size_t i = 0; i < dims.size(); ++i) {
        const int64_t v = dims[i];
        const int inner = rank - 1 - static_cast<int>(i);  // 0 = w, 1 = h, 2 = c
        if (v > 0) {
            shape.push_back(v);
        } else if (v == -1) {
            if (++inferred > 1) return fail(l, StatusCode::INVALID_ARGUMENT, "more than one -1 in the target shape");
            shape.push_back(-1);
        } else if (v == 0) {
            // ncnn copies the input's dim of the same name (1 where the input has none); ONNX's 0
            // copies by position, which agrees only when the ranks do.
            if (inner >= x.rank)
                shape.push_back(1);
            else if (x.rank == rank)
                shape.push_back(0);
            else
                return fail(l, StatusCode::UNSUPPORTED, "0 (copy a dim) while reshaping a {}-D blob to {}-D", x.rank,
                            rank);
        } else {
            return fail(l, StatusCode::INVALID_ARGUMENT, "target dim {} (-233 only marks absent outer dims)", v);
        }
    }
    node(l, "", "Reshape", {x.value, const_i64(l, "shape", shape)}, {top(l, 0, rank)});
    return {};
}

Status Importer::on_flatten(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {}));
    node(l, "", "Flatten", {in(l, 0).value}, {top(l, 0, 1)}, {{"axis", int64_t{1}}});
    return {};
}

// Permute order_type names the output's w h c in input axes: 0 w h c, 1 h w c, 2 w c h,
// 3 c w h, 4 h c w, 5 c h w (2-D: 0 w h, 1 h w).
Status Importer::on_permute(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0}));
    LOOM_ASSIGN_OR_RETURN(int64_t order, get_int(l, 0, 0));
    const Blob x = in(l, 0);
    static const std::vector<int64_t> kPerm3[] = {{0, 1, 2, 3}, {0, 1, 3, 2}, {0, 2, 1, 3},
                                                  {0, 2, 3, 1}, {0, 3, 1, 2}, {0, 3, 2, 1}};
    std::vector<int64_t> perm;
    if (x.rank == 3 && order >= 0 && order < 6)
        perm = kPerm3[order];
    else if (x.rank == 2 && (order == 0 || order == 1))
        perm = order == 0 ? std::vector<int64_t>{0, 1, 2} : std::vector<int64_t>{0, 2, 1};
    else if (x.rank == 1 && order == 0)
        perm = {0, 1};
    else
        return fail(l, StatusCode::UNSUPPORTED, "order_type {} of a {}-D blob is not supported", order, x.rank);
    if (order == 0) {
        alias(l, 0, x);
        return {};
    }
    node(l, "", "Transpose", {x.value}, {top(l, 0, x.rank)}, {{"perm", perm}});
    return {};
}

Status Importer::on_softmax(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1}));
    LOOM_ASSIGN_OR_RETURN(int64_t axis, get_int(l, 0, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t fixbug0, get_int(l, 1, 0));
    if (!fixbug0 && axis != 0)
        return fail(l, StatusCode::UNSUPPORTED,
                    "axis {} without fixbug0 (1=1): ncnn's old softmax handled it wrongly; regenerate the .param",
                    axis);
    const Blob x = in(l, 0);
    LOOM_ASSIGN_OR_RETURN(int64_t graph_ax, graph_axis(l, axis, x.rank));
    node(l, "", "Softmax", {x.value}, {top(l, 0, x.rank)}, {{"axis", graph_ax}});
    return {};
}

// Per-channel scale (and bias): Mul (and Add) by [1, C, 1, 1] constants (the channel axis of
// a 2-D blob is h, of a 1-D blob w). With 0=-233 the scales are the second input blob instead
// (squeeze-and-excitation: global pooling, two InnerProducts, a sigmoid): ncnn reads its
// element q as channel q's scale, so it is reshaped to C values on the channel axis; a blob of
// another size fails shape inference rather than broadcasting some other way.
Status Importer::on_scale(const Layer& l) {
    LOOM_TRY(check_keys(l, {0, 1}));
    LOOM_ASSIGN_OR_RETURN(int64_t size, get_int(l, 0, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t bias_term, get_int(l, 1, 0));
    if (size == kUnset) {
        // ncnn's Scale::load_model reads nothing at all for 0=-233, so there is no bias to add.
        if (bias_term)
            return fail(l, StatusCode::UNSUPPORTED,
                        "bias_term 1 (1=) with scales from a blob (0=-233): ncnn loads no bias for it");
        LOOM_TRY(blob_counts(l, 2, 1));
        const Blob x = in(l, 0), s = in(l, 1);
        std::vector<int64_t> per_channel{1, -1};
        per_channel.resize(static_cast<size_t>(x.rank) + 1, 1);
        const int scales = temp(l, "scales");
        node(l, "scales", "Reshape", {s.value, const_i64(l, "scales_shape", per_channel)}, {scales});
        node(l, "", "Mul", {x.value, scales}, {top(l, 0, x.rank)});
        return {};
    }
    if (size <= 0) return fail(l, StatusCode::INVALID_ARGUMENT, "scale_data_size {} (0=) must be positive", size);
    LOOM_TRY(blob_counts(l, 1, 1));
    const Blob x = in(l, 0);
    std::vector<int64_t> dims{1, size};
    dims.resize(static_cast<size_t>(x.rank) + 1, 1);
    LOOM_ASSIGN_OR_RETURN(HostTensor scale, load(l, dims, false, "scales"));
    const int y = top(l, 0, x.rank);
    const int scaled = bias_term ? temp(l, "scaled") : y;
    node(l, bias_term ? "mul" : "", "Mul", {x.value, constant(l, "scale", std::move(scale))}, {scaled});
    if (bias_term) {
        LOOM_ASSIGN_OR_RETURN(HostTensor bias, load(l, dims, false, "bias"));
        node(l, "", "Add", {scaled, constant(l, "bias", std::move(bias))}, {y});
    }
    return {};
}

// BatchNorm: slope, mean, variance and bias (channels 0= each, raw fp32), eps 1=.
Status Importer::on_batchnorm(const Layer& l) {
    LOOM_TRY(blob_counts(l, 1, 1));
    LOOM_TRY(check_keys(l, {0, 1}));
    LOOM_ASSIGN_OR_RETURN(int64_t channels, get_int_min(l, 0, 0, 1, "channels"));
    LOOM_ASSIGN_OR_RETURN(double eps, get_float(l, 1, 0.0));
    if (eps < 0) return fail(l, StatusCode::INVALID_ARGUMENT, "eps {} (1=) is negative", eps);
    const Blob x = in(l, 0);
    LOOM_ASSIGN_OR_RETURN(HostTensor slope, load(l, {channels}, false, "slopes"));
    LOOM_ASSIGN_OR_RETURN(HostTensor mean, load(l, {channels}, false, "means"));
    LOOM_ASSIGN_OR_RETURN(HostTensor var, load(l, {channels}, false, "variances"));
    LOOM_ASSIGN_OR_RETURN(HostTensor bias, load(l, {channels}, false, "biases"));
    node(l, "", "BatchNormalization",
         {x.value, constant(l, "scale", std::move(slope)), constant(l, "bias", std::move(bias)),
          constant(l, "mean", std::move(mean)), constant(l, "var", std::move(var))},
         {top(l, 0, x.rank)}, {{"epsilon", eps}});
    return {};
}

}  // namespace

Result<Graph> import_ncnn(const std::string& param_path, const std::string& bin_path) {
    Importer importer(param_path, bin_path);
    return importer.run();
}

}  // namespace loom::compiler
