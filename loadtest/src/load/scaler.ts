import { type AppHandle, type DnsServerHandle, type FlagValues, startSim } from '@fairgate/testkit';
import { request } from 'undici';

/**
 * The autoscale scenario's stand-in for KEDA: it reads the pool's scaling signal
 * (`desired_pods` of GET /admin/capacity, the leader's capacity report: what
 * fairgate_desired_pods exports) every poll, and starts or stops fairgate-sim processes to
 * match it, within [min_pods, max_pods]. The gateways find the pods through DNS only: a new
 * pod is started, then listed; a pod to remove is unlisted first, keeps serving what it
 * holds while the gateways drop it, and is stopped once idle (or after drain_s), as a
 * Kubernetes pod leaves its Service's endpoints before it is terminated.
 */
export interface ScalerOptions {
  /** A gateway replica (any: the report is read from the shared state). */
  gatewayUrl: string;
  adminToken: string;
  dns: DnsServerHandle;
  /** The DNS name the gateways' discovery resolves. */
  name: string;
  /** The port every pod listens on (one address per pod: 127.0.0.2, 127.0.0.3, ...). */
  port: number;
  simArgs: FlagValues;
  minPods: number;
  maxPods: number;
  pollMs: number;
  drainS: number;
  log: (line: string) => void;
}

/** One poll: seconds since the scaler started, the signal read and the pods listed after. */
export interface ScalerSample {
  t: number;
  desired: number | null;
  pods: number;
}

interface Pod {
  host: string;
  sim: AppHandle;
}

/** The loopback address of pod slot `i`. */
export function podHost(i: number): string {
  return `127.0.0.${2 + i}`;
}

export class LocalScaler {
  readonly timeline: ScalerSample[] = [];
  readonly #listed: Pod[];
  readonly #leaving = new Set<Promise<void>>();
  readonly #draining = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> = Promise.resolve();
  #stopped = false;
  #t0 = performance.now();

  /** `pods`: the pods already running and listed. */
  constructor(
    private readonly options: ScalerOptions,
    pods: readonly Pod[],
  ) {
    this.#listed = [...pods];
  }

  get pods(): number {
    return this.#listed.length;
  }

  start(): void {
    this.#t0 = performance.now();
    const loop = () => {
      this.#running = this.pollOnce().catch((error: unknown) =>
        this.options.log(`scaler:   ${error instanceof Error ? error.message : String(error)}`),
      );
      void this.#running.then(() => {
        if (!this.#stopped) this.#timer = setTimeout(loop, this.options.pollMs);
      });
    };
    loop();
  }

  /** Stops polling; pods being drained are stopped now. The listed pods keep running. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
    await Promise.all(this.#leaving);
  }

  /** Every pod the scaler started or was given, listed or not (to stop them at the end). */
  all(): AppHandle[] {
    return this.#listed.map((pod) => pod.sim);
  }

  async pollOnce(): Promise<void> {
    const desired = await this.#signal();
    const { minPods, maxPods } = this.options;
    if (desired !== null) {
      const target = Math.min(maxPods, Math.max(minPods, desired));
      if (target > this.#listed.length) await this.#grow(target);
      else if (target < this.#listed.length) await this.#shrink(target);
    }
    this.timeline.push({
      t: (performance.now() - this.#t0) / 1_000,
      desired,
      pods: this.#listed.length,
    });
  }

  async #signal(): Promise<number | null> {
    const response = await request(`${this.options.gatewayUrl}/admin/capacity`, {
      headers: { authorization: `Bearer ${this.options.adminToken}` },
      signal: AbortSignal.timeout(2_000),
    });
    if (response.statusCode !== 200) {
      await response.body.dump();
      throw new Error(`/admin/capacity answered ${response.statusCode}`);
    }
    const body = (await response.body.json()) as { desired_pods?: unknown };
    return typeof body.desired_pods === 'number' ? body.desired_pods : null;
  }

  async #grow(target: number): Promise<void> {
    const used = new Set([...this.#listed.map((pod) => pod.host), ...this.#draining]);
    const started: Pod[] = [];
    for (let i = 0; this.#listed.length + started.length < target && i < 64; i++) {
      const host = podHost(i);
      if (used.has(host)) continue;
      started.push({
        host,
        sim: await startSim({ host, port: this.options.port, args: this.options.simArgs }),
      });
    }
    this.#listed.push(...started);
    await this.#publish();
    this.options.log(
      `scaler:   ${this.#listed.length} pods (+${started.length}: ${started.map((p) => p.host).join(', ')})`,
    );
  }

  async #shrink(target: number): Promise<void> {
    const removed = this.#listed.splice(target);
    await this.#publish();
    this.options.log(
      `scaler:   ${this.#listed.length} pods (-${removed.length}: ${removed.map((p) => p.host).join(', ')})`,
    );
    for (const pod of removed) {
      this.#draining.add(pod.host);
      const leaving = this.#drain(pod).finally(() => {
        this.#draining.delete(pod.host);
        this.#leaving.delete(leaving);
      });
      this.#leaving.add(leaving);
    }
  }

  /** The gateways stop granting it within a refresh; it finishes what it holds, then stops. */
  async #drain(pod: Pod): Promise<void> {
    const deadline = performance.now() + this.options.drainS * 1_000;
    await new Promise((r) => setTimeout(r, 1_000));
    while (!this.#stopped && performance.now() < deadline) {
      try {
        const response = await request(`${pod.sim.url}/debug/stats`);
        const stats = (await response.body.json()) as { active_requests?: number };
        if ((stats.active_requests ?? 0) === 0) break;
      } catch {
        break;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    await pod.sim.stop();
  }

  #publish(): Promise<void> {
    return this.options.dns.setRecords(
      this.options.name,
      this.#listed.map((pod) => pod.host),
    );
  }
}
