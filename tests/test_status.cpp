// Status / Result<T>: the two-tier error contract of CONTRIBUTING.md (expected failures as values).
#include <gtest/gtest.h>

#include "common/status.hpp"

namespace test_status {  // this file's names, apart from the rest of its unity batch

namespace {

loom::Result<int> half(int v) {
    if (v % 2) return loom::make_error(loom::StatusCode::INVALID_ARGUMENT, "value {} is odd", v);
    return v / 2;
}

loom::Result<int> quarter(int v) {
    LOOM_ASSIGN_OR_RETURN(int h, half(v));
    return half(h);
}

loom::Status check_even(int v) {
    LOOM_TRY(half(v).status());
    return {};
}

TEST(Status, OkByDefaultAndCarriesCodeAndMessage) {
    EXPECT_TRUE(loom::Status().ok());
    loom::Status s(loom::StatusCode::NOT_FOUND, "model.onnx: missing");
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.to_string(), "NOT_FOUND: model.onnx: missing");
    EXPECT_EQ(s.with_context("load").message(), "load: model.onnx: missing");
    EXPECT_EQ(s.with_context("load").code(), loom::StatusCode::NOT_FOUND);
}

TEST(Result, PropagatesTheFirstError) {
    EXPECT_EQ(*quarter(12), 3);
    auto r = quarter(6);  // 6 -> 3, then 3 is odd
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "value 3 is odd");
    EXPECT_TRUE(check_even(4).ok());
    EXPECT_EQ(check_even(5).code(), loom::StatusCode::INVALID_ARGUMENT);
}

TEST(Result, AnOkStatusWithoutValueBecomesInternal) {
    loom::Result<int> r{loom::Status()};
    EXPECT_EQ(r.status().code(), loom::StatusCode::INTERNAL);
}

TEST(StatusDeathTest, AssertAbortsWithFileAndLine) {
    EXPECT_DEATH(LOOM_ASSERT(1 + 1 == 3), "test_status.cpp:[0-9]+: assertion failed: 1 \\+ 1 == 3");
}

}  // namespace

}  // namespace test_status
