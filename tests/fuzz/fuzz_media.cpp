// A media file as loomd reads it for a job: the reader (FFmpeg's demuxers and decoders, Loom's
// timing, conversion and error counting), the keyframe scan and segment plan, and a planned
// segment read, on any bytes. A damaged or hostile file must end in a Status that names it,
// never in a crash, a hang or a huge allocation; the limits are a job's, made small.
#include "common/log.hpp"
#include "preprocess/media_io.hpp"
#include "tests/fuzz/fuzz.hpp"

namespace {

using namespace loom;

preprocess::ReaderOptions options() {
    preprocess::ReaderOptions o;
    o.hwaccel = "none";
    o.threads = 1;
    o.error_rate_max = 1;  // read on through damage: the paths after it are the ones to reach
    o.limits.pixels_max = 512 * 512;
    o.limits.frames_max = 64;
    o.limits.streams_max = 16;
    o.limits.packet_bytes_max = 1 << 20;
    return o;
}

void read_some(const std::string& path, const preprocess::ReaderOptions& o) {
    auto reader = preprocess::MediaReader::open(path, o);
    if (!reader.ok()) return;
    std::vector<uint8_t> frame((*reader)->info().layout.bytes());
    preprocess::FrameMeta meta;
    for (int i = 0; i < 64; ++i) {
        auto more = (*reader)->read(frame.data(), frame.size(), meta);
        if (!more.ok() || !*more) break;
    }
    (void)(*reader)->stats();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Damaged input is what this feeds: its warnings (Loom's and FFmpeg's) would be most of the
    // time spent. The decoder's errors are still counted: the count does not need the log's level.
    static const bool quiet = log::init("off").ok();
    (void)quiet;
    const std::string path = fuzz::scratch_file("media.bin", fuzz::as_text(data, size));
    const preprocess::ReaderOptions o = options();
    read_some(path, o);
    int64_t frames = 0;
    auto keys = preprocess::list_keyframes(path, o, &frames);
    if (!keys.ok()) return 0;
    const auto plan = preprocess::plan_segments(*keys, frames, 3);
    if (plan.size() < 2) return 0;
    preprocess::ReaderOptions segment = o;
    segment.start_frame = plan[1].start_frame;
    segment.frame_count = plan[1].frame_count;
    segment.segment_pts = preprocess::ReaderOptions::SegmentPts{plan[1].copy_from_pts, plan[1].copy_to_pts};
    read_some(path, segment);
    return 0;
}
