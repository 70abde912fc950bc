// A tiny x2 restoration network written as ncnn files, for tests that need a real model that
// runs in milliseconds and needs no download.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace loom::test {

// Writes NAME.param and NAME.bin into `dir`: a 3x3 conv from RGB to 12 channels (each output
// channel mostly its colour's centre tap, plus seeded noise), then a pixel shuffle by 2.
inline void write_tiny_x2(const TempDir& dir, const std::string& name, uint32_t seed) {
    dir.write(name + ".param",
              "7767517\n3 3\nInput in 0 1 data\nConvolution conv 1 1 data c 0=12 1=3 4=1 5=1 6=324\n"
              "PixelShuffle ps 1 1 c out 0=2\n");
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> noise(-0.05f, 0.05f);
    std::vector<float> w(324), b(12);
    for (size_t k = 0; k < 12; ++k)
        for (size_t c = 0; c < 3; ++c)
            for (size_t t = 0; t < 9; ++t) w[(k * 3 + c) * 9 + t] = noise(rng) + (c == k / 4 && t == 4 ? 0.9f : 0.0f);
    for (float& x : b) x = noise(rng);
    std::string bin(4, '\0');  // tag 0: raw fp32 weights
    bin.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
    bin.append(reinterpret_cast<const char*>(b.data()), b.size() * 4);
    dir.write(name + ".bin", bin);
}

}  // namespace loom::test
