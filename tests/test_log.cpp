// common/log's redirect: a library inside another program (the GStreamer plugin) sends Loom's
// lines to the host's log at the level the host asked for, and back to spdlog when it lets go.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/log.hpp"

namespace loom::log::test_log {  // apart from the rest of its unity batch
namespace {

std::vector<std::string> g_lines;

void collect(spdlog::level::level_enum level, std::string_view component, std::string_view message) {
    g_lines.push_back(std::string(spdlog::level::to_string_view(level).data()) + " " + std::string(component) + ": " +
                      std::string(message));
}

TEST(LogRedirect, TheSinkGetsTheLinesAtItsLevelAndSpdlogGetsThemBack) {
    g_lines.clear();
    redirect(collect, spdlog::level::info);
    EXPECT_TRUE(enabled(spdlog::level::warn));
    EXPECT_FALSE(enabled(spdlog::level::debug));
    info("restore", "model {} for {}x{}", "tiny", 64, 48);
    debug("restore", "not taken");
    warn("ffmpeg", "a warning");
    redirect(nullptr, spdlog::level::info);
    info("restore", "to spdlog again");
    ASSERT_EQ(g_lines.size(), 2u);
    EXPECT_EQ(g_lines[0], "info restore: model tiny for 64x48");
    EXPECT_EQ(g_lines[1], "warning ffmpeg: a warning");
    EXPECT_EQ(enabled(spdlog::level::debug), spdlog::should_log(spdlog::level::debug));
}

}  // namespace
}  // namespace loom::log::test_log
