// The restore engine: one restoration model prepared once for one input frame format on a
// device context, then frames pushed in and restored frames handed back in submission order.
// Every face of Loom that restores frames is a short loop over it: the pipeline's infer stage,
// `loomc run --restore`, and the daemon's jobs, streams and the GStreamer element to come.
//
// Preparing (Engine::create) does, once: the model's name resolved to a file (the models
// folder, or a path), the tuner's knowledge base read, the graph imported and wrapped in its
// descriptor (pad, network, crop, residual: exactly scale x the frame), compiled through the
// compile cache or taken from the context's model cache (weights shared with every engine of
// the same model on the context), the tiling decision (whole frames, or tiles when the whole
// frame does not fit the device memory), and every byte of device memory the engine will use
// reserved: a frame never fails for device memory, an engine that cannot fit fails here.
//
// Per frame, on the device (one slot of in_flight, each with its own stream and buffers): the
// chip's video decoder's time, the upload of the YUV frame as it is (4:2:0 crosses the host
// link, not float RGB), preprocessing on the media engine (colour matrix and range of the frame,
// normalisation into the model's tensor), the compiled model, postprocessing on the media
// engine (back to 4:2:0 in the output's colour contract), the download, the video encoder's
// time. Frames in flight overlap on the copy engines, the AI cores and the media engine.
//
// submit() returns once the frame's device work is queued; it waits only while all in_flight
// slots are busy (lossless back-pressure). The completion runs when the frame is restored, in
// submission order, on a thread of the context's pool: it must return soon and not wait for
// device work. flush() waits until every submitted frame's completion has run. abandon() stops
// the engine: queued device work is skipped and the frames in flight complete with CANCELLED,
// within one kernel's time.
//
// Tiled frames (executor/tiled.hpp, bit-identical to whole frames) run one at a time: the
// converted frame comes down, the tiles run, the output goes back up for postprocessing;
// submit() returns once the output's device work is queued.
//
// Threads: submit(), flush() and abandon() may be called from any thread, one submit() at a
// time; stats() and describe() from any thread at any time. A completion must not destroy its
// engine (the destructor waits for the completions, that one included).
//
// Tiled frames: abandon() skips the frame's device work still queued, but tiles already running
// on the host finish first (one frame's tiles at most).
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/frame.hpp"
#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "compiler/descriptor.hpp"
#include "device/media.hpp"
#include "device/runtime.hpp"
#include "executor/frame_scheduler.hpp"
#include "executor/tiled.hpp"
#include "restore/context.hpp"

