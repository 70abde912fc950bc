// Large frames: a fully convolutional model run over tiles of a frame that is too large for the
// device, with the result identical, bit for bit, to the untiled run.
//
// compiler::analyse_spatial_tiling gives the model's scale, halo, alignment, border loss
// (shrink) and its means over the whole frame. The model is compiled once for one window shape
// and loaded once; every tile is a window of the frame copied out on the host, run through one
// Session, and the part of its output that saw its full context (the tile's core) is written
// into the output frame.
//
// The tiling of one axis of F input pixels, for a core step T and a halo of l pixels before an
// output pixel and r after it (T a multiple of the alignment a), at scale s with the network
// losing c output pixels over its borders:
//   e = max(l + r + ceil(c / s), the reductions' overlap): the input pixels of a window that give
//   no output of their own;
//   window W = T + e + ((F - T - e) mod a), so that F - W is a multiple of a;
//   window i starts at min(i * T, F - W): origins step by T and the last window ends exactly at
//   the frame's edge, so every origin is a multiple of a (Winograd's 4x4 blocks and the strides'
//   grids fall where they fall in the untiled run) and border pixels see the true border;
//   window output pixel j is the frame's output pixel s * origin + j; tile i keeps the output
//   pixels [s (i T + l), s ((i + 1) T + l)), the first tile from 0 and the last to s F - c:
//   every kept pixel is at least s l from its window's inner start and s r from its inner end.
//   n = ceil((F - W) / T) + 1 windows; a frame of at most T + e pixels runs as one window of
//   F pixels (untiled along that axis).
//
// Means over the whole frame (squeeze-and-excitation: compiler::FrameReduction) take one pass
// over the tiles each, before the pass that writes the output: pass k computes the k-th mean's
// map with the means before it given, and each tile's share of that map is summed exactly
// (device/kernels/cpu/exact_sum.hpp, as GlobalAveragePool itself sums), so the mean is the
// untiled run's bit for bit. Each pass is a model compiled for the window; all of them stay
// loaded, and the tile size is chosen for their sum. Where there is room, pass k runs only the
// nodes after the (k-1)-th mean, reading what earlier passes kept per tile; otherwise it runs
// the network from the window up to its mean. What is kept stays in device memory when the
// device has room for it beside the passes (TiledOptions::carry_on_device): each tile's values
// in a slice of one buffer, written and read where they lie (Session::bind) and in the layout
// their producer wrote (no TransData at the passes' edges); else it goes through the host
// (TiledOptions::carry_bytes).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "compiler/tuning.hpp"
#include "compiler/halo.hpp"
#include "executor/executor.hpp"

namespace loom::executor {

// One axis of a tiling, in input pixels.
struct TileAxis {
    int64_t frame = 0;   // the frame's size
    int64_t window = 0;  // the compiled window's size (the frame's when untiled)
    int64_t step = 0;    // the core step T
    int64_t halo = 0;    // the halo (the larger side)
    std::vector<int64_t> origins;  // window origins, one per tile
    std::vector<int64_t> cuts;     // origins.size() + 1 bounds in output pixels: tile i keeps [cuts[i], cuts[i + 1])

