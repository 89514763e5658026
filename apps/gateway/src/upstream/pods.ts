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

  #createState(config: PodConfig): PodState {
    const pool = new Pool(config.url, {
      connections: this.upstream.keepalive_connections,
      connect: { timeout: this.upstream.connect_timeout_ms },
      headersTimeout: this.upstream.headers_timeout_ms,
      bodyTimeout: this.upstream.body_timeout_ms,
      keepAliveTimeout: 30_000,
    });
    return { config, pool, healthy: true, consecutiveFailures: 0, inflight: 0 };
  }

  get(name: string): PodState | undefined {
    return this.#pods.get(name);
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

  /** A healthy pod other than `exclude`, least loaded from this replica's view. */
  alternative(exclude: string): PodState | undefined {
    let best: PodState | undefined;
    for (const pod of this.#pods.values()) {
      if (pod.config.name === exclude || !pod.healthy) continue;
      if (!best || pod.inflight < best.inflight) best = pod;
    }
    return best;
  }

  /** Applies a reloaded pod list: new pods are added, removed ones closed, changed URLs reconnected. */
  update(pods: readonly PodConfig[]): void {
    const next = new Set(pods.map((p) => p.name));
    for (const [name, state] of this.#pods) {
      if (!next.has(name)) {
        this.#pods.delete(name);
        void state.pool.close();
      }
    }
    for (const config of pods) {
      const current = this.#pods.get(config.name);
      if (current && current.config.url === config.url) {
        (current as { config: PodConfig }).config = config;
      } else {
        if (current) void current.pool.close();
        this.#pods.set(config.name, this.#createState(config));
      }
    }
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

  async checkOnce(): Promise<void> {
    await Promise.all(
      this.all.map(async (pod) => {
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
