// testsrc: a source that generates frames (a moving pattern of gradients and bars, different in
// every frame), as GStreamer's videotestsrc does: pipelines, tests and benchmarks that need
// frames but no file. Its caps carry the frame format, the colour contract and the time base
// (1/rate), and no file: an encode stage downstream writes the video alone.
//
//   width, height   frame size (default 320 x 180)
//   format          yuv420p | nv12 | yuv420p10le | p010le (default yuv420p)
//   matrix, range   the colour contract the frames are tagged with (default bt709, limited)
//   rate            frames per second: pts count frames in a time base of 1/rate (default 25)
//   count           frames to generate (default 30)
//   frames          frames in flight from this stage (default 8)
#include <cstring>

#include "pipeline/stage.hpp"

namespace loom::pipeline {
namespace {

// Writes sample `v` (8-bit scale) at `p` in `f`'s sample format.
inline void put(uint8_t* p, size_t i, PixelFormat f, uint32_t v) {
    switch (f) {
    case PixelFormat::YUV420P:
    case PixelFormat::NV12: p[i] = static_cast<uint8_t>(v); break;
    case PixelFormat::YUV420P10: reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v << 2); break;
    case PixelFormat::P010: reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v << 8); break;
    case PixelFormat::RGB24:
    case PixelFormat::BGR24: break;  // not taken (yuv_format_from_name)
    }
}

// Frame `t` of the pattern into the tight buffer `dst`: diagonal luma gradients that move with
// t, chroma ramps across and down, inside the limited range.
void draw(const FrameLayout& l, int64_t t, uint8_t* dst) {
    const PixelFormat f = l.format;
    for (int64_t y = 0; y < l.height; ++y)
        for (int64_t x = 0; x < l.width; ++x)
            put(dst, static_cast<size_t>(y * l.width + x), f, 16 + static_cast<uint32_t>((x + 2 * y + 3 * t) % 220));
    uint8_t* u = dst + l.u_offset();
    uint8_t* v = dst + l.v_offset();
    const int64_t cw = l.chroma_width(), ch = l.chroma_height();
    for (int64_t y = 0; y < ch; ++y)
        for (int64_t x = 0; x < cw; ++x) {
            const auto cu = static_cast<uint32_t>(64 + (x * 128 / cw + t) % 128);
            const auto cv = static_cast<uint32_t>(64 + (y * 128 / ch + 2 * t) % 128);
            const auto i = static_cast<size_t>(y * cw + x);
            if (semi_planar(f)) {
                put(u, 2 * i, f, cu);
                put(u, 2 * i + 1, f, cv);
            } else {
                put(u, i, f, cu);
                put(v, i, f, cv);
            }
        }
}

class TestSourceStage final : public Stage {
public:
    Result<Caps> estimate(const Caps*, const Env& env, Needs&) override {
        LOOM_TRY(layout_.check().with_context(where_));
        if (env.segment)
            return make_error(StatusCode::UNSUPPORTED, "{}: testsrc: a segment needs a file source (decode)", where_);
        Caps caps;
        caps.layout = layout_;
        caps.color = color_;
        caps.time_base = {1, rate_};
        caps.frame_rate = {rate_, 1};
        caps.frames_expected = count_;
        return caps;
    }

    Result<Caps> prepare(const Caps*, const Env& env) override {
        Needs unused;
        LOOM_ASSIGN_OR_RETURN(Caps caps, estimate(nullptr, env, unused));
        LOOM_ASSIGN_OR_RETURN(pool_, FramePool::create("testsrc frames", layout_, static_cast<size_t>(pool_frames_)));
        return caps;
    }

    Status run(StageRun& run) override {
        for (int64_t i = 0; i < count_; ++i) {
            run.begin();
            FrameRef f;
            {
                auto w = run.waiting();
                f = pool_->acquire();
            }
            if (!f) return {};  // stopped
            draw(layout_, i, f->data());
            f->color = color_;
            f->meta.index = i;
            f->meta.pts = i;
            f->meta.duration = 1;
            f->meta.keyframe = true;
            if (!run.emit(std::move(f))) return {};
        }
        return {};
    }

    void stop() override {
        if (pool_) pool_->abort();
    }

    void summarise(nlohmann::json& out) const override {
        out["size"] = {layout_.width, layout_.height};
        out["pixel_format"] = pixel_format_name(layout_.format);
        out["rate"] = rate_;
        out["count"] = count_;
        out["pool_in_use_max"] = pool_->in_use_max();
    }

    std::string where_;
    FrameLayout layout_;
    ColorInfo color_;
    int rate_ = 25;
    int64_t count_ = 30, pool_frames_ = 8;
    std::unique_ptr<FramePool> pool_;
};

Result<std::unique_ptr<Stage>> create(Fields& f) {
    auto s = std::make_unique<TestSourceStage>();
    s->where_ = f.where("width");
    LOOM_ASSIGN_OR_RETURN(s->layout_.width, f.integer("width", 320, 1, kFrameSideMax));
    LOOM_ASSIGN_OR_RETURN(s->layout_.height, f.integer("height", 180, 1, kFrameSideMax));
    LOOM_TRY(
        f.choice("format", s->layout_.format, yuv_format_from_name, "yuv420p, nv12, yuv420p10le, p010le").status());
    LOOM_TRY(f.choice("matrix", s->color_.matrix, color_matrix_from_name, "bt601, bt709, bt2020nc").status());
    LOOM_TRY(f.choice("range", s->color_.range, color_range_from_name, "limited or full").status());
    LOOM_ASSIGN_OR_RETURN(int64_t rate, f.integer("rate", 25, 1, 1000));
    s->rate_ = static_cast<int>(rate);
    LOOM_ASSIGN_OR_RETURN(s->count_, f.integer("count", 30, 1, 100'000'000));
    LOOM_ASSIGN_OR_RETURN(s->pool_frames_, f.integer("frames", 8, 2, 256));
    return std::unique_ptr<Stage>(std::move(s));
}

}  // namespace

extern const StageType kStage_testsrc;
const StageType kStage_testsrc{
    "testsrc", "generate a moving test pattern (no file): tests, benchmarks", true, false, false, create};

}  // namespace loom::pipeline
