// libgstloom: the GStreamer plugin of Loom. Registers the loomrestore element and sends Loom's
// own log lines to GStreamer's debug log (category "loom"), where GST_DEBUG shows them, instead
// of the host program's standard streams.
#include <gst/gst.h>

#include "common/log.hpp"
#include "common/version.hpp"
#include "gstreamer/loomrestore.hpp"

namespace {

GstDebugCategory* loom_log = nullptr;

void to_gst_log(spdlog::level::level_enum level, std::string_view component, std::string_view message) {
    GstDebugLevel l = GST_LEVEL_LOG;
    switch (level) {
    case spdlog::level::critical:
    case spdlog::level::err: l = GST_LEVEL_ERROR; break;
    case spdlog::level::warn: l = GST_LEVEL_WARNING; break;
    case spdlog::level::info: l = GST_LEVEL_INFO; break;
    case spdlog::level::debug: l = GST_LEVEL_DEBUG; break;
    default: l = GST_LEVEL_TRACE; break;
    }
    gst_debug_log(loom_log, l, "loom", std::string(component).c_str(), 0, nullptr, "%.*s",
                  static_cast<int>(message.size()), message.data());
}

gboolean plugin_init(GstPlugin* plugin) {
    GST_DEBUG_CATEGORY_INIT(loom_log, "loom", 0, "Loom's libraries (compiler, device, restore engine)");
    // Lines past the category's threshold are not even formatted.
    const GstDebugLevel t = gst_debug_category_get_threshold(loom_log);
    const auto level = t >= GST_LEVEL_TRACE     ? spdlog::level::trace
                       : t >= GST_LEVEL_DEBUG   ? spdlog::level::debug
                       : t >= GST_LEVEL_INFO    ? spdlog::level::info
                       : t >= GST_LEVEL_WARNING ? spdlog::level::warn
                                                : spdlog::level::err;
    loom::log::redirect(to_gst_log, level);
    return gst_element_register(plugin, "loomrestore", GST_RANK_NONE, GST_TYPE_LOOM_RESTORE);
}

}  // namespace

// The plugin's descriptor is the one symbol the module exports (everything else is hidden).
#define PACKAGE "loom"
#pragma GCC visibility push(default)
GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, loom, "Loom: video restoration models on a simulated NPU",
                  plugin_init, loom::kVersion, "Apache 2.0", "loom", "Loom")
#pragma GCC visibility pop
