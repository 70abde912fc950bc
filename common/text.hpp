// Text that came from outside (file names, model names, message fields): UTF-8 validity, and a
// printable form for error messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace loom {

// Returns the offset of the first byte of `s` that is not part of valid UTF-8 (overlong forms,
// surrogates and code points past U+10FFFF included), or npos when all of it is valid.
size_t utf8_invalid_at(std::string_view s);

// Returns `s` with control characters, quotes, backslashes and bytes that are not valid UTF-8
// escaped (\r, \', \xFF), so a stray byte in a name shows in a message instead of garbling it.
std::string printable(std::string_view s);

}  // namespace loom
