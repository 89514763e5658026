import { describe, expect, it } from 'vitest';
import { Engine, type EngineConfig } from '../src/engine.js';
import { AdapterCache } from '../src/lora-cache.js';
import { BASE_CONFIG, Recorder, runUntilIdle, spec, step } from './helpers.js';

// LoRA in the engine: vLLM's max_loras per batch, the adapter memory (LRU), load costs.
const LORA: EngineConfig = { ...BASE_CONFIG, maxLoras: 2, loraLoadMs: 50 };
const { alphaMs: A, betaMs: B, gammaMs: G } = BASE_CONFIG;

const lora = (id: string, adapter: string | undefined, prompt = 10, output = 2) => ({
  ...spec(id, prompt, output),
  ...(adapter ? { lora: adapter } : {}),
});

describe('AdapterCache (vLLM LRUCacheWorkerLoRAManager)', () => {
  it('loads on first use, evicts the least recently used beyond capacity, keeps the batch', () => {
    const cache = new AdapterCache(2);
    expect([cache.use('a'), cache.use('b'), cache.use('a')]).toEqual([true, true, false]);
    expect(cache.use('c')).toBe(true); // evicts b: a was used more recently
    expect(cache.list()).toEqual(['a', 'c']);
    expect(cache.use('b', new Set(['a', 'b']))).toBe(true); // a is in the batch: c goes
    expect(cache.list()).toEqual(['a', 'b']);
    expect(cache.remove('a')).toBe(true);
    expect(cache.has('a')).toBe(false);
    expect(() => new AdapterCache(0)).toThrow(RangeError);
  });
});

describe('engine with LoRA', () => {
  it('a batch holds at most maxLoras adapters; a skipped request keeps its place', () => {
    const engine = new Engine(LORA);
    const recorder = new Recorder();
    for (const [id, adapter] of [
      ['a1', 'a'],
      ['b1', 'b'],
      ['c1', 'c'], // a third adapter: skipped while a and b run
      ['a2', 'a'], // overtakes c1 (same adapter as a running one)
      ['base', undefined], // the base model needs no slot
    ] as const) {
      engine.submit(lora(id, adapter), recorder, 0);
    }
    const first = step(engine, 0);
    expect(first.batch.map((seq) => seq.spec.id)).toEqual(['a1', 'b1', 'a2', 'base']);
    expect(engine.numWaiting).toBe(1);

    runUntilIdle(engine, first.endMs);
    const firstTokenOf = (id: string) => recorder.of(id)[0]!.at;
    expect(firstTokenOf('c1')).toBeGreaterThan(firstTokenOf('a1'));
    expect(recorder.finished).toHaveLength(5);
  });

  it('an iteration loading adapters into memory costs loraLoadMs each; held ones cost nothing', () => {
    const engine = new Engine(LORA);
    const recorder = new Recorder();
    engine.submit(lora('a', 'x', 100, 2), recorder, 0);
    engine.submit(lora('b', 'y', 100, 2), recorder, 0);
    const [prefill, decode] = runUntilIdle(engine);
    expect(prefill).toMatchObject({ loraLoads: 2 });
    expect(prefill!.durationMs).toBeCloseTo(A + 2 * (B + G) * 100 + 2 * 50, 9);
    expect(decode).toMatchObject({ loraLoads: 0 });
    expect(engine.loadedAdapters).toEqual(['x', 'y']);
  });

  it('an adapter evicted from memory (maxCpuLoras) is loaded again when a batch needs it', () => {
    const engine = new Engine({ ...LORA, maxLoras: 1, maxCpuLoras: 2 });
    const recorder = new Recorder();
    expect(engine.loadAdapter('x')).toBe(true);
    engine.loadAdapter('y');
    engine.loadAdapter('z'); // evicts x
    expect(engine.loadedAdapters).toEqual(['y', 'z']);
    engine.submit(lora('a', 'x', 10, 1), recorder, 0);
    expect(step(engine, 0).loraLoads).toBe(1);
    expect(engine.loadedAdapters).toEqual(['z', 'x']);

    engine.unloadAdapter('z');
    engine.submit(lora('b', 'x', 10, 1), recorder, 100);
    expect(step(engine, 100).loraLoads).toBe(0);
  });

  it('LoRA off: adapters are ignored and cost nothing', () => {
    const engine = new Engine(BASE_CONFIG);
    engine.submit(lora('a', 'x'), new Recorder(), 0);
    engine.submit(lora('b', 'y'), new Recorder(), 0);
    engine.submit(lora('c', 'z'), new Recorder(), 0);
    const first = step(engine, 0);
    expect(first.batch).toHaveLength(3);
    expect(first.loraLoads).toBe(0);
    expect(engine.loadAdapter('x')).toBe(false);
    expect(engine.loadedAdapters).toEqual([]);
  });
});
