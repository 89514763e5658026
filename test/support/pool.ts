import type { AdminState } from '@fairgate/gateway';
import { parsePrometheusText } from '@fairgate/openai';
import {
  type AppHandle,
  type FlagValues,
  type RedisHandle,
  startGatewayProcess,
  startRedis,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';

/**
 * A whole pool for cross-process tests: one redis-server, simulated pods and several gateway
 * replicas sharing it, plus a real HTTP client and the pool-wide checks every end-to-end test
 * ends with (conservation of outcomes, nothing left in flight).
 */
export interface PoolOptions {
  replicas?: number;
  /** fairgate-sim flags per pod (default: two pods, alpha 10 ms, zero token cost). */
  sims?: FlagValues[];
  /** Per-pod cap the gateway keeps (default 64). */
  podCap?: number;
  budget?: number;
  tenants: Array<Record<string, unknown>>;
  scheduler?: Record<string, unknown>;
  /** Further top-level config sections (admission, saturation, controller, leader...). */
  sections?: Record<string, unknown>;
  /** Further keys of the `redis:` section (on_outage, command_timeout_ms...). */
  redis?: Record<string, unknown>;
  /**
   * The gateways' Redis instead of a private redis-server (Sentinel, Cluster): the section
   * is then `redis` alone, and the pool's redis handle is a private server nobody uses.
   */
  redisSection?: Record<string, unknown>;
}

export interface Pool {
  redis: RedisHandle;
  sims: AppHandle[];
  gateways: AppHandle[];
  /** The gateways' config file (its watcher hot-reloads edits). */
  configPath: string;
  /** GET /admin/state of replica `index` (default 0). */
  state(index?: number): Promise<AdminState>;
  stop(): Promise<void>;
}

/** The body of GET /admin/state (the gateway's own type). */
export type { AdminState };

/** One tenant's counter rows of `/admin/state` (every band and class) summed by `pick`. */
export function tenantTotal(
  state: AdminState,
  tenant: string,
  pick: (row: AdminState['counters'][number]) => number,
): number {
  return state.counters
    .filter((row) => row.tenant === tenant)
    .reduce((total, row) => total + pick(row), 0);
}

export const SIM_MODEL = 'sim-model';

export async function startPool(options: PoolOptions): Promise<Pool> {
  const redis = await startRedis();
  const simFlags = options.sims ?? [{}, {}];
  const sims = await Promise.all(
    simFlags.map((flags) =>
      startSim({
        args: { 'alpha-ms': 10, 'beta-ms': 0, 'gamma-ms': 0, model: SIM_MODEL, ...flags },
      }),
    ),
  );
  const config = writeGatewayConfig({
    ...(options.redisSection
      ? { redis: { ...options.redisSection, ...options.redis } }
      : { redisUrl: redis.url, ...(options.redis ? { redis: options.redis } : {}) }),
    budget: options.budget ?? 16,
    pods: sims.map((sim, i) => ({ name: `pod-${i}`, url: sim.url, cap: options.podCap ?? 64 })),
    tenants: options.tenants,
    scheduler: { heartbeat_ms: 500, ...options.scheduler },
    sections: { leader: { lease_ttl_ms: 1_000, renew_ms: 300 }, ...options.sections },
  });
  const gateways = await Promise.all(
    Array.from({ length: options.replicas ?? 2 }, (_, i) =>
      startGatewayProcess({ config, replicaId: `replica-${i + 1}` }),
    ),
  );
  const state = async (index = 0): Promise<AdminState> => {
    const gateway = gateways[index];
    if (!gateway) throw new Error(`no replica ${index}`);
    const response = await fetch(`${gateway.url}/admin/state`, {
      headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
    });
    if (!response.ok) throw new Error(`/admin/state answered ${response.status}`);
    return (await response.json()) as AdminState;
  };
  return {
    redis,
    sims,
    gateways,
    configPath: config,
    state,
    async stop() {
      await stopAll();
      await redis.stop();
    },
  };
}

export interface GenerateOptions {
  /** x-slo-class */
  sloClass?: string;
  /** x-slo-ttft-ms */
  ttftMs?: number;
  maxTokens?: number;
  /** Prompt text (4 characters per token in the shared estimate). */
  content?: string;
  stream?: boolean;
  signal?: AbortSignal;
  /** The endpoint: chat (default), or embeddings (of `content`; no stream, no output). */
  endpoint?: 'chat' | 'embeddings';
}

export interface GenerateResult {
  status: number;
  dropReason: string | null;
  retryAfter: string | null;
  /** ms since the request was sent: first body bytes (streams) / whole body (JSON). */
  ttftMs: number | null;
  endMs: number;
  /** performance.now() when the request was sent and when it ended. */
  sentAt: number;
  endedAt: number;
  /** Error code of an SSE error event that ended a started stream. */
  streamError: string | null;
  body: string;
}

/** One real HTTP request through a gateway; never throws for HTTP errors or resets. */
export async function generate(
  url: string,
  apiKey: string,
  options: GenerateOptions = {},
): Promise<GenerateResult> {
  const sentAt = performance.now();
  const headers: Record<string, string> = {
    authorization: `Bearer ${apiKey}`,
    'content-type': 'application/json',
  };
  if (options.sloClass) headers['x-slo-class'] = options.sloClass;
  if (options.ttftMs !== undefined) headers['x-slo-ttft-ms'] = String(options.ttftMs);
  let ttftMs: number | null = null;
  let status = 0;
  let dropReason: string | null = null;
  let retryAfter: string | null = null;
  let body = '';
  try {
    const embeddings = options.endpoint === 'embeddings';
    const response = await fetch(`${url}/v1/${embeddings ? 'embeddings' : 'chat/completions'}`, {
      method: 'POST',
      headers,
      body: JSON.stringify(
        embeddings
          ? { model: SIM_MODEL, input: options.content ?? 'hi' }
          : {
              model: SIM_MODEL,
              messages: [{ role: 'user', content: options.content ?? 'hi' }],
              max_tokens: options.maxTokens ?? 4,
              stream: options.stream ?? false,
            },
      ),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    status = response.status;
    dropReason = response.headers.get('x-fairgate-drop-reason');
    retryAfter = response.headers.get('retry-after');
    if (response.body) {
      const decoder = new TextDecoder();
      for await (const chunk of response.body) {
        if (ttftMs === null) ttftMs = performance.now() - sentAt;
        body += decoder.decode(chunk, { stream: true });
      }
    }
  } catch {
    if (status === 0) status = -1; // connection failure or abort before the headers
  }
  const endedAt = performance.now();
  const streamError = /"code":"([a-z_]+)"/.exec(body.includes('"error"') ? body : '')?.[1] ?? null;
  return {
    status,
    dropReason,
    retryAfter,
    ttftMs,
    endMs: endedAt - sentAt,
    sentAt,
    endedAt,
    streamError: options.stream ? streamError : null,
    body,
  };
}

/**
 * Open-loop arrivals at `ratePerSecond` for `durationMs` (evenly spaced, bounded by count
 * and time); resolves with every result once all requests ended.
 */
export async function openLoop(
  ratePerSecond: number,
  durationMs: number,
  send: (index: number) => Promise<GenerateResult>,
): Promise<GenerateResult[]> {
  const count = Math.floor((ratePerSecond * durationMs) / 1_000);
  const start = performance.now();
  const pending: Promise<GenerateResult>[] = [];
  for (let i = 0; i < count; i++) {
    const due = start + (i * 1_000) / ratePerSecond;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    pending.push(send(i));
  }
  return Promise.all(pending);
}

/**
 * Most generation requests open at once across all sims, from the intervals each sim
 * recorded on the machine-wide monotonic clock (exact, not sampled); with a window
 * [fromNs, toNs] of process.hrtime.bigint() times, only the moments inside it count.
 */
export async function poolPeakConcurrency(
  sims: readonly AppHandle[],
  window?: { fromNs: bigint; toNs: bigint },
): Promise<number> {
  const events: Array<[bigint, number]> = [];
  for (const sim of sims) {
    const { intervals } = (await (await fetch(`${sim.url}/debug/requests`)).json()) as {
      intervals: Array<[string, string]>;
    };
    for (const [start, end] of intervals) events.push([BigInt(start), 1], [BigInt(end), -1]);
  }
  // At equal times an end sorts before a start: touching intervals do not overlap.
  events.sort((a, b) => (a[0] === b[0] ? a[1] - b[1] : a[0] < b[0] ? -1 : 1));
  let open = 0;
  let peak = 0;
  for (const [at, delta] of events) {
    open += delta;
    const inside = !window || (at >= window.fromNs && at <= window.toNs);
    if (inside) peak = Math.max(peak, open);
  }
  return peak;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Waits (bounded, 5 s) until at least `count` requests wait in the pool's queues, or run
 * when `what` is 'inflight'. Tests that need a known arrival order send the next request only
 * after this returns: a fixed sleep lets a loaded machine reorder two replicas' arrivals.
 */
export async function waitUntilPool(
  pool: Pool,
  count: number,
  what: 'waiting' | 'inflight' = 'waiting',
): Promise<void> {
  const deadline = performance.now() + 5_000;
  while ((await pool.state())[what] < count) {
    if (performance.now() > deadline) throw new Error(`${count} requests never ${what}`);
    await sleep(5);
  }
}

/** One metric summed over every label set, as a process's /metrics shows it now. */
export async function metricSum(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return sumByLabels(text, name, []).get('') ?? 0;
}

/**
 * One metric of a /metrics text summed per value of `labels` (the key: their values joined
 * by '|', '' for none), read with the gateway's own exposition parser.
 */
export function sumByLabels(
  text: string,
  name: string,
  labels: readonly string[],
): Map<string, number> {
  const totals = new Map<string, number>();
  for (const sample of parsePrometheusText(text)) {
    if (sample.name !== name) continue;
    const key = labels.map((label) => sample.labels[label] ?? '').join('|');
    totals.set(key, (totals.get(key) ?? 0) + sample.value);
  }
  return totals;
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/**
 * The end of every end-to-end test: waits until nothing waits or runs pool-wide, then checks
 * offered = admitted + rejected and admitted = completed + expired + cancelled + evicted +
 * upstream_error, exactly. Returns the final state for further checks. The state is read
 * from replica `replica` (default 0; another one when replica 0 was stopped).
 */
export async function expectConserved(
  pool: Pool,
  timeoutMs = 10_000,
  replica = 0,
): Promise<AdminState> {
  const deadline = Date.now() + timeoutMs;
  let state = await pool.state(replica);
  while (state.inflight + state.waiting > 0 && Date.now() < deadline) {
    await sleep(50);
    state = await pool.state(replica);
  }
  const live = state.inflight + state.waiting;
  const violations = state.conservation_violations;
  if (live !== 0 || violations.length > 0) {
    throw new Error(
      `pool not conserved: live ${live}, violations: ${violations.join('; ') || 'none'}`,
    );
  }
  return state;
}

/** Sum of one drop reason over the pool, optionally for one tenant. */
export function dropsOf(state: AdminState, reason: string, tenant?: string): number {
  return state.drops
    .filter((d) => d.reason === reason && (tenant === undefined || d.tenant === tenant))
    .reduce((sum, d) => sum + d.count, 0);
}

/** Count of results per status (and drop reason for 429s): `{200: 5, '429 rate_limited': 3}`. */
export function tally(results: readonly GenerateResult[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of results) {
    const key = r.status === 429 ? `429 ${r.dropReason}` : String(r.status);
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}
