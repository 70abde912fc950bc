// This build has no GStreamer (its development files were not found, or LOOM_WITH_GSTREAMER is
// off): the GStreamer back end is refused, naming the file.
#include "preprocess/backend.hpp"

namespace loom::preprocess {

Result<std::unique_ptr<ReaderBackend>> open_gst_reader(const std::string& path, const ReaderOptions&) {
    return make_error(StatusCode::UNSUPPORTED,
                      "{}: backend \"gstreamer\": this build has no GStreamer (install its development files and "
                      "build again, or use backend \"ffmpeg\")",
                      path);
}

Result<std::unique_ptr<WriterBackend>> open_gst_writer(const std::string& path, const VideoInfo&, const FrameLayout&,
                                                       const ColorInfo&, const WriterOptions&) {
    return make_error(StatusCode::UNSUPPORTED,
                      "{}: backend \"gstreamer\": this build has no GStreamer (install its development files and "
                      "build again, or use backend \"ffmpeg\")",
                      path);
}

}  // namespace loom::preprocess