    size_t count() const { return origins.size(); }
};

struct TilePlan {
    TileAxis h, w;
    size_t tiles() const { return h.count() * w.count(); }
};

// Plans axis `axis` (0: H, 1: W) of `frame` pixels with core step `step` (rounded up to
// t.align) as described above. Aborts on a non-positive frame or step.
TileAxis plan_tile_axis(int64_t frame, int64_t step, const compiler::SpatialTiling& t, size_t axis = 1);

// Returns the smallest step (a multiple of t.align, at most `step`) that gives `frame` as few
// windows as `step` does: the same tile count with less overlap.
int64_t balance_tile_step(int64_t frame, int64_t step, const compiler::SpatialTiling& t, size_t axis = 1);

// The frame padded as descriptor `d` says (`p` from compiler::frame_padding): the host's form of
// apply_descriptor's Pad, element for element.
HostTensor pad_frame(const HostTensor& frame, const compiler::ModelDescriptor& d, const compiler::FramePadding& p);
// As above, into `out` when it is of the padded dims and dtype and shares its data with no other
// tensor (every element is written), else into a new tensor there.
void pad_frame(const HostTensor& frame, const compiler::ModelDescriptor& d, const compiler::FramePadding& p,
               HostTensor& out);
// The network's output for a padded frame cut to scale x `frame` from (crop, crop), plus the
// nearest-upscaled frame when d.residual says so (same dtype as the output).
HostTensor finish_restore(const HostTensor& network_out, const HostTensor& frame, const compiler::ModelDescriptor& d);

struct TiledOptions {
    // The core step in input pixels along H and W, rounded up to the alignment; 0: chosen from
    // device memory (the largest window whose arena and weights fit in the free device memory
    // less the margin, then balanced so the tiles overlap no more than needed).
    int64_t tile = 0;
    double device_memory_margin = 0.1;  // fraction of the device's capacity kept free (tile = 0)
    compiler::Precision precision = compiler::Precision::FP32;  // FP32 or FP16 (INT8 calibrates per shape: refused)
    // Tilings for the window's launches instead of the default heuristic's (a tuner's knowledge
    // base: compiler/tuning.hpp); null: the default everywhere.
    std::shared_ptr<const compiler::TilingSource> tiling_source;
    bool optimize = true;               // run the fusion passes
    // Time each eligible conv's host algorithms at the frame's shape before the analysis and
    // keep the fastest (compiler/measure.hpp): the analysis and every window then run each conv
    // the same way, so tiles stay bit-identical to an untiled run with the same choices.
    bool measure_host = false;
    // Host bytes the runner may keep between the passes of a model with means over the frame
    // (squeeze-and-excitation: tiled.hpp), so that each pass starts where the last one stopped
    // instead of running the network from the window again; -1: half of what the host has
    // available when the runner is created less what other live runners keep
    // (host_carry_promised()); 0: never (every pass runs from the window).
    int64_t carry_bytes = -1;
    // Keep the handed-on values in device memory, each tile's in a slice of one buffer, when the
    // device has room for them beside the passes (less the margin): no copies between passes.
    // Otherwise (or false) they go through the host, within carry_bytes.
    bool carry_on_device = true;
    // Run the model as its program does (the graph's descriptor, compiler/descriptor.hpp): the
    // frame is padded on the host, the padded frame tiled, the network's output cropped to
    // scale x the frame and the residual added; equal to apply_descriptor's untiled run.
    bool restore = false;
};

struct TiledStats {
    size_t tiles = 0;      // windows run, over every pass
    size_t passes = 0;     // passes over the tiles: one per mean over the frame, and the output's
    bool carried = false;  // the passes handed values on (TiledOptions::carry_bytes) rather than recomputing
    double sim_ms = 0;   // simulated device time summed over the tiles' inferences
    double wall_ms = 0;  // host wall time of run(), with the window copies
    size_t launches = 0;
};

// A model compiled for one window of a frame shape and loaded on a device. Not thread-safe.
class TiledRunner {
public:
    // Analyses `g` (one NCHW input, given `frame_dims`; UNSUPPORTED names the node that cannot be
    // tiled), chooses the tiling (options.tile, or from device memory: OUT_OF_DEVICE_MEMORY when
    // not even the smallest window fits), compiles the model for the window and loads it.
    static Result<std::unique_ptr<TiledRunner>> create(device::Device& dev, compiler::Graph g,
                                                       std::vector<int64_t> frame_dims,
                                                       const TiledOptions& options = {});

    // Runs every tile of `frame` (of the dims and dtype given to create) and returns the model's
    // outputs for the whole frame, equal to the untiled run's (with restore: scale x the frame). A failed tile fails the call; the
    // runner stays usable.
    Result<std::vector<HostTensor>> run(const HostTensor& frame, TiledStats* stats = nullptr);

    const compiler::SpatialTiling& tiling() const { return tiling_; }
    const TilePlan& plan() const { return plan_; }
    // The model compiled for the window (the output's pass).
    const CompiledModel& model() const { return stages_.back().loaded->model(); }
    // Whether passes hand values on (TiledOptions::carry_bytes), whether they keep them in device
    // memory (carry_on_device) rather than on the host, and the most memory that takes there.
    bool carried() const { return carried_; }
    bool carried_on_device() const { return carried_on_device_; }
    int64_t carried_bytes() const { return carried_bytes_; }
    // For a model with means over the frame: how its passes run and why (for logs); else empty.
    const std::string& carry_note() const { return carry_note_; }
    const std::vector<int64_t>& frame_dims() const { return frame_dims_; }
    compiler::DType frame_dtype() const { return frame_dtype_; }
    // The whole frame's output dims, per model output.
    const std::vector<std::vector<int64_t>>& output_dims() const { return output_dims_; }

