import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { type Pool, SIM_MODEL, startPool, sumByLabels } from './support/pool.js';

/**
 * Fairness in tokens across 3 replicas (docs/scheduler.md, *Fairness in tokens*): 4 sims
 * whose iterations cost per token, two tenants kept backlogged by closed-loop clients, one
 * sending short requests (200 tokens in, 20 out) and one long ones (2,000 in, 300 out: ~15x
 * the short one's time on a pod). The clients measure the weighted tokens (input + 2 x
 * output) each tenant is served, per 10 s window; the replicas' /admin/state, sampled every
 * second, gives the service counters the scheduler orders by.
 *
 * TOKEN_FAIRNESS_S (default 25) is how long both tenants stay backlogged in each run, and
 * TOKEN_FAIRNESS_IDLE_S (default 6) how long the returning tenant stays away; the issue's
 * acceptance runs use 60 and 30.
 */
const BACKLOG_S = Number(process.env.TOKEN_FAIRNESS_S ?? 25);
const IDLE_S = Number(process.env.TOKEN_FAIRNESS_IDLE_S ?? 6);
/** Completions before this many seconds of a backlog are not judged (queues fill, long requests start). */
const WARMUP_S = 5;
const WINDOW_S = 10;
/**
 * Closed-loop clients per tenant: enough that each keeps requests waiting on a loaded
 * machine (a short request is over in ~150 ms; at 2:1 the short tenant holds 16 slots).
 */
const CLIENTS: Record<'short' | 'long', number> = { short: 72, long: 36 };
const POD_CAP = 6;
const PODS = 4;

const SHORT = { input: 200, maxTokens: 20 };
const LONG = { input: 2_000, maxTokens: 300 };
/** The sims end every answer after this many tokens, whatever max_tokens asks. */
const EOS_AFTER = 300;
/** What the client asking for 10x gets. */
const USES = 150;

type TenantName = 'short' | 'long';
const KEYS: Record<TenantName, string> = { short: TEST_KEYS.paying, long: TEST_KEYS.free };

interface Completion {
  tenant: TenantName;
  /** ms since the run started */
  at: number;
  input: number;
  output: number;
}

interface Sample {
  at: number;
  counter: Partial<Record<TenantName, number>>;
  backlogged: Partial<Record<TenantName, boolean>>;
}

const weighted = (c: { input: number; output: number }) => c.input + 2 * c.output;

async function startTokenPool(
  unit: 'tokens' | 'requests',
  weights: Record<TenantName, number>,
  eosAfter = EOS_AFTER,
) {
  return startPool({
    replicas: 3,
    podCap: POD_CAP,
    budget: POD_CAP * PODS,
    sims: Array.from({ length: PODS }, () => ({
      'alpha-ms': 6,
      'beta-ms': 0.02,
      'gamma-ms': 0,
      'max-model-len': 8_192,
      'eos-after': eosAfter,
    })),
    scheduler: { fairness_unit: unit, queue_ttl_ms: 120_000 },
    tenants: (['short', 'long'] as const).map((tenant) => ({
      id: tenant,
      api_key_sha256: [sha256Hex(KEYS[tenant])],
      weight: weights[tenant],
      queue_max: 1_000,
    })),
  });
}

/** One run: closed-loop clients per tenant between its start and stop (ms after t0). */
class Run {
  readonly completions: Completion[] = [];
  readonly samples: Sample[] = [];
  failures = 0;
  private readonly t0 = performance.now();
  private serial = 0;

  constructor(private readonly pool: Pool) {}

  now(): number {
    return performance.now() - this.t0;
  }

