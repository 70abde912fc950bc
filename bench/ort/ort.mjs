// What bench/ort's scripts share: failing with a message, and loading onnxruntime-node from the
// folder scripts/setup-ort installs it into (--ort-dir, else $LOOM_ORT_DIR, else the cache).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';

export function failer(script) {
  return (message) => {
    process.stderr.write(`${script}: error: ${message}\n`);
    process.exit(1);
  };
}

export function defaultOrtDir() {
  if (process.env.LOOM_ORT_DIR) return process.env.LOOM_ORT_DIR;
  const cache = process.env.LOOM_CACHE ||
    join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'loom');
  return join(cache, 'ort');
}

// Returns { ort, version } or fails naming the folder.
export function loadOrt(ortDir, fail) {
  try {
    const ort = createRequire(join(ortDir, 'package.json'))('onnxruntime-node');
    const pkg = JSON.parse(
      readFileSync(join(ortDir, 'node_modules', 'onnxruntime-node', 'package.json'), 'utf8'));
    return { ort, version: pkg.version };
  } catch (e) {
    fail(`cannot load onnxruntime-node from ${ortDir} (run scripts/setup-ort): ${e.message}`);
  }
}

// The session options both scripts give ONNX Runtime: its CPU provider at full optimisation.
export function sessionOptions(threads) {
  return {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  };
}
