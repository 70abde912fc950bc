// ONNX Runtime peer for the operator-library benchmark: times one model on the CPU execution
// provider and prints one JSON line.
//
// Usage: node bench/ort/run.mjs --model M.onnx --shape 1x3xHxW [--input in.f32]
//          [--output out.f32] [--threads 2] [--warmup 2] [--iters 10] [--seed 1]
//          [--ort-dir DIR]
//
// --input is raw little-endian float32 in NCHW order; without it the input is uniform in
// [0, 1) from a fixed-seed generator (mulberry32), so runs are repeatable. --output receives
// the model's first output as raw little-endian float32. onnxruntime-node is loaded from
// --ort-dir (default: $LOOM_ORT_DIR, else the cache folder scripts/setup-ort installs into).

import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { defaultOrtDir, failer, loadOrt, sessionOptions } from './ort.mjs';

const fail = failer('run.mjs');

function intAtLeast(name, text, min) {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) {
    fail(`--${name} must be an integer >= ${min}, got '${text}'`);
  }
  return n;
}

// mulberry32: small, fixed, and the same on every platform.
function uniformFloats(count, seed) {
  const out = new Float32Array(count);
  let a = seed >>> 0;
  for (let i = 0; i < count; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  return out;
}

const { values: args } = parseArgs({
  options: {
    model: { type: 'string' },
    shape: { type: 'string' },
    input: { type: 'string' },
    output: { type: 'string' },
    threads: { type: 'string', default: '2' },
    warmup: { type: 'string', default: '2' },
    iters: { type: 'string', default: '10' },
    seed: { type: 'string', default: '1' },
    'ort-dir': { type: 'string' },
  },
});

if (!args.model) fail('--model is required');
if (!args.shape) fail('--shape is required (e.g. 1x3x240x320)');
const shape = args.shape.toLowerCase().split('x').map(Number);
if (shape.length === 0 || shape.some((d) => !Number.isInteger(d) || d <= 0)) {
  fail(`--shape '${args.shape}' is not like 1x3x240x320`);
}
const threads = intAtLeast('threads', args.threads, 1);
const warmup = intAtLeast('warmup', args.warmup, 0);
const iters = intAtLeast('iters', args.iters, 1);
const seed = intAtLeast('seed', args.seed, 0);
const ortDir = args['ort-dir'] || defaultOrtDir();

const { ort, version } = loadOrt(ortDir, fail);

const count = shape.reduce((a, b) => a * b, 1);
let data;
if (args.input) {
  const bytes = readFileSync(args.input);
  if (bytes.length !== count * 4) {
    fail(`${args.input}: ${bytes.length} bytes, shape ${args.shape} needs ${count * 4}`);
  }
  data = new Float32Array(count);
  new Uint8Array(data.buffer).set(bytes); // little-endian host assumed (x86-64, arm64)
} else {
  data = uniformFloats(count, seed);
}

const session = await ort.InferenceSession.create(args.model, sessionOptions(threads));
if (session.inputNames.length !== 1) {
  fail(`${args.model}: expected one input, found ${session.inputNames.join(', ')}`);
}
const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, shape) };
const outputName = session.outputNames[0];

let result;
for (let i = 0; i < warmup; i++) result = await session.run(feeds);
const times = [];
for (let i = 0; i < iters; i++) {
  const start = process.hrtime.bigint();
  result = await session.run(feeds);
  times.push(Number(process.hrtime.bigint() - start) / 1e6);
}

const output = result[outputName];
if (args.output) {
  const out = output.data;
  writeFileSync(args.output, new Uint8Array(out.buffer, out.byteOffset, out.byteLength));
}

const sorted = [...times].sort((a, b) => a - b);
const mid = sorted.length >> 1;
const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
const round = (x) => Math.round(x * 1000) / 1000;
console.log(JSON.stringify({
  ort_version: version,
  ms_median: round(median),
  ms_min: round(sorted[0]),
  ms_all: times.map(round),
  threads,
  shape,
  output_shape: output.dims,
}));
await session.release();
