import type { PodConfig, UpstreamConfig } from '@fairgate/config';
import { Pool } from 'undici';

export interface PodState {
  readonly config: PodConfig;
  readonly pool: Pool;
  healthy: boolean;
  consecutiveFailures: number;
  /** Requests this replica has in flight on the pod (local view, for retries). */
  inflight: number;
}

export interface PodPoolEvents {
  onHealthChange?: (pod: string, healthy: boolean) => void;
  /**
   * A pod this replica does not know yet, named in a grant: the leader's discovery saw it
   * first (pool-discovery.ts). Its config, or undefined when the name is no pod of the pool.
   */
  resolveUnknown?: (pod: string) => PodConfig | undefined;
}

/**
 * The upstream pods: one keep-alive connection pool each, active health checks
 * (GET /health every health_interval_ms; ejected after `unhealthy_after`
 * consecutive failures, readmitted on the first success) and passive ones
 * (a connection failure on a real request counts as a failed check).
 */
export class PodPool {
  readonly #pods = new Map<string, PodState>();
  #timer: NodeJS.Timeout | undefined;

  constructor(
    pods: readonly PodConfig[],
    private readonly upstream: UpstreamConfig,
    private readonly events: PodPoolEvents = {},
  ) {
    for (const config of pods) this.#pods.set(config.name, this.#createState(config));
  }

  #createState(config: PodConfig, healthy = true): PodState {
    const pool = new Pool(config.url, {
      connections: this.upstream.keepalive_connections,
      connect: { timeout: this.upstream.connect_timeout_ms },
      headersTimeout: this.upstream.headers_timeout_ms,
      bodyTimeout: this.upstream.body_timeout_ms,
      keepAliveTimeout: 30_000,
    });
    return { config, pool, healthy, consecutiveFailures: 0, inflight: 0 };
  }

  get(name: string): PodState | undefined {
    return this.#pods.get(name);
  }

  /**
   * The pod a grant names: a known one, or one the leader's discovery listed before this
   * replica's did (added now, and dropped again by this replica's next discovery read if
   * that does not list it).
   */
  granted(name: string): PodState | undefined {
    const known = this.#pods.get(name);
    if (known) return known;
    const config = this.events.resolveUnknown?.(name);
    if (!config) return undefined;
    const state = this.#createState(config);
    this.#pods.set(name, state);
    return state;
  }

  get all(): PodState[] {
    return [...this.#pods.values()];
  }

  healthyPods(): PodState[] {
    return this.all.filter((pod) => pod.healthy);
  }

  /** Same as `healthyPods().length > 0`, without building arrays (per-request check). */
  hasHealthyPod(): boolean {
    for (const pod of this.#pods.values()) if (pod.healthy) return true;
    return false;
  }

  /**
   * A healthy pod other than `exclude` (and one `accept` takes, when given), least loaded
   * from this replica's view.
   */
  alternative(exclude: string, accept?: (pod: PodState) => boolean): PodState | undefined {
    let best: PodState | undefined;
    for (const pod of this.#pods.values()) {
      if (pod.config.name === exclude || !pod.healthy) continue;
      if (accept && !accept(pod)) continue;
      if (!best || pod.inflight < best.inflight) best = pod;
    }
    return best;
  }

  /**
   * Applies a new pod list (a reloaded config, a discovery read): new pods are added,
   * removed ones closed once their requests end, changed URLs reconnected. New pods start
   * healthy unless `unchecked` (discovered ones: healthy after their first check). Returns
   * the names added.
   */
  update(pods: readonly PodConfig[], options: { unchecked?: boolean } = {}): string[] {
    const next = new Set(pods.map((p) => p.name));
    for (const [name, state] of this.#pods) {
      if (!next.has(name)) {
        this.#pods.delete(name);
        // undici's close lets the requests in flight finish.
        void state.pool.close();
      }
    }
    const added: string[] = [];
    for (const config of pods) {
      const current = this.#pods.get(config.name);
      if (current && current.config.url === config.url) {
        (current as { config: PodConfig }).config = config;
      } else {
        if (current) void current.pool.close();
        this.#pods.set(config.name, this.#createState(config, !options.unchecked));
        added.push(config.name);
      }
    }
    return added;
  }

  /** Records a check result; returns true when the pod's health flipped. */
  recordHealth(name: string, ok: boolean): boolean {
    const pod = this.#pods.get(name);
    if (!pod) return false;
    const was = pod.healthy;
    if (ok) {
      pod.consecutiveFailures = 0;
      pod.healthy = true;
    } else {
      pod.consecutiveFailures++;
      if (pod.consecutiveFailures >= this.upstream.unhealthy_after) pod.healthy = false;
    }
    if (was !== pod.healthy) this.events.onHealthChange?.(name, pod.healthy);
    return was !== pod.healthy;
  }

  /** Health-checks every pod now, or the ones named. */
  async checkOnce(names?: readonly string[]): Promise<void> {
    const pods = names ? names.flatMap((name) => this.#pods.get(name) ?? []) : this.all;
    await Promise.all(
      pods.map(async (pod) => {
        let ok = false;
        try {
          const response = await pod.pool.request({
            method: 'GET',
            path: '/health',
            headersTimeout: this.upstream.health_interval_ms,
            bodyTimeout: this.upstream.health_interval_ms,
          });
          await response.body.dump();
          ok = response.statusCode === 200;
        } catch {
          ok = false;
        }
        this.recordHealth(pod.config.name, ok);
      }),
    );
  }

  startHealthChecks(): void {
    if (this.#timer) return;
    const loop = async () => {
      await this.checkOnce();
      if (this.#timer) this.#timer = setTimeout(loop, this.upstream.health_interval_ms).unref();
    };
    this.#timer = setTimeout(loop, 0).unref();
  }

  async close(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await Promise.all(this.all.map((pod) => pod.pool.close().catch(() => {})));
  }
}
