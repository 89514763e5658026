import type { AdminState } from '@fairgate/gateway';
import {
  type AppHandle,
  sha256Hex,
  startGatewayProcess,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { percentile } from './pool.js';

/**
 * Shared pieces of the controller's cross-process tests: gateways with a `controller:`
 * section (set through FAIRGATE__ environment overrides), a closed-loop streaming load, and
 * a recorder of the controller's trajectory read from /admin/state.
 */
export interface ControllerEnv {
  target_p99_ttft_s: number;
  tick_s?: number;
  window_s?: number;
  cap_per_worker?: number;
  cap_per_worker_min?: number;
  cap_per_worker_max?: number;
  cooldown_ticks?: number;
  min_samples?: number;
}

export function controllerEnv(
  controller: ControllerEnv,
  leader?: { lease_ttl_ms?: number; renew_ms?: number },
) {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(controller)) {
    if (value !== undefined) env[`FAIRGATE__CONTROLLER__${key.toUpperCase()}`] = String(value);
  }
  for (const [key, value] of Object.entries(leader ?? {})) {
    if (value !== undefined) env[`FAIRGATE__LEADER__${key.toUpperCase()}`] = String(value);
  }
  return env;
}

/** One tenant, standard class (SLO-protected), a tight queue and a short queue TTL. */
export function controllerGatewayConfig(
  redisUrl: string,
  sims: AppHandle[],
  queueTtlMs: number,
): string {
  return writeGatewayConfig({
    redisUrl,
    budget: 8,
    pods: sims.map((sim, i) => ({ name: `pod-${i}`, url: sim.url, cap: 10_000 })),
    // Trap 2 of docs/controller.md: a tight queue and a queue TTL far below the SLO, so the
    // TTFT the controller reads is what the pods do, not how long the queue is.
    scheduler: { queue_ttl_ms: queueTtlMs, heartbeat_ms: 500 },
    tenants: [
      {
        id: 'paying',
        api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
        default_class: 'standard',
        queue_max: 4,
      },
    ],
  });
}

export async function startControlledGateways(
  config: string,
  replicas: string[],
  env: Record<string, string>,
): Promise<AppHandle[]> {
  return Promise.all(replicas.map((replicaId) => startGatewayProcess({ config, replicaId, env })));
}

export interface LoadCounters {
  completed: number;
  rejected: number;
  failed: number;
}

/** Time to first token as the client saw it: from sending to the first content chunk. */
export interface ClientTtft {
  /** performance.now() when the first token arrived. */
  at: number;
  ms: number;
}

/**
 * Closed-loop streaming clients spread over the gateways: each keeps one request open,
 * backs off a little after a 429 (as a well-behaved client does), until `control.stop`.
 * `ttfts` holds every completed request's time to first token, measured here.
 */
export function closedLoopLoad(
  gateways: AppHandle[] | (() => AppHandle[]),
  clients: number,
  control: { stop: boolean },
  maxTokens = 8,
): { done: Promise<void>; counters: LoadCounters; ttfts: ClientTtft[] } {
  const counters: LoadCounters = { completed: 0, rejected: 0, failed: 0 };
  const ttfts: ClientTtft[] = [];
  const live = typeof gateways === 'function' ? gateways : () => gateways;
  const worker = async (index: number) => {
    let sent = index;
    while (!control.stop) {
      const choices = live();
      const gateway = choices[sent++ % choices.length] as AppHandle;
      try {
        const sentAt = performance.now();
        const response = await fetch(`${gateway.url}/v1/chat/completions`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${TEST_KEYS.paying}`,
            'content-type': 'application/json',
          },
          body: JSON.stringify({
            model: 'sim-model',
            messages: [{ role: 'user', content: 'hi' }],
            max_tokens: maxTokens,
            stream: true,
          }),
        });
        const firstTokenAt = await firstContentAt(response);
        if (response.ok) {
          counters.completed += 1;
          if (firstTokenAt !== undefined)
            ttfts.push({ at: firstTokenAt, ms: firstTokenAt - sentAt });
        } else if (response.status === 429) {
          counters.rejected += 1;
          await sleep(300 + Math.random() * 400);
        } else counters.failed += 1;
      } catch {
        counters.failed += 1;
        await sleep(100);
      }
    }
  };
  const done = Promise.all(Array.from({ length: clients }, (_, i) => worker(i))).then(() => {});
  return { done, counters, ttfts };
}

/** Reads the whole body; returns when the first SSE chunk with content arrived. */
async function firstContentAt(response: Response): Promise<number | undefined> {
  if (!response.body) return undefined;
  const decoder = new TextDecoder();
  let firstAt: number | undefined;
  let seen = '';
  for await (const chunk of response.body) {
    if (firstAt !== undefined) continue;
    seen += decoder.decode(chunk, { stream: true });
    if (seen.includes('"content"')) firstAt = performance.now();
  }
  return firstAt;
}

/** p99 of the client-measured TTFT (seconds) of the first tokens in [from, to). */
export function clientP99S(ttfts: readonly ClientTtft[], from: number, to: number): number | null {
  const window = ttfts.filter((t) => t.at >= from && t.at < to).map((t) => t.ms);
  return window.length === 0 ? null : percentile(window, 99) / 1_000;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The body of GET /admin/state (the gateway's own type). */
export type { AdminState };

export async function adminState(gateway: AppHandle): Promise<AdminState> {
  const response = await fetch(`${gateway.url}/admin/state`, {
    headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
    signal: AbortSignal.timeout(5_000),
  });
  if (!response.ok) throw new Error(`/admin/state: ${response.status}`);
  return (await response.json()) as AdminState;
}

export type Action = AdminState['controller']['actions'][number];

/** Collects every controller action (by tick) by polling /admin/state of live gateways. */
export class TrajectoryRecorder {
  readonly actions = new Map<number, Action & { writer: string }>();
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly gateways: () => AppHandle[]) {}

  start(intervalMs = 500): void {
    const poll = async () => {
      for (const gateway of this.gateways()) {
        try {
          const state = await adminState(gateway);
          const writer = state.controller.written_by?.replica ?? '?';
          for (const action of state.controller.actions) {
            if (!this.actions.has(action.tick))
              this.actions.set(action.tick, { ...action, writer });
          }
          break;
        } catch {
          // a gateway that was just killed: ask the next one
        }
      }
      this.#timer = setTimeout(poll, intervalMs);
    };
    void poll();
  }

  stop(): void {
    if (this.#timer) clearTimeout(this.#timer);
  }

  ordered(): Array<Action & { writer: string }> {
    return [...this.actions.values()].sort((a, b) => a.tick - b.tick);
  }

  /** `tick p99 cap` lines for the test log and the closing note. */
  format(): string {
    return this.ordered()
      .map((a) => {
        const p99 = typeof a.p99S === 'number' ? a.p99S.toFixed(3) : String(a.p99S);
        return `tick ${a.tick}\tp99 ${p99}\tcap ${a.capBefore}->${a.capAfter}\tbudget ${a.budget}\t${a.kind}\t${a.code}\tpeak ${a.windowPeak}\tn ${a.samples}`;
      })
      .join('\n');
  }
}
