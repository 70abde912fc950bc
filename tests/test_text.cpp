// The helpers every reader of outside input shares (common/text.hpp, common/json.hpp,
// common/checked.hpp): UTF-8 validity against the Unicode rules, printable names, JSON that
// never throws, and overflow-checked arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/checked.hpp"
#include "common/json.hpp"
#include "common/text.hpp"

namespace loom::test_text {  // apart from the rest of its unity batch
namespace {

constexpr size_t npos = std::string_view::npos;

TEST(Utf8, ValidTextPassesAndTheFirstBadByteIsFound) {
    EXPECT_EQ(utf8_invalid_at(""), npos);
    EXPECT_EQ(utf8_invalid_at("plain ascii"), npos);
    EXPECT_EQ(utf8_invalid_at("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"), npos);  // é € 😀 U+10FFFF
    EXPECT_EQ(utf8_invalid_at("ab\xff"), 2u);             // never a UTF-8 byte
    EXPECT_EQ(utf8_invalid_at("a\xc0\xaf"), 1u);          // overlong '/'
    EXPECT_EQ(utf8_invalid_at("\xe0\x80\xaf"), 0u);       // overlong, three bytes
    EXPECT_EQ(utf8_invalid_at("x\xed\xa0\x80"), 1u);      // a UTF-16 surrogate
    EXPECT_EQ(utf8_invalid_at("\xf4\x90\x80\x80"), 0u);   // past U+10FFFF
    EXPECT_EQ(utf8_invalid_at("ok\xe2\x82"), 2u);         // truncated at the end
    EXPECT_EQ(utf8_invalid_at("\xc3\x28"), 0u);           // a continuation byte missing
    EXPECT_EQ(utf8_invalid_at("\x80"), 0u);               // a lone continuation byte
}

TEST(Utf8, PrintableEscapesControlsQuotesAndBadBytesOnly) {
    EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");
    EXPECT_EQ(printable("a\xff" "b\xc3"), "a\\xFFb\\xC3");
    EXPECT_EQ(printable("it's\r\n\t\\\x01\x7f"), "it\\'s\\r\\n\\t\\\\\\x01\\x7F");
}

TEST(Json, ParseNeverThrowsAndNamesWhatAndWhere) {
    auto ok = parse_json("{\"a\": [1, 2.5, \"x\"]}", "test");
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    EXPECT_EQ((*ok)["a"][1], 2.5);
    auto syntax = parse_json("{\"a\": ", "request");
    ASSERT_FALSE(syntax.ok());
    EXPECT_EQ(syntax.status().code(), StatusCode::PARSE_ERROR);
    EXPECT_EQ(syntax.status().message().rfind("request: not JSON: byte 7", 0), 0u) << syntax.status().message();
    auto range = parse_json("[1e400]", "request");
    ASSERT_FALSE(range.ok());
    EXPECT_NE(range.status().message().find("number overflow"), npos) << range.status().message();
    auto bad_utf8 = parse_json("\"\xff\"", "request");
    ASSERT_FALSE(bad_utf8.ok());
    // Nesting: 64 levels parse, 65 are refused at the bracket that opens level 65; brackets
    // inside strings (escaped quotes included) are text.
    EXPECT_TRUE(parse_json(std::string(64, '[') + std::string(64, ']'), "t").ok());
    auto deep = parse_json(std::string(65, '[') + std::string(65, ']'), "t");
    ASSERT_FALSE(deep.ok());
    EXPECT_EQ(deep.status().message(), "t: byte 64: nesting deeper than 64 levels");
    EXPECT_TRUE(parse_json("[\"" + std::string(100, '[') + "\\\"" + std::string(100, '{') + "\"]", "t").ok());
}

TEST(Json, InvalidUtf8IsFoundByPointerAndReplacedWhenDumped) {
    nlohmann::json j = {{"steps", {{{"name", "ok"}}, {{"name", "bad\xfe"}}}}, {"a", "fine"}};
    EXPECT_EQ(json_invalid_utf8_at(j), "/steps/1/name");
    EXPECT_EQ(dump_json(j["steps"][1]), "{\"name\":\"bad\xef\xbf\xbd\"}");
    EXPECT_EQ(json_invalid_utf8_at(nlohmann::json{{"x/y", {1, "\xc0"}}}), "/x~1y/1");
    EXPECT_EQ(json_invalid_utf8_at(nlohmann::json{{"k", "valid \xc3\xa9"}}), "");
    EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);  // what dump_json avoids
}

TEST(Checked, ArithmeticReportsOverflowInsteadOfWrapping) {
    constexpr int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
    EXPECT_EQ((Checked(3) * 4 + 5 - 1).get(), 16);
    EXPECT_EQ((Checked(-7) / 2).get(), -3);
    EXPECT_EQ((Checked(-7) % 2).get(), -1);
    EXPECT_FALSE((Checked(max) + 1).ok());
    EXPECT_FALSE((Checked(min) - 1).ok());
    EXPECT_FALSE((Checked(int64_t{1} << 32) * (int64_t{1} << 32)).ok());
    EXPECT_FALSE((Checked(5) / 0).ok());
    EXPECT_FALSE((Checked(min) / -1).ok());
    EXPECT_FALSE((Checked(5) % 0).ok());
    // Once overflowed, it stays overflowed through later steps.
    EXPECT_FALSE(((Checked(max) + 1) * 0 + 3).ok());
    EXPECT_EQ((Checked(max - 1) + 1).get(), max);
}

}  // namespace
}  // namespace loom::test_text
