// Where daemon jobs may read and write (daemon/job_paths.hpp): each refusal the header lists,
// named by field and path, and the paths that are allowed, in a temporary tree with an allowed
// root, a folder outside it and symbolic links both ways.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/job_paths.hpp"
#include "test_util.hpp"

namespace loom::daemon::test_job_paths {  // apart from the rest of its unity batch
namespace {

namespace fs = std::filesystem;
using loom::test::TempDir;

// root/ (allowed): in.mkv, sub/, link_in -> ../outside/secret.mkv, link_ok -> in.mkv,
// sub_out -> ../outside (a folder link); outside/ (not allowed): secret.mkv.
struct Tree {
    TempDir dir;
    std::string root, outside;
    PathPolicy policy;
    Tree() {
        root = dir.file("root");
        outside = dir.file("outside");
        fs::create_directories(root + "/sub");
        fs::create_directories(outside);
        std::ofstream(root + "/in.mkv") << "x";
        std::ofstream(outside + "/secret.mkv") << "x";
        fs::create_symlink("../outside/secret.mkv", root + "/link_in");
        fs::create_symlink("in.mkv", root + "/link_ok");
        fs::create_directory_symlink("../outside", root + "/sub_out");
        policy.roots = {root};
    }
};

void expect_refused(const Result<std::string>& r, StatusCode code, const std::string& fragment) {
    ASSERT_FALSE(r.ok()) << "allowed: " << *r;
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(JobPaths, AnInputInsideTheRootsIsAllowedResolved) {
    Tree t;
    auto r = check_job_input(t.policy, "input", t.root + "/in.mkv");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, fs::canonical(t.root + "/in.mkv").string());
    auto link = check_job_input(t.policy, "input", t.root + "/link_ok");  // a link that stays inside
    ASSERT_TRUE(link.ok()) << link.status().to_string();
    EXPECT_EQ(*link, *r);
}

TEST(JobPaths, RelativeDotDotOutsideAndEscapingLinksAreRefusedNamingTheField) {
    Tree t;
    expect_refused(check_job_input(t.policy, "input", "in.mkv"), StatusCode::INVALID_ARGUMENT,
                   "input: in.mkv is relative");
    expect_refused(check_job_input(t.policy, "input", t.root + "/sub/../in.mkv"), StatusCode::INVALID_ARGUMENT,
                   "holds '..'");
    expect_refused(check_job_input(t.policy, "input", t.outside + "/secret.mkv"), StatusCode::INVALID_ARGUMENT,
                   "is outside the folders jobs may use");
    expect_refused(check_job_input(t.policy, "input", t.root + "/link_in"), StatusCode::INVALID_ARGUMENT,
                   "(resolved: " + fs::canonical(t.outside + "/secret.mkv").string() + ")");
    expect_refused(check_job_input(t.policy, "input", t.root + "/sub_out/secret.mkv"), StatusCode::INVALID_ARGUMENT,
                   "is outside");
    expect_refused(check_job_input(t.policy, "input", t.root + "/missing.mkv"), StatusCode::NOT_FOUND,
                   "does not exist");
    expect_refused(check_job_input(t.policy, "input", t.root + "/sub"), StatusCode::INVALID_ARGUMENT, "is not a file");
    expect_refused(check_job_input({}, "input", t.root + "/in.mkv"), StatusCode::INVALID_ARGUMENT, "allows no folder");
    // A root given with a trailing separator, or as a link, is the same root.
    PathPolicy slash{{t.root + "/"}};
    EXPECT_TRUE(check_job_input(slash, "input", t.root + "/in.mkv").ok());
    // A sibling whose name starts with the root's is not inside it.
    fs::create_directories(t.root + "2");
    std::ofstream(t.root + "2/x.mkv") << "x";
    expect_refused(check_job_input(t.policy, "input", t.root + "2/x.mkv"), StatusCode::INVALID_ARGUMENT, "is outside");
}

TEST(JobPaths, AnOutputIsCheckedAtSubmitExistingOnesNeedOverwrite) {
    Tree t;
    auto r = check_job_output(t.policy, "output", t.root + "/sub/new.mkv", false);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, (fs::canonical(t.root + "/sub") / "new.mkv").string());
    expect_refused(check_job_output(t.policy, "output", t.root + "/in.mkv", false), StatusCode::FAILED_PRECONDITION,
                   "output: " + t.root + "/in.mkv exists (submit with overwrite");
    EXPECT_TRUE(check_job_output(t.policy, "output", t.root + "/in.mkv", true).ok());
    expect_refused(check_job_output(t.policy, "output", t.root + "/nowhere/new.mkv", false), StatusCode::NOT_FOUND,
                   "the folder " + t.root + "/nowhere does not exist");
    expect_refused(check_job_output(t.policy, "output", t.outside + "/new.mkv", false), StatusCode::INVALID_ARGUMENT,
                   "is outside");
    expect_refused(check_job_output(t.policy, "output", t.root + "/sub_out/new.mkv", false),
                   StatusCode::INVALID_ARGUMENT, "is outside");
    // Overwriting through a link that points out of the roots is refused even with overwrite.
    expect_refused(check_job_output(t.policy, "output", t.root + "/link_in", true), StatusCode::INVALID_ARGUMENT,
                   "is outside");
    expect_refused(check_job_output(t.policy, "output", t.root + "/sub", true), StatusCode::INVALID_ARGUMENT,
                   "is not a regular file");
    expect_refused(check_job_output(t.policy, "output", "out.mkv", false), StatusCode::INVALID_ARGUMENT, "is relative");
}

TEST(JobPaths, AFolderTheDaemonCannotWriteIsRefusedAtSubmit) {
    if (::geteuid() == 0) GTEST_SKIP() << "root may write any folder: the refusal cannot be seen as root";
    Tree t;
    fs::create_directories(t.root + "/ro");
    ::chmod((t.root + "/ro").c_str(), 0555);
    expect_refused(check_job_output(t.policy, "output", t.root + "/ro/new.mkv", false), StatusCode::IO_ERROR,
                   "is not writable by the daemon");
    ::chmod((t.root + "/ro").c_str(), 0755);
}

}  // namespace
}  // namespace loom::daemon::test_job_paths
