import { assertInteger } from './ids.js';

/**
 * What a request costs in weighted tokens, the service unit of `fairness_unit: tokens`
 * (after the Virtual Token Counter of Sheng et al., OSDI 2024): input and output tokens
 * weighted apart, output dearer (each decode step is a pass over the model; a prompt's
 * tokens go through in parallel).
 *
 * A request is charged an estimate when it is admitted, before its output is known: its
 * input tokens plus its expected output, which is its `max_tokens` capped by its tenant's
 * running mean of actual output (a client that always asks for 4,096 and gets 300 is
 * charged ~300 once the mean has its first sample). When it ends, the difference between
 * what it used and the estimate is charged to its tenant.
 *
 * Every number is an integer and every step is the same in the Lua engine: both scheduler
 * implementations charge the same costs.
 */
export interface TokenWeights {
  /** Weight of one input (prompt) token, integer >= 1. */
  readonly input: number;
  /** Weight of one output (generated) token, integer >= 1. */
  readonly output: number;
}

/** The paper's weights: an output token costs two input tokens. */
export const DEFAULT_TOKEN_WEIGHTS: TokenWeights = { input: 1, output: 2 };

/** The running mean is kept in thousandths of a token, so that it moves by small samples. */
export const MEAN_SCALE = 1_000;

/** Each new sample moves the mean by 1/MEAN_SMOOTHING of its distance (an EWMA, alpha 1/8). */
export const MEAN_SMOOTHING = 8;

/**
 * The output a request is expected to produce: its `max_tokens`, capped by its tenant's mean
 * output (thousandths of a token, rounded up to a whole token; null = no sample yet).
 */
export function expectedOutput(maxTokens: number, meanOutputMilli: number | null): number {
  assertInteger('maxTokens', maxTokens, 0);
  if (meanOutputMilli === null) return maxTokens;
  assertInteger('meanOutputMilli', meanOutputMilli, 0);
  return Math.min(maxTokens, Math.ceil(meanOutputMilli / MEAN_SCALE));
}

/** Input and output tokens in weighted tokens (at least 1: every request costs something). */
export function weightedTokens(input: number, output: number, weights: TokenWeights): number {
  assertInteger('input', input, 0);
  assertInteger('output', output, 0);
  return Math.max(1, input * weights.input + output * weights.output);
}

/** A request's estimate at admission: its input tokens and its expected output, weighted. */
export function estimatedCost(
  inputTokens: number,
  maxTokens: number,
  meanOutputMilli: number | null,
  weights: TokenWeights,
): number {
  return weightedTokens(inputTokens, expectedOutput(maxTokens, meanOutputMilli), weights);
}

/**
 * What an ended request adds to its tenant's service beyond its estimate: the weighted
 * tokens it used minus the estimate it was charged (negative when it used less).
 */
export function costTrueUp(
  estimate: number,
  inputTokens: number,
  outputTokens: number,
  weights: TokenWeights,
): number {
  assertInteger('estimate', estimate, 1);
  return weightedTokens(inputTokens, outputTokens, weights) - estimate;
}

/**
 * The tenant's mean output after a request produced `outputTokens` (thousandths of a
 * token): the first sample is taken whole, each later one moves the mean by 1/8 of the way,
 * rounded down.
 */
export function nextMeanOutput(meanOutputMilli: number | null, outputTokens: number): number {
  assertInteger('outputTokens', outputTokens, 0);
  const sample = outputTokens * MEAN_SCALE;
  if (meanOutputMilli === null) return sample;
  assertInteger('meanOutputMilli', meanOutputMilli, 0);
  return Math.floor((meanOutputMilli * (MEAN_SMOOTHING - 1) + sample) / MEAN_SMOOTHING);
}

/**
 * Service counters count in thousandths of a weighted token per unit of tenant weight, so
 * that a weight divides a cost with a rounding error of at most 1/1000 of a token.
 */
export const VIRTUAL_SCALE = 1_000;

/** What `cost` weighted tokens add to the service counter of a tenant of `weight`. */
export function virtualCost(cost: number, weight: number): number {
  assertInteger('cost', cost, 0);
  assertInteger('weight', weight, 1);
  return Math.ceil((cost * VIRTUAL_SCALE) / weight);
}
