#include "common/text.hpp"

#include <fmt/format.h>

namespace loom {

size_t utf8_invalid_at(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) len = 3, lo = 0xA0;
        else if (c >= 0xE1 && c <= 0xEC) len = 3;
        else if (c == 0xED) len = 3, hi = 0x9F;  // no UTF-16 surrogates
        else if (c >= 0xEE && c <= 0xEF) len = 3;
        else if (c == 0xF0) len = 4, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else if (c == 0xF4) len = 4, hi = 0x8F;  // nothing past U+10FFFF
        else return i;
        if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
        for (size_t k = 2; k < len; ++k)
            if ((p[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return std::string_view::npos;
}

std::string printable(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const char ch = s[i];
        const auto u = static_cast<unsigned char>(ch);
        if (u >= 0x80) {
            // A valid sequence is copied whole; a byte that starts none is escaped alone.
            const std::string_view rest = s.substr(i, 4);
            const size_t bad = utf8_invalid_at(rest);
            const size_t len = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : 2;
            if (bad == 0) {
                out += fmt::format("\\x{:02X}", u);
                ++i;
            } else {
                out.append(s.substr(i, len));
                i += len;
            }
            continue;
        }
        switch (ch) {
            case '\r': out += "\\r"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\'': out += "\\'"; break;
            case '\\': out += "\\\\"; break;
            default:
                if (u < 0x20 || u == 0x7F) out += fmt::format("\\x{:02X}", u);
                else out += ch;
        }
        ++i;
    }
    return out;
}

}  // namespace loom
