// The media back ends behind MediaReader and MediaWriter (preprocess/media_io.hpp): FFmpeg's
// libraries are the readers' and writers' own implementation; another back end (GStreamer,
// preprocess/gst_media.cpp) implements these interfaces and the faces dispatch to it.
#pragma once

#include <memory>
#include <string>

#include "preprocess/media_io.hpp"

namespace loom::preprocess {

class ReaderBackend {
public:
    virtual ~ReaderBackend() = default;
    virtual const VideoInfo& info() const = 0;
    virtual Result<bool> read(FrameView& view, FrameMeta& meta) = 0;
    virtual DecodeStats stats() const = 0;
};

class WriterBackend {
public:
    virtual ~WriterBackend() = default;
    virtual Status write(const FrameView& src, const FrameMeta& meta) = 0;
    virtual Status finish() = 0;
    virtual const FrameLayout& layout() const = 0;
    virtual const std::string& path() const = 0;
    virtual EncodeStats stats() const = 0;
};

// The GStreamer back end (ReaderOptions / WriterOptions.backend "gstreamer"); UNSUPPORTED naming
// the file where this build has no GStreamer.
Result<std::unique_ptr<ReaderBackend>> open_gst_reader(const std::string& path, const ReaderOptions& options);
Result<std::unique_ptr<WriterBackend>> open_gst_writer(const std::string& path, const VideoInfo& source,
                                                       const FrameLayout& layout, const ColorInfo& color,
                                                       const WriterOptions& options);

}  // namespace loom::preprocess
