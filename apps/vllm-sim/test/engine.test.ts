import { describe, expect, it } from 'vitest';
import { Engine, type EngineObserver, QueueFullError, type SequenceView } from '../src/engine.js';
import { BASE_CONFIG, hashes, Recorder, runUntilIdle, spec, step } from './helpers.js';

// Deterministic: time is passed in, so every duration below is exact model arithmetic.
const { alphaMs: A, betaMs: B, gammaMs: G } = BASE_CONFIG;

describe('iteration time', () => {
  it('a lone request: TTFT = alpha + (beta+gamma)*i, then alpha + beta + gamma*(i+k)', () => {
    const engine = new Engine(BASE_CONFIG);
    const recorder = new Recorder();
    engine.submit(spec('a', 100, 4), recorder, 0);
    const iterations = runUntilIdle(engine);

    expect(iterations.map((it) => it.durationMs)).toEqual([
      expect.closeTo(A + (B + G) * 100, 9),
      expect.closeTo(A + B + G * 101, 9),
      expect.closeTo(A + B + G * 102, 9),
      expect.closeTo(A + B + G * 103, 9),
    ]);
    const times = recorder.of('a').map((token) => token.at);
    expect(times[0]).toBeCloseTo(A + (B + G) * 100, 9);
    for (let k = 1; k < 4; k++) {
      expect(times[k]! - times[k - 1]!).toBeCloseTo(A + B + G * (100 + k), 9);
    }
    expect(recorder.finished).toEqual([{ id: 'a', at: times[3] }]);
    expect(engine.numRunning).toBe(0);
    expect(engine.pool.usedCount).toBe(0);
  });

  it('a batch costs alpha once plus the work of each member', () => {
    const engine = new Engine(BASE_CONFIG);
    const recorder = new Recorder();
    engine.submit(spec('a', 100, 5), recorder, 0);
    const first = step(engine, 0);
    engine.submit(spec('b', 40, 5), recorder, first.endMs - 1);

    const mixed = engine.beginIteration(first.endMs)!;
    // a decodes its step 1, b prefills 40 tokens: one alpha for both.
    expect(mixed.durationMs).toBeCloseTo(A + (B + G * 101) + (B + G) * 40, 9);
    expect(mixed).toMatchObject({ prefillSeqs: 1, prefillTokens: 40, decodeSeqs: 1 });
    engine.completeIteration(mixed.endMs);

    const decodes = engine.beginIteration(mixed.endMs)!;
    expect(decodes.durationMs).toBeCloseTo(A + (B + G * 102) + (B + G * 41), 9);
  });

  it('emits one token per running sequence per iteration, the first at the end of prefill', () => {
    const engine = new Engine(BASE_CONFIG);
    const recorder = new Recorder();
    engine.submit(spec('a', 10, 3), recorder, 0);
    engine.submit(spec('b', 20, 3), recorder, 0);
    const iterations = runUntilIdle(engine);
    expect(iterations).toHaveLength(3);
    for (const [index, iteration] of iterations.entries()) {
      const emitted = recorder.tokens.filter((token) => token.at === iteration.endMs);
      expect(emitted.map((token) => [token.id, token.index])).toEqual([
        ['a', index + 1],
        ['b', index + 1],
      ]);
    }
  });
});

describe('scheduling', () => {
  it('runs at most maxNumSeqs and admits waiting requests in FIFO order', () => {
    const engine = new Engine({ ...BASE_CONFIG, maxNumSeqs: 2 });
    const recorder = new Recorder();
    engine.submit(spec('a', 10, 1), recorder, 0);
    engine.submit(spec('b', 10, 3), recorder, 0);
    engine.submit(spec('c', 10, 3), recorder, 0);
    engine.submit(spec('d', 10, 3), recorder, 0);

    const first = step(engine, 0);
    expect(first.batch.map((seq) => seq.spec.id)).toEqual(['a', 'b']);
    // a finished; its seat goes to c (arrived before d), never to d.
    const second = engine.beginIteration(first.endMs)!;
    expect(second.batch.map((seq) => seq.spec.id)).toEqual(['b', 'c']);
    expect(engine.numRunning).toBe(2);
    expect(engine.numWaiting).toBe(1);
    engine.completeIteration(second.endMs);
    runUntilIdle(engine, second.endMs);
    expect(recorder.finished.map((f) => f.id)).toEqual(['a', 'b', 'c', 'd']);
    expect(engine.maxRunningSeen).toBe(2);
  });

  it('refuses new arrivals beyond maxWaiting and accepts again once the queue drains', () => {
    const engine = new Engine({ ...BASE_CONFIG, maxNumSeqs: 1, maxWaiting: 2 });
    const recorder = new Recorder();
    engine.submit(spec('a', 10, 2), recorder, 0);
    engine.submit(spec('b', 10, 2), recorder, 0);
    expect(() => engine.submit(spec('c', 10, 2), recorder, 0)).toThrow(QueueFullError);

    engine.beginIteration(0); // a is admitted: one waiting place frees up
    expect(engine.numWaiting).toBe(1);
    expect(() => engine.submit(spec('c', 10, 2), recorder, 1)).not.toThrow();
    expect(() => engine.submit(spec('d', 10, 2), recorder, 1)).toThrow(QueueFullError);
  });

  it('never admits a request that cannot fit in the KV pool alone', () => {
    const engine = new Engine({ ...BASE_CONFIG, kvBlocks: 4 });
    expect(() => engine.submit(spec('huge', 60, 10), new Recorder(), 0)).toThrow(RangeError);
  });

  it('holds a waiting request until enough blocks are free for its prompt (no overtaking)', () => {
    const engine = new Engine({ ...BASE_CONFIG, kvBlocks: 5 });
    const recorder = new Recorder();
    engine.submit(spec('big', 48, 2), recorder, 0); // 3 blocks, 4 once it decodes
    engine.submit(spec('mid', 32, 1), recorder, 0); // needs 2: only 2 free
    engine.submit(spec('small', 10, 1), recorder, 0);
    const first = engine.beginIteration(0)!;
    expect(first.batch.map((seq) => seq.spec.id)).toEqual(['big', 'mid']);
    engine.completeIteration(first.endMs);
    // big grows to 4 blocks, mid finished: 1 block free, small (1 block) now fits.
    const second = engine.beginIteration(first.endMs)!;
    expect(second.batch.map((seq) => seq.spec.id)).toEqual(['big', 'small']);
    expect(engine.pool.freeCount).toBe(0);
  });
});

