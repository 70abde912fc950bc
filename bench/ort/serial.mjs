// The serial chain a user scripts today, middle step: ONNX Runtime over every frame of a raw
// rgb24 stream (what `ffmpeg -f rawvideo -pix_fmt rgb24` writes), one frame at a time, writing
// the restored frames as a raw rgb24 stream for `ffmpeg` to encode. The peer of bench/pipeline.sh.
//
// Usage: node bench/ort/serial.mjs --model M.onnx --width W --height H --input in.rgb
//          --output out.rgb [--threads 2] [--ort-dir DIR]
// Prints one JSON line: frames, wall seconds, ms per frame.

import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { defaultOrtDir, failer, loadOrt, sessionOptions } from './ort.mjs';

const fail = failer('serial.mjs');

const { values: args } = parseArgs({
  options: {
    model: { type: 'string' },
    width: { type: 'string' },
    height: { type: 'string' },
    input: { type: 'string' },
    output: { type: 'string' },
    threads: { type: 'string', default: '2' },
    'ort-dir': { type: 'string' },
  },
});
for (const k of ['model', 'width', 'height', 'input', 'output']) if (!args[k]) fail(`--${k} is required`);
const W = Number(args.width), H = Number(args.height), threads = Number(args.threads);
if (!(W > 0 && H > 0 && threads > 0)) fail('--width, --height and --threads must be positive');
const { ort, version } = loadOrt(args['ort-dir'] || defaultOrtDir(), fail);
const session = await ort.InferenceSession.create(args.model, sessionOptions(threads));
const inName = session.inputNames[0], outName = session.outputNames[0];
const frameBytes = W * H * 3;
const inBuf = Buffer.alloc(frameBytes);
const planes = new Float32Array(3 * W * H);
const fin = openSync(args.input, 'r'), fout = openSync(args.output, 'w');
let frames = 0, outBuf = null;
const start = process.hrtime.bigint();
for (;;) {
  const n = readSync(fin, inBuf, 0, frameBytes, null);
  if (n === 0) break;
  if (n !== frameBytes) fail(`${args.input}: a partial frame at the end (${n} of ${frameBytes} bytes)`);
  for (let i = 0, p = 0; p < W * H; ++p, i += 3) {
    planes[p] = inBuf[i] / 255;
    planes[W * H + p] = inBuf[i + 1] / 255;
    planes[2 * W * H + p] = inBuf[i + 2] / 255;
  }
  const result = await session.run({ [inName]: new ort.Tensor('float32', planes, [1, 3, H, W]) });
  const out = result[outName];
  const [, , oh, ow] = out.dims;
  const plane = oh * ow, d = out.data;
  if (!outBuf) outBuf = Buffer.alloc(plane * 3);
  for (let p = 0, i = 0; p < plane; ++p, i += 3) {
    for (let c = 0; c < 3; ++c) {
      const v = Math.round(d[c * plane + p] * 255);
      outBuf[i + c] = v < 0 ? 0 : v > 255 ? 255 : v;
    }
  }
  writeSync(fout, outBuf);
  ++frames;
}
closeSync(fin);
closeSync(fout);
const wall = Number(process.hrtime.bigint() - start) / 1e9;
console.log(JSON.stringify({ ort_version: version, frames, wall_s: wall, ms_per_frame: (wall * 1000) / frames, threads }));
await session.release();