namespace loom::restore {

// The model a face asks for, and how to build it.
struct ModelRequest {
    // A model name (NAME.param or NAME.onnx in models_dir, or one folder down; FOLDER/NAME where
    // a name is in two folders) or a path to an .onnx / ncnn .param file or a compiled .loom
    // file (relative to base_dir).
    std::string model;
    std::string where;       // where the request came from, for errors ("file:line:col")
    std::string base_dir;    // relative paths (model, kb) are relative to it
    std::string models_dir;  // where names resolve
    std::string cache_dir;   // the compile cache folder; empty: compile without one
    // A tuner's knowledge base (`loomc tune --kb`): the launches take the tilings it holds for
    // this device and frame size; it must exist. Empty: none.
    std::string kb;
    std::string where_kb;
    compiler::Precision precision = compiler::Precision::FP32;  // fp32 | fp16
    bool measure_host = false;  // time each 3x3 conv's host algorithms at the frame's size
    // Run the model by its descriptor (compiler/descriptor.hpp) as its own program does; false:
    // the bare network, whose output must then be scale x the frame.
    bool restore = true;
};

// Enqueues on `st` the upload of `frame` into `dst`, a tight frame of frame.layout in device
// memory: one copy when the frame is tight, else one 2-D copy per plane that leaves the rows'
// padding behind (the link carries the pixels only). `frame`'s memory must stay alive until
// the copies have run.
Status upload_frame(device::Stream& st, const FrameView& frame, device::DevicePtr<uint8_t> dst,
                    std::string_view name = "h2d");

// Resolves a model name or path as ModelRequest::model says; errors name `where`.
Result<std::string> resolve_model(const ModelRequest& request);

// True for a compiled model file (.loom, `loomc compile`): compiled for one frame size, device
// and precision, it runs whole frames of that size only, as compiled.
bool is_compiled_model(const std::string& path);
// The frame size (width, height) a request's model is compiled for: set for a .loom, empty for
// a model compiled here for any size. Errors name `where` and the file.
Result<std::optional<std::array<int64_t, 2>>> compiled_frame_size(const ModelRequest& request);

struct EngineOptions {
    ModelRequest model;
    int64_t in_flight = 3;  // frames on the device at once (1..16)
    // 0: whole frames, or tiles when the whole frame does not fit in device memory; N > 0:
    // always tiles with a core step of N input pixels; -1: never tiles.
    int64_t tile = 0;
    // Tiled runs of a model with means over the frame (Real-CUGAN, CUnet): host bytes its passes
    // over the tiles may keep to hand values on (executor::TiledOptions::carry_bytes; -1: half
    // the host memory available when the engine prepares, 0: every pass runs from the window).
    int64_t tile_carry_bytes = -1;
    // Output buffers the engine owns, for submit() without a destination (0: in_flight + 1);
    // allocated on first use, never more.
    size_t output_buffers = 0;
    // Normalisation of [0,1] RGB into the model and back (default: the descriptor's value range,
    // else mean 0, std 1), and the model's channel order (default: the descriptor's, else RGB).
    std::optional<std::array<float, 3>> mean, std;
    std::optional<device::ChannelOrder> order;
    // The output's pixel format and colour contract (default: the input's).
    std::optional<PixelFormat> output_format;
    std::optional<ColorMatrix> output_matrix;
    std::optional<ColorRange> output_range;
};

// What frames look like on one side of the engine.
struct FrameFormat {
    FrameLayout layout;
    ColorInfo color;
};

// One restored frame, as the completion receives it.
struct RestoredFrame {
    uint64_t sequence = 0;  // submission order, from 0
    uint64_t tag = 0;       // the caller's, from submit()
    Status status;          // the frame's error (a device fault, CANCELLED after abandon())
    // The restored frame (output_format(), tight rows): in the caller's destination, or in one
    // of the engine's buffers, which goes back to the engine when the last copy of the view is
    // dropped. Empty when status is an error.
    FrameView view;
};
using Completion = std::function<void(RestoredFrame)>;

struct EngineStats {
    uint64_t frames_submitted = 0;
    uint64_t frames_completed = 0;  // completions run, failed ones included
    uint64_t frames_failed = 0;
    uint64_t h2d_bytes = 0, d2h_bytes = 0;  // frames over the host link
    uint64_t inferences = 0;                // whole-frame inferences (0 when tiled)
    uint64_t slot_waits = 0;                // submits that waited for a busy slot
    double sim_ms = 0;                      // simulated time from the first submit to now (after flush(): to the last completion)
    double sim_fps = 0;                     // frames_completed over sim_ms (shared devices: other work included)
    size_t device_memory_reserved = 0;      // buffers and arenas taken at create, weights excluded
    size_t weight_bytes = 0;                // the model's weights on the device
    bool weights_shared = false;            // another engine had loaded them (nothing uploaded)
};

// The least device memory an engine takes for a request and frame format, found without
// compiling or taking anything (the model is imported, not compiled): the weights of its
// convolutions and matrix products at the request's precision, and the frame buffers of the
// cheapest plan the options allow (tiles: one slot, the frame's tensors in and out; whole
// frames only: in_flight slots, each with an arena that holds at least its output). A request
// above the device's capacity can never run on it; one below may still need more.
struct MemoryFloor {
    uint64_t bytes = 0;
    uint64_t weight_bytes = 0;
    FrameFormat output;      // the restored frames (scale from the descriptor; 1 without one)
    std::string model_path;  // the model as resolved
    std::string detail;      // "weights W + frames F (tiles, one slot)" for messages
};

class Engine {
public:
    // See MemoryFloor. Errors name the request's `where` and the model file.
    static Result<MemoryFloor> memory_floor(const EngineOptions& options, const FrameFormat& input);

    // Prepares the model for frames of `input` on `context` (see the header comment). Errors
    // name the request's `where`, the model file and the figure at fault.
    static Result<std::unique_ptr<Engine>> create(std::shared_ptr<DeviceContext> context, const EngineOptions& options,
                                                  const FrameFormat& input);
    // Completes every frame submitted (flush()), then frees the engine's device memory.
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    const FrameFormat& input_format() const { return input_; }
    const FrameFormat& output_format() const { return output_; }
    int64_t scale() const { return scale_; }
    bool tiled() const { return runner_ != nullptr; }

    // Queues `frame` (of input_format().layout; any strides; kept alive through its owner until
    // the frame completes) and returns; `done` runs when it is restored. `dst`, when given, is
    // page-locked memory of output_format().layout.bytes() bytes that the restored frame is
    // written to (it must stay alive until `done` runs); without it the engine's own buffer is
    // used, waiting while all are held by views not yet dropped. `tag` is handed back. A bad
    // frame is refused (INVALID_ARGUMENT) and `done` not called; after abandon(), CANCELLED.
    Status submit(const FrameView& frame, Completion done, uint8_t* dst = nullptr, uint64_t tag = 0);
    // Waits until every submitted frame's completion has run.
    void flush();
    // Abandons the frames in flight (their completions run with CANCELLED, soon) and refuses
    // later submits. Any thread; call flush() after it to wait for the completions.
    void abandon();

