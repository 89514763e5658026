/**
 * Seeded pseudo-randomness. Every random choice of the sim (output text, random output
 * lengths, fault draws) comes from a generator seeded from --seed, so a run is
 * reproducible: same seed and same request order, same answers.
 */

export type Rng = () => number;

/** mulberry32: 32-bit state, fast, statistically fine for simulation draws. Returns [0, 1). */
export function createRng(seed: number): Rng {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
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
  return low + Math.floor(rng() * (high - low + 1));
}
