import { describe, expect, it } from 'vitest';
import {
  costTrueUp,
  DEFAULT_TOKEN_WEIGHTS,
  estimatedCost,
  expectedOutput,
  nextMeanOutput,
  type TokenWeights,
  weightedTokens,
} from '../src/index.js';

const paper = DEFAULT_TOKEN_WEIGHTS;

describe('token cost', () => {
  it('weights output tokens twice as much as input tokens by default (the paper)', () => {
    expect(paper).toEqual({ input: 1, output: 2 });
  });

  it.each([
    // input, output, weights, weighted tokens
    [200, 20, paper, 240],
    [2_000, 300, paper, 2_600],
    [0, 0, paper, 1], // every request costs something
    [0, 1, paper, 2],
    [1, 0, paper, 1],
    [100, 100, { input: 1, output: 1 }, 200],
    [100, 100, { input: 2, output: 7 }, 900],
  ] as Array<[number, number, TokenWeights, number]>)(
    '%s in, %s out, weights %o -> %s',
    (input, output, weights, expected) => {
      expect(weightedTokens(input, output, weights)).toBe(expected);
    },
  );

  it.each([
    // max_tokens, mean output (milli-tokens; null = no sample), expected output
    [4_096, null, 4_096], // no sample yet: max_tokens
    [4_096, 300_000, 300], // the mean caps max_tokens
    [4_096, 299_001, 300], // rounded up to a whole token
    [4_096, 1, 1],
    [4_096, 0, 0],
    [100, 300_000, 100], // max_tokens caps the mean
    [0, 300_000, 0],
    [300, 300_000, 300],
  ] as Array<[number, number | null, number]>)(
    'max_tokens %s, mean %s -> expects %s',
    (maxTokens, mean, expected) => {
      expect(expectedOutput(maxTokens, mean)).toBe(expected);
    },
  );

  it.each([
    // input, max_tokens, mean, weights, estimate
    [200, 4_096, null, paper, 200 + 2 * 4_096],
    [200, 4_096, 20_000, paper, 240],
    [2_000, 300, 1_000_000, paper, 2_600],
    [0, 0, null, paper, 1],
  ] as Array<[number, number, number | null, TokenWeights, number]>)(
    '%s in, max_tokens %s, mean %s -> estimate %s',
    (input, maxTokens, mean, weights, expected) => {
      expect(estimatedCost(input, maxTokens, mean, weights)).toBe(expected);
    },
  );

  it.each([
    // estimate, input, output, true-up
    [8_392, 200, 20, 240 - 8_392], // asked for 4,096, used 20: most of it back
    [240, 200, 20, 0], // the estimate was right
    [240, 200, 30, 20], // used more than the mean: charged the rest
    [1, 0, 0, 0],
  ])('estimate %s, used %s in / %s out -> %s', (estimate, input, output, expected) => {
    expect(costTrueUp(estimate, input, output, paper)).toBe(expected);
  });

  it('charges exactly what was used once estimate and true-up are added', () => {
    for (const [input, maxTokens, mean, output] of [
      [200, 4_096, null, 20],
      [2_000, 300, 250_000, 300],
      [7, 16, 3_141, 0],
    ] as Array<[number, number, number | null, number]>) {
      const estimate = estimatedCost(input, maxTokens, mean, paper);
      expect(estimate + costTrueUp(estimate, input, output, paper)).toBe(
        weightedTokens(input, output, paper),
      );
    }
  });

  it.each([
    // mean (milli), output, next mean
    [null, 20, 20_000], // the first sample is taken whole
    [20_000, 20, 20_000],
    [20_000, 28, 21_000], // 1/8 of the way
    [20_000, 0, 17_500],
    [0, 1, 125],
    [7, 0, 6], // rounded down
  ] as Array<[number | null, number, number]>)('mean %s, output %s -> %s', (mean, output, next) => {
    expect(nextMeanOutput(mean, output)).toBe(next);
  });

  it('converges on what a client uses, whatever max_tokens it sends', () => {
    // A client asking for 4,096 tokens and getting 20: charged 8,392 once, then 240.
    let mean: number | null = null;
    const estimates: number[] = [];
    for (let n = 0; n < 5; n++) {
      estimates.push(estimatedCost(200, 4_096, mean, paper));
      mean = nextMeanOutput(mean, 20);
    }
    expect(estimates).toEqual([8_392, 240, 240, 240, 240]);
    // A client whose answers grow from 20 to 300 tokens: the mean is within 1% in 40 samples.
    for (let n = 0; n < 40; n++) mean = nextMeanOutput(mean, 300);
    expect(expectedOutput(4_096, mean)).toBeGreaterThanOrEqual(297);
    expect(expectedOutput(4_096, mean)).toBeLessThanOrEqual(300);
  });

  it('refuses what is not a whole token count, naming it', () => {
    expect(() => weightedTokens(-1, 0, paper)).toThrow(/input/);
    expect(() => weightedTokens(1.5, 0, paper)).toThrow(/input/);
    expect(() => expectedOutput(10, -1)).toThrow(/meanOutputMilli/);
    expect(() => costTrueUp(0, 1, 1, paper)).toThrow(/estimate/);
    expect(() => nextMeanOutput(null, Number.NaN)).toThrow(/outputTokens/);
  });
});
