// loomrestore: a GStreamer element that restores raw video with a restoration model on Loom's
// simulated NPU. A thin face over restore::Engine: the element maps GStreamer buffers as frame
// views (no copy), hands them to the engine with a pooled output buffer as the destination, and
// pushes the restored frames in order as the engine completes them; the model, its compile
// cache, the media engine's conversions, tiling and frames in flight are the engine's.
//
// Caps: raw 4:2:0 video (I420, NV12, I420_10LE, P010_10LE) or packed RGB (RGB, BGR) in; any of
// them out at scale x the size (the input's format preferred), with the input's colorimetry
// unless downstream asks for another matrix or range (primaries and transfer are kept: no gamut
// or tone mapping). The scale is read from the model
// when the element starts; until then any size is offered.
//
// Timing: up to `in-flight` frames are on the device at once; a restored frame is pushed by the
// time the frame `in-flight` places after it has been submitted, so the element adds in-flight
// frame durations of latency (answered in the latency query). Serialized events (EOS, caps,
// segments, gaps) first drain the frames in flight; a flush drops them.
#pragma once

#include <gst/video/gstvideofilter.h>

G_BEGIN_DECLS

#define GST_TYPE_LOOM_RESTORE (gst_loom_restore_get_type())
G_DECLARE_FINAL_TYPE(GstLoomRestore, gst_loom_restore, GST, LOOM_RESTORE, GstVideoFilter)

G_END_DECLS