describe('preemption', () => {
  function observed() {
    const preempted: string[] = [];
    const observer: EngineObserver = { onPreempt: (seq) => preempted.push(seq.spec.id) };
    return { preempted, observer };
  }

  it('preempts the newest running sequence when a decode step finds no free block', () => {
    const { preempted, observer } = observed();
    // Three 16-token prompts: 1 block each, 3 once past 32 tokens. 7 blocks hold two of them.
    const engine = new Engine({ ...BASE_CONFIG, kvBlocks: 7 }, observer);
    const recorder = new Recorder();
    for (const id of ['a', 'b', 'c']) engine.submit(spec(id, 16, 20), recorder, 0);

    let now = 0;
    while (engine.preemptions === 0) now = step(engine, now).endMs;
    // a takes the last free block for token 33; b's need is met by preempting c, not b or a.
    expect(preempted).toEqual(['c']);
    expect(engine.numRunning).toBe(2);
    expect(engine.numWaiting).toBe(1);
    runUntilIdle(engine, now);
    expect(recorder.finished.map((f) => f.id).sort()).toEqual(['a', 'b', 'c']);
  });

  it('puts the victim at the head of the queue and recomputes prompt + generated on return', () => {
    const { preempted, observer } = observed();
    const engine = new Engine({ ...BASE_CONFIG, kvBlocks: 4, maxWaiting: 1 }, observer);
    const recorder = new Recorder();
    engine.submit(spec('a', 16, 30), recorder, 0);
    let now = step(engine, 0).endMs;
    engine.submit(spec('b', 16, 30), recorder, now); // one step behind a: b is the newest

    while (engine.preemptions === 0) now = step(engine, now).endMs;
    // a needed its 3rd block (token 33 = 16 + 17) with none free: b (16 generated) is evicted.
    expect(preempted).toEqual(['b']);
    const generatedBefore = recorder.of('b').length;
    expect(generatedBefore).toBe(16);
    // A preempted sequence goes back even with the queue at its cap for new arrivals.
    expect(engine.numWaiting).toBe(1);
    expect(() => engine.submit(spec('late', 16, 1), recorder, now)).toThrow(QueueFullError);

    const iterations = runUntilIdle(engine, now);
    const resume = iterations.find((it) => it.prefillSeqs === 1)!;
    expect(resume.prefillTokens).toBe(16 + generatedBefore);
    expect(resume.durationMs).toBeCloseTo(A + (B + G) * (16 + generatedBefore), 9);

    // Every token exactly once, in order: nothing is re-emitted after the recompute.
    expect(recorder.of('b').map((token) => token.index)).toEqual(
      Array.from({ length: 30 }, (_, index) => index + 1),
    );
    expect(engine.pool.usedCount).toBe(0);
  });
});

