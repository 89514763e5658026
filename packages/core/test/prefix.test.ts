import { describe, expect, it } from 'vitest';
import {
  DEFAULT_PREFIX_GENERATION,
  DEFAULT_PREFIX_ROUTING,
  leadingRun,
  prefixGenerationSize,
  prefixScore,
} from '../src/index.js';

const config = (entriesPerPod: number) => ({ ...DEFAULT_PREFIX_ROUTING, entriesPerPod });

describe('prefixGenerationSize', () => {
  it.each([
    // entriesPerPod, the pod's reported capacity, a generation
    [0, null, DEFAULT_PREFIX_GENERATION],
    [0, 1_100, 550],
    [0, 1_101, 551],
    [0, 1, 1],
    [8, null, 4],
    [8, 1_100, 4],
    [9, 1_100, 5],
    [65_536, 2, 32_768],
  ] as const)('entriesPerPod %i, capacity %s: %i', (entries, capacity, size) => {
    expect(prefixGenerationSize(config(entries), capacity)).toBe(size);
  });
});

describe('prefixScore', () => {
  it.each([
    // matched, total, inflight, cap, pressure, score (weight 1, pressureWeight 0.5)
    [0, 4, 0, 4, 0, 0],
    [4, 4, 0, 4, 0, 1],
    [2, 4, 1, 4, 0, 0.25],
    [4, 4, 4, 4, 0, 0],
    [4, 4, 0, 4, 1, 0.5],
    [0, 4, 2, 4, 2, -1.5],
  ] as const)('matched %i of %i, %i/%i in flight, pressure %d: %d', (m, n, inflight, cap, p, s) => {
    const weights = { ...DEFAULT_PREFIX_ROUTING, weight: 1, pressureWeight: 0.5 };
    expect(prefixScore(weights, m, n, inflight, cap, p)).toBeCloseTo(s, 12);
  });
});

describe('leadingRun', () => {
  const held = new Set(['a', 'b', 'd']);
  it.each([
    [[], 0],
    [['a'], 1],
    [['a', 'b', 'c', 'd'], 2],
    [['b', 'a'], 2],
    [['c', 'a', 'b'], 0],
    [['a', 'b', 'd'], 3],
  ] as const)('%j: %i', (hashes, run) => {
    expect(leadingRun(hashes, (hash) => held.has(hash))).toBe(run);
  });
});
