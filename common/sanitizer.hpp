// Whether this translation unit is built with AddressSanitizer (the SAN=1 build: clang reports it
// through __has_feature, gcc through __SANITIZE_ADDRESS__), as LOOM_ASAN 1 or 0, with ASan's
// interface (poisoning, address queries) included when it is.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_ASAN 1
#endif
#endif
#ifndef LOOM_ASAN
#define LOOM_ASAN 0
#endif

#if LOOM_ASAN
#include <sanitizer/asan_interface.h>
#endif
