import type {
  Engine,
  EngineConfig,
  Iteration,
  SequenceListener,
  SequenceSpec,
  SequenceView,
} from '../src/index.js';

/** Shared fixtures for the deterministic engine tests. */
export const BASE_CONFIG: EngineConfig = {
  alphaMs: 10,
  betaMs: 0.1,
  gammaMs: 0.01,
  maxNumSeqs: 4,
  maxWaiting: 8,
  blockSize: 16,
  kvBlocks: 64,
};

export function spec(
  id: string,
  promptTokens: number,
  outputTokens: number,
  promptBlockHashes: readonly string[] = [],
): SequenceSpec {
  return { id, promptTokens, outputTokens, promptBlockHashes, finishReason: 'length' };
}

/** Hashes for a prompt of `blocks` full blocks; equal `family` means equal prefix. */
export function hashes(family: string, blocks: number): string[] {
  return Array.from({ length: blocks }, (_, index) => `${family}/${index}`);
}

export interface TokenEvent {
  id: string;
  index: number;
  at: number;
}

/** Records every token and finish of the sequences it listens to. */
export class Recorder implements SequenceListener {
  readonly tokens: TokenEvent[] = [];
  readonly finished: Array<{ id: string; at: number }> = [];

  onToken(seq: SequenceView, now: number): void {
    this.tokens.push({ id: seq.spec.id, index: seq.generated, at: now });
  }

  onFinish(seq: SequenceView, now: number): void {
    this.finished.push({ id: seq.spec.id, at: now });
  }

  of(id: string): TokenEvent[] {
    return this.tokens.filter((token) => token.id === id);
  }
}

/** Runs back-to-back iterations from `startMs` until the engine is idle. */
export function runUntilIdle(engine: Engine, startMs = 0, maxIterations = 10_000): Iteration[] {
  const iterations: Iteration[] = [];
  let now = startMs;
  for (let count = 0; count < maxIterations; count++) {
    const iteration = engine.beginIteration(now);
    if (!iteration) return iterations;
    iterations.push(iteration);
    now = iteration.endMs;
    engine.completeIteration(now);
  }
  throw new Error(`engine still busy after ${maxIterations} iterations`);
}

/** Runs exactly one iteration at `now`; returns it (throws when idle). */
export function step(engine: Engine, now: number): Iteration {
  const iteration = engine.beginIteration(now);
  if (!iteration) throw new Error('engine idle');
  engine.completeIteration(iteration.endMs);
  return iteration;
}