    // Restores one frame given as the model's input tensor (1x3xHxW of the input's size, RGB in
    // the model's value range, the compiled dtype) through the same compiled model, tiles and
    // device as frames, without the media engine's conversions: what `loomc run --restore`
    // runs. Waits for the result; `sim_ms` gets its simulated time. Not while frames submitted
    // with submit() are in flight (call flush() first).
    Result<compiler::HostTensor> restore_tensor(const compiler::HostTensor& frame, double* sim_ms = nullptr);
    // The name of the model's output (for writing it as a tensor).
    std::string output_name() const;

    EngineStats stats() const;
    // The engine's choices as JSON: model, precision, compile cache, knowledge base, scale,
    // descriptor, in_flight, output format, tiles.
    nlohmann::json describe() const;

private:
    struct Pending;
    Engine() = default;
    Status prepare(const FrameFormat& input);
    Status open_kb();
    Status prepare_whole(compiler::Graph g, std::vector<int64_t>& out_dims);
    Status prepare_compiled(std::vector<int64_t>& out_dims);
    Status adopt(SharedModel shared, const std::string& outcome, std::vector<int64_t>& out_dims);
    void set_normalisation(const std::optional<compiler::ModelDescriptor>& descriptor);
    Status prepare_tiled(compiler::Graph g, int64_t step, std::vector<int64_t>& out_dims);
    Status enqueue_preprocess(device::Stream& st, const FrameView& in, size_t slot, device::DevicePtr<uint8_t> tensor);
    Status enqueue_postprocess(device::Stream& st, device::DevicePtr<const uint8_t> tensor, size_t slot, uint8_t* dst,
                               uint64_t seq);
    Status submit_whole(const FrameView& in, uint8_t* dst, uint64_t seq);
    Status submit_tiled(const FrameView& in, uint8_t* dst, uint64_t seq);
    void complete(uint64_t seq, Status st);

    std::shared_ptr<DeviceContext> context_;
    EngineOptions options_;
    FrameFormat input_, output_;
    std::string model_path_, cache_outcome_, kb_path_;
    size_t kb_records_ = 0;
    std::shared_ptr<const compiler::TilingSource> tilings_;
    std::optional<compiler::ModelDescriptor> descriptor_;
    device::TensorFormat in_tensor_, out_tensor_;
    int64_t scale_ = 1;
    size_t device_memory_reserved_ = 0;
    size_t weight_bytes_ = 0;
    bool weights_shared_ = false;

    // Whole frames: the shared model and a FrameScheduler of in_flight slots.
    std::shared_ptr<executor::LoadedModel> loaded_;
    std::unique_ptr<executor::FrameScheduler> frames_;
    // Tiled: the runner, its stream, the frame's tensors on the device and on the host.
    std::unique_ptr<executor::TiledRunner> runner_;
    device::Stream tiled_stream_;
    device::DeviceBuffer tensor_in_, tensor_out_;
    compiler::HostTensor host_in_, host_out_;
    // Per slot (tiled: one): YUV buffers on the device, the task names, the slot's stream (seen
    // on its first frame; abandon() aborts it).
    struct Slot {
        device::DeviceBuffer yuv_in, yuv_out;
        std::string vdec, h2d, preprocess, postprocess, d2h, venc, tensor_d2h, tensor_h2d;
        device::Stream stream;
    };
    std::vector<Slot> slots_;

    // Frames between submit() and their completion, by sequence number modulo its size.
    struct Pending {
        bool used = false, done = false;
        FrameView input;
        Completion completion;
        uint8_t* dst = nullptr;
        std::shared_ptr<const void> buffer;  // the engine's output buffer, or empty for the caller's
        uint64_t tag = 0;
        Status status;
    };
    mutable std::mutex mutex_;  // guards everything below
    std::condition_variable cv_;
    std::vector<Pending> pending_;
    uint64_t next_seq_ = 0, next_complete_ = 0;
    bool completing_ = false;  // a thread runs completions (in order) now
    bool abandoned_ = false;
    uint64_t failed_ = 0, h2d_bytes_ = 0, d2h_bytes_ = 0;
    device::SimTime sim_first_ = 0;  // the host's simulated clock at the first submit
    // The engine's output buffers, shared with the views that hold one (they may outlive the
    // engine).
    struct OutputBuffers;
    std::shared_ptr<OutputBuffers> outputs_;
};

}  // namespace loom::restore
