/**
 * One pod in virtual time, as the leader sees it: the sim's own `Engine` (the code
 * fairgate-sim runs) behind the gateway's per-pod cap and queue, Poisson arrivals whose rate
 * and length mix change every period, and the cumulative counters and gauge samples the
 * leader's scrapes would read. No processes and no clocks, so a study of many seeds takes
 * seconds (docs/tuner.md, "Traffic shapes").
 *
 * Counted as the sim's /metrics count them: TTFT and prompt tokens at the first token,
 * inter-token gaps at each later token, output tokens at finish, queue time at first
 * admission. The running/waiting gauges are sampled every `scrapeMs`, as the leader's scraper
 * samples them.
 */
import type { PodCounters, PodParams } from '@fairgate/control';
import { addGaugeSample, emptyGaugeSums } from '@fairgate/control';
import type { Rng } from '@fairgate/runtime';
import {
  Engine,
  ITL_BUCKETS,
  type SequenceListener,
  type SequenceView,
  TTFT_BUCKETS,
} from '@fairgate/vllm-sim';

/** One period's traffic offered to the pod. */
export interface TrafficPeriod {
  /** Arrivals per second at the gateway for this pod (Poisson). */
  rate: number;
  /** Prompt tokens, uniform in [low, high]. */
  input: readonly [number, number];
  /** Output tokens (max_tokens), uniform in [low, high]. */
  output: readonly [number, number];
}

export interface PodSetup {
  truth: PodParams;
  /** The sim's --max-num-seqs. */
  maxBatch: number;
  /**
   * The gateway in front of the pod: at most `cap` requests in the pod at once, the rest
   * wait in a FIFO of at most `queue` (arrivals beyond it are refused, 429). Absent: open
   * loop, every arrival goes straight to the pod.
   */
  gateway?: { cap: number; queue: number };
  /** The gateway's hop: a request reaches the pod this long after it is dispatched (ms). */
  hopMs?: number;
  /** The leader's scrape interval (ms). */
  scrapeMs?: number;
  /** From this period on the pod runs with `truth` x `slowdown` (a restart with other flags). */
  slowdownAt?: { period: number; factor: number };
}

export interface PodRun {
  /** Counters at every period boundary: periods.length + 1 snapshots. */
  snapshots: PodCounters[];
  /** Arrivals the gateway refused per period. */
  refused: number[];
  /** Requests that arrived per period. */
  arrived: number[];
}

const bucketsOf = (bounds: readonly number[]): Array<[number, number]> => [
  ...bounds.map((le): [number, number] => [le, 0]),
  [Number.POSITIVE_INFINITY, 0],
];

/** Counts one observation into cumulative buckets, as a Prometheus histogram does. */
function observe(buckets: Array<[number, number]>, value: number): void {
  for (const bucket of buckets) if (value <= bucket[0]) bucket[1] += 1;
}

function freshCounters(): PodCounters {
  return {
    atMs: 0,
    ttft: { sum: 0, count: 0, buckets: bucketsOf(TTFT_BUCKETS) },
    itl: { sum: 0, count: 0, buckets: bucketsOf(ITL_BUCKETS) },
    promptTokens: 0,
    generationTokens: 0,
    requestSuccess: 0,
    requestGenerationTokens: { sum: 0, count: 0 },
    queueTime: { sum: 0, count: 0 },
    gauges: emptyGaugeSums(),
  };
}

function engineFor(truth: PodParams, maxBatch: number, counters: () => PodCounters) {
  return new Engine(
    {
      alphaMs: truth.alpha,
      betaMs: truth.beta,
      gammaMs: truth.gamma,
      maxNumSeqs: maxBatch,
      maxWaiting: 1_000_000,
      blockSize: 16,
      kvBlocks: 1_000_000,
    },
    {
      onAdmit(seq, now) {
        const c = counters();
        if (seq.preemptions === 0) {
          c.queueTime!.count++;
          c.queueTime!.sum += (now - seq.arrivalMs) / 1_000;
        }
      },
      onToken(seq, now, previousTokenMs) {
        const c = counters();
        c.generationTokens! += 1;
        if (previousTokenMs === null) {
          c.ttft!.count++;
          c.ttft!.sum += (now - seq.arrivalMs) / 1_000;
          observe(c.ttft!.buckets!, (now - seq.arrivalMs) / 1_000);
          c.promptTokens! += seq.spec.promptTokens;
        } else {
          c.itl!.count++;
          c.itl!.sum += (now - previousTokenMs) / 1_000;
          observe(c.itl!.buckets!, (now - previousTokenMs) / 1_000);
        }
      },
      onFinish(seq) {
        const c = counters();
        c.requestSuccess! += 1;
        c.requestGenerationTokens!.count++;
        c.requestGenerationTokens!.sum += seq.generated;
      },
    },
  );
}

