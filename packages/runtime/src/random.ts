/**
 * Seeded pseudo-random numbers: same seed, same sequence, on every machine. Every random
 * choice of the load generator, the sim (output text, random lengths, fault draws) and the
 * seeded tests comes from here, so a run is reproducible. sfc32 (Chris Doty-Humphrey's
 * small fast counter) seeded through splitmix32, so nearby seeds give unrelated streams.
 * Not for anything secret.
 */
export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
}

function splitmix32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** A generator for `seed` and an optional stream label (one independent stream per label). */
export function createRng(seed: number, stream = ''): Rng {
  let mixed = seed >>> 0;
  for (let i = 0; i < stream.length; i++) mixed = Math.imul(mixed ^ stream.charCodeAt(i), 16777619);
  const init = splitmix32(mixed ^ 0x5bd1e995);
  let a = init();
  let b = init();
  let c = init();
  let d = init() | 1;
  const next = () => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t / 4294967296;
  };
  for (let i = 0; i < 12; i++) next();
  return { next };
}

/**
 * Derives a 32-bit seed from several parts (FNV-1a over their decimal text), so
 * independent streams (per request, per purpose) do not overlap.
 */
export function deriveSeed(...parts: Array<number | string>): number {
  let hash = 0x811c9dc5;
  const text = parts.join('\u0000');
  for (let at = 0; at < text.length; at++) {
    hash ^= text.charCodeAt(at);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** Uniform integer in [low, high] (both inclusive). */
export function uniformInt(rng: Rng, low: number, high: number): number {
  return low + Math.floor(rng.next() * (high - low + 1));
}

/** True with probability `p`. */
export function chance(rng: Rng, p: number): boolean {
  return rng.next() < p;
}

/** One of `items`, uniformly (which must not be empty). */
export function pick<T>(rng: Rng, items: readonly T[]): T {
  return items[Math.floor(rng.next() * items.length)] as T;
}

/** Exponential with the given rate (mean 1/rate). */
export function exponential(rng: Rng, rate: number): number {
  return -Math.log(1 - rng.next()) / rate;
}

/** Standard normal (Box-Muller; one of the pair is discarded, which keeps it stateless). */
export function standardNormal(rng: Rng): number {
  const u = 1 - rng.next();
  const v = rng.next();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}

/** Log-normal with the given median and sigma (of the underlying normal). */
export function logNormal(rng: Rng, median: number, sigma: number): number {
  return median * Math.exp(sigma * standardNormal(rng));
}