describe('prefix cache', () => {
  it('skips cached prompt blocks in prefill and counts queries and hits in tokens', () => {
    const admissions: Array<{ query: number; hit: number }> = [];
    const engine = new Engine(BASE_CONFIG, {
      onAdmit: (_seq, _now, query, hit) => admissions.push({ query, hit }),
    });
    const recorder = new Recorder();
    const first = engine.submit(spec('first', 70, 1, hashes('p', 4)), recorder, 0);
    const cold = step(engine, 0);
    expect(cold.durationMs).toBeCloseTo(A + (B + G) * 70, 9);
    expect(first.cachedTokens).toBe(0);

    const again = engine.submit(spec('again', 70, 1, hashes('p', 4)), recorder, cold.endMs);
    const warm = step(engine, cold.endMs);
    expect(warm.prefillTokens).toBe(70 - 64);
    expect(warm.durationMs).toBeCloseTo(A + (B + G) * 6, 9);
    expect(again.cachedTokens).toBe(64);
    expect(admissions).toEqual([
      { query: 70, hit: 0 },
      { query: 70, hit: 64 },
    ]);
  });

  it('always recomputes the last prompt token, so a fully cached prompt still prefills a block', () => {
    const engine = new Engine(BASE_CONFIG);
    const recorder = new Recorder();
    engine.submit(spec('x', 64, 1, hashes('q', 4)), recorder, 0);
    step(engine, 0);
    const seq = engine.submit(spec('y', 64, 1, hashes('q', 4)), recorder, 100);
    expect(step(engine, 100).prefillTokens).toBe(16);
    expect(seq.cachedTokens).toBe(48);
  });

  it('matches prefixes only: a different first block means no hit', () => {
    const engine = new Engine(BASE_CONFIG);
    const recorder = new Recorder();
    engine.submit(spec('x', 64, 1, hashes('r', 4)), recorder, 0);
    step(engine, 0);
    const other = ['other/0', ...hashes('r', 4).slice(1)];
    engine.submit(spec('y', 64, 1, other), recorder, 100);
    expect(step(engine, 100).prefillTokens).toBe(64);
  });

  it('shares cached blocks between concurrent sequences instead of copying them', () => {
    const engine = new Engine(BASE_CONFIG);
    const recorder = new Recorder();
    engine.submit(spec('x', 64, 5, hashes('s', 4)), recorder, 0);
    engine.submit(spec('y', 64, 5, hashes('s', 4)), recorder, 0);
    engine.beginIteration(0);
    // y hits x's first three blocks in the same step: 4 + 1 blocks, not 8.
    expect(engine.pool.usedCount).toBe(5);
  });
});

describe('abort (client disconnect)', () => {
  it('frees the seat and blocks at once, even mid-iteration, and emits nothing more', () => {
    const aborted: string[] = [];
    const engine = new Engine(BASE_CONFIG, { onAbort: (seq) => aborted.push(seq.spec.id) });
    const recorder = new Recorder();
    const gone = engine.submit(spec('gone', 100, 10), recorder, 0);
    engine.submit(spec('stays', 30, 10), recorder, 0);
    const iteration = engine.beginIteration(0)!;
    expect(engine.pool.usedCount).toBe(7 + 2);

    expect(engine.abort(gone, 5)).toBe(true);
    expect(engine.numRunning).toBe(1);
    expect(engine.pool.usedCount).toBe(2);
    expect(gone.state).toBe('aborted');
    expect(aborted).toEqual(['gone']);

    engine.completeIteration(iteration.endMs);
    expect(recorder.tokens.map((token) => token.id)).toEqual(['stays']);
    expect(engine.abort(gone, 6)).toBe(false); // idempotent
  });

  it('removes a waiting request from the queue', () => {
    const engine = new Engine({ ...BASE_CONFIG, maxNumSeqs: 1 });
    const recorder = new Recorder();
    engine.submit(spec('a', 10, 2), recorder, 0);
    const queued = engine.submit(spec('b', 10, 2), recorder, 0);
    engine.beginIteration(0);
    expect(engine.numWaiting).toBe(1);
    engine.abort(queued, 1);
    expect(engine.numWaiting).toBe(0);
  });

  it('a consumer that throws loses its own sequence only', () => {
    const engine = new Engine(BASE_CONFIG);
    const recorder = new Recorder();
    const broken = engine.submit(
      spec('broken', 10, 3),
      {
        onToken: () => {
          throw new Error('stream closed');
        },
        onFinish: () => {},
      },
      0,
    );
    engine.submit(spec('fine', 10, 3), recorder, 0);
    runUntilIdle(engine);
    expect((broken as SequenceView).state).toBe('aborted');
    expect(recorder.finished.map((f) => f.id)).toEqual(['fine']);
    expect(engine.pool.usedCount).toBe(0);
  });
});

describe('arrivals', () => {
  it('an iteration takes in only requests that had arrived when it started', () => {
    const engine = new Engine(BASE_CONFIG);
    const recorder = new Recorder();
    engine.submit(spec('a', 10, 3), recorder, 0);
    engine.submit(spec('b', 10, 3), recorder, 5); // queued before the next plan, arrived after 2
    const first = engine.beginIteration(2)!;
    expect(first.batch.map((seq) => seq.spec.id)).toEqual(['a']);
    engine.completeIteration(first.endMs);
    const second = engine.beginIteration(first.endMs)!;
    expect(second.batch.map((seq) => seq.spec.id)).toEqual(['a', 'b']);
    expect(second.batch[1]!.firstAdmittedMs).toBe(first.endMs);

    // An explicit later bound (a driver that gave up following the model) admits them.
    const other = new Engine(BASE_CONFIG);
    other.submit(spec('c', 10, 1), recorder, 5);
    expect(other.beginIteration(2)).toBeNull();
    expect(other.nextArrivalMs).toBe(5);
    expect(other.beginIteration(2, 5)!.batch).toHaveLength(1);
  });
});
