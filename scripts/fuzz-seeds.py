#!/usr/bin/env python3
"""Generate the fuzz targets' seed corpora from the project's own test data.

Usage: fuzz-seeds.py LOOMC OUT_DIR

  onnx, tensor  the ONNX backend node tests the conformance test runs (Debian's python3-onnx
                generates them), the models and their input/output TensorProto files under 8 KiB
  ncnn          small .param + .bin models over the layer types the importer maps, and the
                real models' .param files (scripts/fetch-models) with an empty .bin
  loom          those ONNX models compiled by LOOMC (sink and host mode)
  device_spec   configs/devices/*.toml;  pipeline: configs/pipelines/*.toml
  control       requests of every command and field the protocol has (docs/protocol.md)
  kb_import     knowledge-base exports: Cube and Vector records, duplicate keys, stale ones
  kb_file       those exports imported by LOOMC into knowledge-base files (SQLite)
  media         8-frame 64x48 clips made by the ffmpeg program in the containers and codecs the
                reader's own paths differ on: raw H.264 and HEVC, AVI with B-frames, MPEG-TS,
                MPEG-PS, raw MPEG-2, Matroska and MP4 with audio
Nothing here is committed: the corpora are rebuilt in the build folder.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def onnx_seeds(out, loomc):
    data = out.parent / "onnx-backend-data"
    if not (data / "node").is_dir():
        sys.path.insert(0, str(ROOT / "scripts"))
        import conformance  # generates them as the conformance test does (numpy alias shims included)

        conformance.generate(str(data))
    models = tensors = compiled = 0
    for test in sorted((data / "node").iterdir()):
        model = test / "model.onnx"
        if not model.is_file() or model.stat().st_size > 8192:
            continue
        shutil.copy(model, out / "onnx" / f"{test.name}.onnx")
        models += 1
        for pb in sorted(test.glob("test_data_set_0/*.pb")):
            if pb.stat().st_size <= 8192:
                shutil.copy(pb, out / "tensor" / f"{test.name}_{pb.name}")
                tensors += 1
        if loomc and compiled < 150:
            target = out / "loom" / f"{test.name}.loom"
            r = subprocess.run([loomc, "compile", str(model), "-o", str(target)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            if r.returncode == 0 and target.stat().st_size <= 65536:
                compiled += 1
            elif target.exists():
                target.unlink()
    return models, tensors, compiled


def f32(values):
    return b"".join(struct.pack("<f", v) for v in values)


def ncnn_seeds(out):
    def model(name, lines, blobs, weights=b""):
        text = "7767517\n%d %d\n" % (len(lines), blobs) + "\n".join(lines) + "\n"
        write(out / "ncnn" / f"{name}.param", text.encode() + b"\0" + weights)

    tag0 = struct.pack("<I", 0)
    ramp = lambda n: f32([((i * 7) % 11 - 5) / 8.0 for i in range(n)])
    model("conv_prelu_pixelshuffle", [
        "Input in 0 1 data 0=8 1=8 2=3",
        "Convolution conv1 1 1 data c1 0=4 1=3 4=1 5=1 6=108",
        "PReLU prelu 1 1 c1 p1 0=4",
        "Convolution conv2 1 1 p1 c2 0=12 1=3 4=1 5=1 6=432 9=1",
        "PixelShuffle ps 1 1 c2 out 0=2"], 5,
        tag0 + ramp(108) + ramp(4) + ramp(4) + tag0 + ramp(432) + ramp(12))
    model("interp_residual", [
        "Input in 0 1 data 0=8 1=8 2=3",
        "Split split 1 2 data a b",
        "Interp up 1 1 a u 0=2 1=2.0 2=2.0",
        "Interp up2 1 1 b v 0=1 1=2.0 2=2.0",
        "BinaryOp add 2 1 u v s 0=0",
        "Clip clip 1 1 s out 0=0.0 1=1.0"], 7)
    model("pool_pad_crop_concat", [
        "Input in 0 1 data 0=16 1=16 2=4",
        "Split split 1 3 data a b c",
        "Pooling pool 1 1 a p 0=0 1=2 2=2",
        "Padding pad 1 1 b q 0=1 1=1 2=1 3=1 4=0 5=0.5",
        "Crop crop 1 1 q r -23309=2,1,1 -23310=2,-1,-1 -23311=2,1,2",
        "Pooling gp 1 1 c g 0=1 4=1",
        "Concat cat 2 1 p r out 0=0",
        "Sigmoid sig 1 1 g g2"], 10)
    model("shape_layers", [
        "Input in 0 1 data 0=4 1=4 2=8",
        "Permute perm 1 1 data p 0=3",
        "Reshape rs 1 1 p r 0=16 1=8",
        "Softmax sm 1 1 r s 0=1 1=1",
        "Flatten fl 1 1 s f",
        "Dropout dr 1 1 f d",
        "Noop noop 1 1 d out"], 7)
    model("eltwise_scale_bn", [
        "Input in 0 1 data 0=4 1=4 2=2",
        "Split split 1 2 data a b",
        "Eltwise sum 2 1 a b e 0=1 -23301=2,1.0,-0.5",
        "Scale scale 1 1 e s 0=2 1=1",
        "BatchNorm bn 1 1 s n 0=2 1=0.001",
        "ReLU relu 1 1 n out 0=0.1"], 6,
        ramp(2) + ramp(2) + ramp(2) + f32([1.0, 2.0]) + ramp(2) + ramp(2))
    model("deconv_innerproduct", [
        "Input in 0 1 data 0=4 1=4 2=2",
        "Deconvolution deconv 1 1 data d 0=2 1=2 3=2 5=1 6=16",
        "InnerProduct fc 1 1 d out 0=3 1=1 2=384"], 3,
        tag0 + ramp(16) + ramp(2) + tag0 + ramp(384) + ramp(3))
    models = Path.home() / ".cache/loom/models"
    for param in sorted(models.glob("*/*.param")) if models.is_dir() else []:
        write(out / "ncnn" / f"real_{param.stem}.param", param.read_bytes() + b"\0")


def control_seeds(out):
    requests = [
        '{"protocol": 1, "cmd": "ping", "id": 1}',
        '{"protocol": 1, "cmd": "status", "id": 2, "args": {"verbose": true}}',
        '{"protocol": 1, "cmd": "echo", "id": 3, "args": {"path": "/tmp/x.mp4", "n": [1, 2.5, null, false], "o": {}}}',
        '{"protocol": 1, "cmd": "fail", "id": -4, "args": {"why": "caf\\u00e9"}}',
        '{"protocol": 1, "cmd": "device-info"}',
        '{"protocol": 1, "id": 0, "ok": true, "cmd": "ping", "result": {"pong": true}}',
        '{"protocol": 1, "id": 0, "ok": false, "error": {"code": "INVALID_ARGUMENT", "message": "request: x"}}',
    ]
    for i, r in enumerate(requests):
        write(out / "control" / f"request_{i}.json", r)


def kb_record(kernel, signature, dims, tiling, cost, spec="0123456789abcdef", version=1):
    return {"kernel": kernel, "signature": signature, "dims": dims, "attrs": "group=1;pads=[1,1,1,1]",
            "spec_hash": spec, "spec_name": "edge", "cost_model_version": version, "tiling": tiling,
            "cost_ns": cost, "default_cost_ns": cost * 1.5, "method": "ga", "trials": 300, "seconds": 1.25,
            "seed": 42, "loom_version": "0.1.0", "created": "2026-11-20T10:00:00Z", "updated": "2026-11-21"}


def kb_seeds(out, loomc):
    import json
    cube = {"kind": "cube", "m_l1": 64, "n_l1": 64, "k_l1": 128, "m_l0": 16, "n_l0": 16, "k_l0": 32,
            "n_outer": False, "double_buffer": True, "cores": 0}
    vector = {"kind": "vector", "ub_tile": 4096, "double_buffer": True, "cores": 2, "vector_axis": "axis",
              "vector_tile": 1008, "fuse_input": False, "fuse_output": True, "fuse_ub_buffers": 2, "in_place": False}
    conv = lambda c, hw: [[1, c, hw, hw], [c, c, 3, 3], [1, c, hw, hw]]
    exports = {
        "conv_one": [kb_record("conv", "f16,f16->f16", conv(64, 56), cube, 12000.5)],
        "conv_sizes": [kb_record("conv", "f16,f16->f16", conv(c, hw), cube, 100.0 * c + hw)
                       for c in (16, 64) for hw in (7, 28, 112)],
        "softmax_vector": [kb_record("softmax", "f32->f32", [[4, 1000], [4, 1000]], vector, 800)],
        "duplicate_keys": [kb_record("matmul", "f32,f32->f32", [[8, 16], [16, 4], [8, 4]], cube, c)
                           for c in (300, 200, 400)],
        "stale_mix": [kb_record("conv", "f16,f16->f16", conv(32, 14), cube, 500, version=v) for v in (0, 1, 2)]
                     + [kb_record("conv", "f16,f16->f16", conv(32, 14), cube, 450, spec="fedcba9876543210")],
        "empty": [],
    }
    for name, records in exports.items():
        path = out / "kb_import" / f"{name}.json"
        write(path, json.dumps({"format": "loom-kb", "version": 1, "records": records}))
        if loomc:
            db = out / "kb_file" / f"{name}.db"
            subprocess.run([loomc, "kb", "import", str(path), "--kb", str(db)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)


def media_seeds(out):
    video = ["-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10"]
    audio = ["-f", "lavfi", "-i", "sine=sample_rate=8000"]
    clips = {
        "raw.h264": video + ["-c:v", "libx264", "-bf", "2", "-g", "4"],
        "raw.hevc": video + ["-c:v", "libx265", "-x265-params", "log-level=0:keyint=4"],
        "bframes.avi": video + audio + ["-c:v", "mpeg4", "-bf", "2", "-g", "4", "-c:a", "mp2"],
        "h264.ts": video + audio + ["-c:v", "libx264", "-g", "4", "-c:a", "aac"],
        "mpeg2.mpg": video + audio + ["-c:v", "mpeg2video", "-bf", "2", "-g", "4", "-c:a", "mp2"],
        "raw.m2v": video + ["-c:v", "mpeg2video", "-bf", "2", "-g", "4", "-f", "mpeg2video"],
        "audio.mkv": video + audio + ["-c:v", "libx264", "-g", "4", "-c:a", "libmp3lame"],
        "audio.mp4": video + audio + ["-c:v", "libx264", "-g", "4", "-c:a", "aac"],
    }
    for name, args in clips.items():
        subprocess.run(["ffmpeg", "-v", "error", "-y"] + args + ["-frames:v", "8", "-t", "0.8",
                                                                 str(out / "media" / name)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    loomc, out = sys.argv[1], Path(sys.argv[2]).resolve()
    for target in ("onnx", "tensor", "ncnn", "loom", "device_spec", "control", "pipeline", "kb_import", "kb_file",
                   "daemon_config", "media"):
        shutil.rmtree(out / target, ignore_errors=True)
        (out / target).mkdir(parents=True)
    counts = dict(zip(("onnx", "tensor", "loom"), onnx_seeds(out, loomc if os.access(loomc, os.X_OK) else None)))
    ncnn_seeds(out)
    control_seeds(out)
    kb_seeds(out, loomc if os.access(loomc, os.X_OK) else None)
    media_seeds(out)
    for name, folder in (("device_spec", "devices"), ("pipeline", "pipelines")):
        for f in sorted((ROOT / "configs" / folder).glob("*.toml")):
            shutil.copy(f, out / name / f.name)
    # The kept crashers seed their target too: the fuzzer starts from every known bad corner.
    for target_dir in sorted((ROOT / "tests/fuzz/regressions").iterdir()):
        for f in sorted(target_dir.iterdir()):
            shutil.copy(f, out / target_dir.name / f"regression_{f.name}")
    for target in sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "onnx-backend-data"):
        print(f"fuzz-seeds: {target}: {len(list((out / target).iterdir()))} seeds")
    (out / ".seeded").touch()  # scripts/fuzz seeds once; the corpora then grow in place


if __name__ == "__main__":
    main()