  async clients(tenant: TenantName, maxTokens: number, startMs: number, stopMs: number) {
    const size = tenant === 'short' ? SHORT : LONG;
    const loop = async (client: number) => {
      await sleep(Math.max(0, startMs - this.now()));
      const url = this.pool.gateways[client % this.pool.gateways.length]!.url;
      while (this.now() < stopMs) {
        this.serial += 1;
        // A unique head per request: the sims' prefix cache serves nothing twice.
        const head = `${tenant} ${this.serial} `;
        const content = head + 'x'.repeat(size.input * 4 - head.length);
        const response = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${KEYS[tenant]}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            model: SIM_MODEL,
            messages: [{ role: 'user', content }],
            max_tokens: maxTokens,
          }),
        });
        const text = await response.text();
        if (response.status !== 200) {
          this.failures += 1;
          continue;
        }
        const { usage } = JSON.parse(text) as {
          usage: { prompt_tokens: number; completion_tokens: number };
        };
        this.completions.push({
          tenant,
          at: this.now(),
          input: usage.prompt_tokens,
          output: usage.completion_tokens,
        });
      }
    };
    await Promise.all(Array.from({ length: CLIENTS[tenant] }, (_, i) => loop(i)));
  }

  /** /admin/state every second until stopMs: each tenant's counter and whether it waits. */
  async sample(stopMs: number) {
    while (this.now() < stopMs) {
      const state = await this.pool.state();
      const sample: Sample = { at: this.now(), counter: {}, backlogged: {} };
      for (const t of state.tenants) {
        const entry = t.service[0];
        if (!entry) continue;
        sample.counter[t.tenant as TenantName] = entry.counter;
        sample.backlogged[t.tenant as TenantName] = entry.backlogged;
      }
      this.samples.push(sample);
      await sleep(1_000);
    }
  }

  /** Weighted tokens served per tenant in [fromMs, toMs), by completion time. */
  served(fromMs: number, toMs: number): Record<TenantName, number> {
    const out = { short: 0, long: 0 };
    for (const c of this.completions) {
      if (c.at >= fromMs && c.at < toMs) out[c.tenant] += weighted(c);
    }
    return out;
  }

  /** Short's weighted tokens over long's, per WINDOW_S window of [fromMs, toMs). */
  windowRatios(fromMs: number, toMs: number, weights: Record<TenantName, number>): number[] {
    const ratios: number[] = [];
    for (let at = fromMs; at + WINDOW_S * 1_000 <= toMs + 1; at += WINDOW_S * 1_000) {
      const s = this.served(at, at + WINDOW_S * 1_000);
      ratios.push(s.short / weights.short / (s.long / weights.long));
    }
    return ratios;
  }

  /** The share of /admin/state samples in [fromMs, toMs) that found both tenants waiting. */
  bothWaiting(fromMs: number, toMs: number): number {
    const inside = this.samples.filter((s) => s.at >= fromMs && s.at < toMs);
    return inside.filter((s) => s.backlogged.short && s.backlogged.long).length / inside.length;
  }

  /** Raw tokens (input + output) per second in [fromMs, toMs). */
  throughput(fromMs: number, toMs: number): number {
    let tokens = 0;
    for (const c of this.completions) {
      if (c.at >= fromMs && c.at < toMs) tokens += c.input + c.output;
    }
    return tokens / ((toMs - fromMs) / 1_000);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const fmt = (n: number) => n.toFixed(3);

/** Both tenants backlogged from startMs for BACKLOG_S; returns the judged interval. */
async function backlogged(
  run: Run,
  long: { maxTokens: number; startMs: number },
  shortStartMs: number,
) {
  const stopMs = long.startMs + BACKLOG_S * 1_000;
  await Promise.all([
    run.clients('short', SHORT.maxTokens, shortStartMs, stopMs),
    run.clients('long', long.maxTokens, long.startMs, stopMs),
    run.sample(stopMs),
  ]);
  return { from: long.startMs + WARMUP_S * 1_000, to: stopMs };
}

describe('fairness in tokens: a short and a long tenant backlogged across 3 replicas', () => {
  let pool: Pool | undefined;
  afterEach(async () => {
    await pool?.stop();
    pool = undefined;
  });
  /** Throughput of the runs, for the last test's comparison. */
  const throughputs: Partial<Record<'tokens' | 'requests', number>> = {};

  it(
    'weights 1:1: every 10 s window within ±10% of 1:1; a tenant back after idling gets its share at once, and no more; the counters never part by more than one request',
    async () => {
      pool = await startTokenPool('tokens', { short: 1, long: 1 });
      const run = new Run(pool);
      const judged = await backlogged(
        run,
        { maxTokens: LONG.maxTokens, startMs: IDLE_S * 1_000 },
        0,
      );
      const ratios = run.windowRatios(judged.from, judged.to, { short: 1, long: 1 });
      throughputs.tokens = run.throughput(judged.from, judged.to);

      // The returning tenant: from the first sample it waits in, 5 s on, its share of the
      // weighted tokens dispatched (the counters' growth).
      const first = run.samples.findIndex((s) => s.backlogged.long);
      const start = run.samples[first] as Sample;
      const end = run.samples.find((s) => s.at >= start.at + 5_000) as Sample;
      const grownLong = (end.counter.long ?? 0) - (start.counter.long ?? 0);
      const grownShort = (end.counter.short ?? 0) - (start.counter.short ?? 0);
      const returningShare = grownLong / (grownLong + grownShort);

      // The documented bound (docs/scheduler.md): backlogged tenants' counters differ by at
      // most the largest charge, one long request (estimates exact here: the sims answer
      // exactly max_tokens, the prompt estimate is the sims' count).
      const largest = Math.max(...run.completions.map((c) => weighted(c))) * 1_000;
      const gaps = run.samples
        .filter((s) => s.backlogged.short && s.backlogged.long)
        .map((s) => Math.abs((s.counter.short ?? 0) - (s.counter.long ?? 0)));
      console.log(
        `tokens 1:1: window ratios short/long ${ratios.map(fmt).join(', ')}; returning tenant's share of its first 5 s ${fmt(returningShare)}; counter gap at ${gaps.length} samples max ${(Math.max(...gaps) / 1_000).toFixed(0)} weighted tokens (bound ${largest / 1_000}); ${fmt(throughputs.tokens)} tokens/s; ${run.completions.length} served, ${run.failures} failed`,
      );
      expect(run.failures).toBe(0);
      expect(ratios.length).toBeGreaterThanOrEqual(2);
      for (const ratio of ratios) {
        expect(ratio).toBeGreaterThan(0.9);
        expect(ratio).toBeLessThan(1.1);
      }
      expect(returningShare).toBeGreaterThan(0.5 - 0.15 * 0.5);
      expect(returningShare).toBeLessThan(0.5 + 0.15 * 0.5);
      expect(gaps.length).toBeGreaterThan(BACKLOG_S / 2);
      for (const gap of gaps) expect(gap).toBeLessThanOrEqual(largest);
    },
    (IDLE_S + BACKLOG_S + 60) * 1_000,
  );

  it(
    'weights 2:1: every 10 s window within ±10% of 2:1',
    async () => {
      pool = await startTokenPool('tokens', { short: 2, long: 1 });
      const run = new Run(pool);
      const judged = await backlogged(run, { maxTokens: LONG.maxTokens, startMs: 0 }, 0);
      const ratios = run.windowRatios(judged.from, judged.to, { short: 1, long: 1 });
      const waiting = run.bothWaiting(judged.from, judged.to);
      console.log(
        `tokens 2:1: window ratios short/long ${ratios.map(fmt).join(', ')}; both waiting at ${fmt(waiting)} of the samples; ${run.completions.length} served, ${run.failures} failed`,
      );
      expect(run.failures).toBe(0);
      // The premise: both tenants backlogged (else the other takes the idle share).
      expect(waiting).toBeGreaterThan(0.9);
      for (const ratio of ratios) {
        expect(ratio).toBeGreaterThan(2 * 0.9);
        expect(ratio).toBeLessThan(2 * 1.1);
      }
    },
    (BACKLOG_S + 60) * 1_000,
  );

  it(
    'a client asking for 10x the tokens it gets is charged what it uses: 1:1 within 10 s',
    async () => {
      // The long tenant asks for 1,500 and gets 150 (its first requests are charged 1,500).
      pool = await startTokenPool('tokens', { short: 1, long: 1 }, USES);
      const run = new Run(pool);
      const judged = await backlogged(run, { maxTokens: USES * 10, startMs: 0 }, 0);
      // From 10 s after the start, in 5 s windows.
      const ratios: number[] = [];
      for (let at = 0; at + 5_000 <= judged.to + 1; at += 5_000) {
        const s = run.served(at, at + 5_000);
        ratios.push(s.short / s.long);
      }
      const early = ratios.splice(0, 2);
      const state = await pool.state();
      const mean = state.tenants.find((t) => t.tenant === 'long')?.meanOutputTokens;
      console.log(
        `max_tokens 10x usage: 5 s window ratios short/long ${early.map(fmt).join(', ')} before 10 s, ${ratios.map(fmt).join(', ')} from 10 s; long's mean output ${mean}; ${run.failures} failed`,
      );
      expect(run.failures).toBe(0);
      expect(mean).toBe(USES);
      for (const ratio of ratios) {
        expect(ratio).toBeGreaterThan(0.9);
        expect(ratio).toBeLessThan(1.1);
      }
    },
    (BACKLOG_S + 60) * 1_000,
  );

  it(
    'requests: the same run reports the token ratio fairness in requests gives, and its throughput is within 5% of the tokens run',
    async () => {
      pool = await startTokenPool('requests', { short: 1, long: 1 });
      const run = new Run(pool);
      const judged = await backlogged(run, { maxTokens: LONG.maxTokens, startMs: 0 }, 0);
      const ratios = run.windowRatios(judged.from, judged.to, { short: 1, long: 1 });
      throughputs.requests = run.throughput(judged.from, judged.to);
      const count = (t: TenantName) => run.completions.filter((c) => c.tenant === t).length;
      console.log(
        `requests 1:1: window ratios short/long ${ratios.map(fmt).join(', ')} (requests served ${count('short')} short, ${count('long')} long); ${fmt(throughputs.requests)} tokens/s; tokens run / requests run ${fmt((throughputs.tokens ?? 0) / throughputs.requests)}`,
      );
      // fairgate_service_tokens_total over the replicas: the weighted tokens the clients got.
      const metric = { short: 0, long: 0 };
      for (const gateway of pool.gateways) {
        const text = await (await fetch(`${gateway.url}/metrics`)).text();
        for (const [tenant, value] of sumByLabels(text, 'fairgate_service_tokens_total', [
          'tenant',
        ])) {
          metric[tenant as TenantName] += value;
        }
      }
      const clients = run.served(0, Number.POSITIVE_INFINITY);
      console.log(
        `requests 1:1: fairgate_service_tokens_total short ${metric.short} long ${metric.long} (clients ${clients.short} / ${clients.long})`,
      );
      expect(metric).toEqual(clients);
      expect(run.failures).toBe(0);
      for (const ratio of ratios) expect(ratio).toBeLessThan(0.5);
      expect(throughputs.tokens).toBeDefined();
      expect((throughputs.tokens ?? 0) / throughputs.requests).toBeGreaterThan(0.95);
    },
    (BACKLOG_S + 60) * 1_000,
  );
});