    TiledRunner(const TiledRunner&) = delete;  // its sessions are bound to its own buffer
    TiledRunner& operator=(const TiledRunner&) = delete;
    ~TiledRunner();

    // The host bytes every live runner in this process keeps between its passes (its
    // carried_bytes() when it hands values on through the host). A runner on the default
    // carry_bytes (-1) takes half of the available host memory less these.
    static int64_t host_carry_promised();

private:
    TiledRunner() = default;
    compiler::SpatialTiling tiling_;
    TilePlan plan_;
    std::vector<int64_t> frame_dims_;
    compiler::DType frame_dtype_ = compiler::DType::F32;
    std::vector<std::vector<int64_t>> output_dims_;  // per output, for the whole frame
    // With restore: the descriptor, and the padded frame the network runs on (net_dims_).
    std::optional<compiler::ModelDescriptor> restore_;
    compiler::FramePadding padding_;
    std::vector<int64_t> net_dims_;
    std::vector<std::vector<int64_t>> net_output_dims_;

    // One pass over the tiles (tiled.hpp), loaded: what each of its inputs takes, the value each
    // of its outputs is, and what a tile keeps after it (when values are carried between passes).
    struct Feed {
        enum Kind : uint8_t { WINDOW, MEAN, CARRIED } kind = WINDOW;
        size_t mean = 0;   // MEAN: the reduction's index
        std::string name;  // CARRIED: the value
    };
    struct Stage {
        std::shared_ptr<LoadedModel> loaded;
        std::unique_ptr<Session> session;
        std::vector<Feed> feed;
        std::vector<std::string> gives;
        std::vector<std::string> keep;
        std::vector<BoundLaunches> bound;  // on the device: per tile, the handed values bound to its slice
    };
    device::DeviceBuffer carry_buffer_;  // before stages_: it outlives the sessions bound to it
    std::vector<Stage> stages_;
    std::vector<std::string> output_names_;  // the network's outputs, in order
    bool carried_ = false;                   // passes hand values on (each tile's store, or slice)
    bool carried_on_device_ = false;         // in carry_buffer_, tile i's slice from i x tile_slice_
    // Allocates carry_buffer_ (carried_bytes_) and binds every pass's session to each tile's
    // slice, the handed values at their `slot` offsets in it.
    Status bind_carry(device::Device& dev, const std::unordered_map<std::string, int64_t>& slot, size_t tiles);
    int64_t carried_bytes_ = 0;              // the most the stores hold, or carry_buffer_'s size (all tiles)
    int64_t tile_slice_ = 0;
    int64_t host_promise_ = 0;  // what this runner added to host_carry_promised()
    std::string carry_note_;
    // Per tile (row-major), carried mode: the values later passes read.
    std::vector<std::unordered_map<std::string, HostTensor>> store_;
    // Buffers the passes' outputs are written into, recycled from values no longer read: after
    // the first frame, tiles allocate (and fault in) no host memory. Holds at most what was
    // live at once.
    std::vector<HostTensor> free_;
    HostTensor padded_;  // restore mode: the last frame's padded copy, its buffer reused
    HostTensor take_buffer(compiler::DType dtype, const std::vector<int64_t>& dims);
    void give_back(HostTensor&& t);  // into free_, unless another tensor shares its data
    // Per reduction, per axis (H, W): tile i sums the map pixels [cuts[i], cuts[i + 1]).
    std::vector<std::array<std::vector<int64_t>, 2>> reduction_cuts_;

    Result<std::vector<HostTensor>> run_network(const HostTensor& frame, TiledStats& local);
    // Runs pass k on every tile, calling use(ty, tx, values) with the tile's values by name (the
    // pass's outputs and, carried, what earlier passes kept), then keeping what later passes read.
    template <typename Use>
    Status run_stage(size_t k, const HostTensor& frame, const std::vector<std::vector<float>>& means, TiledStats& local,
                     Use use);
};

}  // namespace loom::executor
