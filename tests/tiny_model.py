"""A tiny x2 restoration model as ncnn files (a 3x3 convolution to 12 channels, then a pixel
shuffle): what the process-level tests and bench/daemon.py restore with when the real models'
cost would only slow them down. Close to a 2x nearest upscale, so its output looks like the
input."""
import os
import struct


def write_tiny_x2(folder):
    """Writes tiny.param and tiny.bin into `folder`."""
    with open(os.path.join(folder, "tiny.param"), "w") as f:
        f.write("7767517\n3 3\nInput in 0 1 data\nConvolution conv 1 1 data c 0=12 1=3 4=1 5=1 6=324\n"
                "PixelShuffle ps 1 1 c out 0=2\n")
    w = []
    for k in range(12):
        for c in range(3):
            for t in range(9):
                w.append(0.9 if (c == k // 4 and t == 4) else 0.01 * ((k + c + t) % 5 - 2))
    with open(os.path.join(folder, "tiny.bin"), "wb") as f:
        f.write(struct.pack("<I", 0))
        f.write(struct.pack(f"<{len(w)}f", *w))
        f.write(struct.pack("<12f", *([0.01] * 12)))