const uniform = (rng: Rng, [low, high]: readonly [number, number]) =>
  Math.round(low + (high - low) * rng.next());

/** Runs the pod through `periods` of `periodS` each. Deterministic for a given `rng`. */
export function simulatePodTraffic(
  setup: PodSetup,
  periods: readonly TrafficPeriod[],
  periodS: number,
  rng: Rng,
): PodRun {
  const periodMs = periodS * 1_000;
  const endMs = periods.length * periodMs;
  const scrapeMs = setup.scrapeMs ?? 100;
  const hopMs = setup.hopMs ?? 1;
  let counters = freshCounters();
  const snapshots: PodCounters[] = [structuredClone(counters)];
  const refused = periods.map(() => 0);
  const arrived = periods.map(() => 0);
  const periodOf = (t: number) => Math.min(periods.length - 1, Math.floor(t / periodMs));
  let engine = engineFor(setup.truth, setup.maxBatch, () => counters);

  // Poisson arrivals at each period's rate; a draw past a period boundary is redrawn from
  // the boundary at the next period's rate (memoryless, so that is exact).
  const nextArrivalAfter = (from: number): number => {
    let at = from;
    for (;;) {
      const rate = periods[periodOf(at)]!.rate;
      const next = rate > 0 ? at - (Math.log(1 - rng.next()) / rate) * 1_000 : Infinity;
      const boundary = (Math.floor(at / periodMs) + 1) * periodMs;
      if (next <= boundary || boundary >= endMs) return next;
      at = boundary;
    }
  };

  let inPod = 0;
  const gatewayQueue: { arrivedMs: number; period: number }[] = [];
  /** Dispatched, on their way to the pod: [reaches the pod at, period of arrival]. */
  const inTransit: { atMs: number; period: number }[] = [];
  let id = 0;
  const listener: SequenceListener = {
    onToken() {},
    onFinish(_seq: SequenceView, now: number) {
      inPod--;
      const next = gatewayQueue.shift();
      if (next) dispatch(now, next.period);
    },
  };
  const dispatch = (now: number, period: number) => {
    inPod++;
    inTransit.push({ atMs: now + hopMs, period });
  };
  const reachPod = (now: number, period: number) => {
    const p = periods[period]!;
    engine.submit(
      {
        id: String(id++),
        promptTokens: Math.max(1, uniform(rng, p.input)),
        promptBlockHashes: [],
        outputTokens: Math.max(2, uniform(rng, p.output)),
        finishReason: 'length',
      },
      listener,
      now,
    );
    if (!engine.inFlight) engine.beginIteration(now);
  };

  let nextArrival = nextArrivalAfter(0);
  let nextScrape = scrapeMs;
  let nextBoundary = periodMs;
  let slowed = false;
  for (;;) {
    const iterationEnd = engine.inFlight?.endMs ?? Infinity;
    const transit = inTransit[0]?.atMs ?? Infinity;
    const now = Math.min(nextArrival, iterationEnd, transit, nextScrape, nextBoundary);
    if (now > endMs || now === Infinity) break;
    if (now === nextBoundary) {
      snapshots.push(structuredClone({ ...counters, atMs: now }));
      nextBoundary += periodMs;
      const period = Math.floor(now / periodMs);
      if (!slowed && setup.slowdownAt && period === setup.slowdownAt.period) {
        // A restart with other flags: in-flight work is lost, the counters start from zero.
        slowed = true;
        const f = setup.slowdownAt.factor;
        const truth = {
          alpha: setup.truth.alpha * f,
          beta: setup.truth.beta * f,
          gamma: setup.truth.gamma * f,
        };
        counters = freshCounters();
        engine = engineFor(truth, setup.maxBatch, () => counters);
        inPod = 0;
        inTransit.length = 0;
        while (gatewayQueue.length > 0 && inPod < (setup.gateway?.cap ?? Infinity)) {
          dispatch(now, gatewayQueue.shift()!.period);
        }
      }
    } else if (now === nextScrape) {
      addGaugeSample(counters.gauges!, engine.numRunning, engine.numWaiting);
      nextScrape += scrapeMs;
    } else if (now === transit) {
      reachPod(now, inTransit.shift()!.period);
    } else if (now === iterationEnd) {
      engine.completeIteration(now);
      engine.beginIteration(now);
    } else {
      const period = periodOf(now);
      arrived[period]!++;
      const gateway = setup.gateway;
      if (!gateway || inPod < gateway.cap) dispatch(now, period);
      else if (gatewayQueue.length < gateway.queue) gatewayQueue.push({ arrivedMs: now, period });
      else refused[period]!++;
      nextArrival = nextArrivalAfter(now);
    }
  }
  while (snapshots.length <= periods.length) {
    snapshots.push(structuredClone({ ...counters, atMs: snapshots.length * periodMs }));
  }
  return { snapshots, refused, arrived };
}
