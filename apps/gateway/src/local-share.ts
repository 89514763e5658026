import type { FairgateConfig } from '@fairgate/config';
import { LocalScheduler, type Scheduler } from '@fairgate/scheduler';
import type { OutageMonitor } from './redis-outage.js';
import { schedulerPods, schedulerSettings, schedulerTenants } from './scheduler-setup.js';
import { GrantBroker } from './slot/grant-broker.js';
import { HeldLeases } from './slot/held-leases.js';
import type { Lane } from './slot/lane.js';

/** What the request path and /readyz need to know of a Redis outage. */
export interface OutageState {
  /** True while this replica cannot reach Redis. */
  readonly down: boolean;
  readonly mode: 'reject' | 'local_share';
  /** The local share's lane during an outage in local_share mode, else undefined. */
  localShare(): Lane | undefined;
  /** Its budget, the view it came from and what it holds (for /readyz). */
  localShareInfo(): LocalShareInfo | undefined;
}

export interface LocalShareOptions {
  replica: string;
  config: () => FairgateConfig;
  /** The shared (Redis) lane: its view of the pool, and where requests go back to. */
  shared: Scheduler;
  sharedLeases: HeldLeases;
  healthy: (pod: string) => boolean;
  log: (line: string) => void;
  /** How often the pool's budget and live replicas are read while Redis is up (ms). */
  viewEveryMs?: number;
}

/** The pool as this replica last saw it in Redis: what its share is computed from. */
export interface PoolView {
  budget: number;
  liveReplicas: number;
}

/** What /readyz shows of the local share while it admits. */
export interface LocalShareInfo {
  /** This replica's share of the budget. */
  budget: number;
  /** The pool as last seen in Redis. */
  view: PoolView;
  /** Redis grants of this replica still running when the share opened (they hold slots). */
  mirrored: number;
  inflight: number;
  waiting: number;
}

/** This replica's share of the budget during an outage: floor(budget / live replicas). */
export function localShareBudget(view: PoolView): number {
  return Math.floor(view.budget / Math.max(1, view.liveReplicas));
}

/**
 * redis.on_outage: local_share. While Redis is unreachable this replica admits requests on
 * an embedded LocalScheduler (same settings, tenants and weights, so DRR order holds within
 * the replica) whose budget is its share of the pool's last known budget. Requests granted
 * by one lane and still running when the lane changes are mirrored into the other as
 * placeholders that hold a slot until they end, so the pods never see the two lanes' grants
 * stacked: at the outage's start this replica's Redis grants fill its local share first, and
 * when Redis is back the local grants still running take budget in Redis first.
 *
 * Over-admission bound (docs/architecture.md): the local shares sum to at most the budget
 * when the view is current; what can exceed it is a replica holding more Redis grants than
 * its share at the outage's start (they run to their end), a mirrored request that Redis
 * refuses at hand-back, and replicas that joined after the last view (they have no view and
 * answer 503 instead).
 */
export class LocalShare {
  #view: PoolView | undefined;
  #viewTimer: NodeJS.Timeout | undefined;
  /** The lane admitting now (during an outage), undefined otherwise. */
  #open: Lane | undefined;
  #openedWith: { budget: number; view: PoolView; mirrored: number } | undefined;
  /** Lanes closed with requests still running (released into them as they end). */
  readonly #draining = new Set<Lane>();
  #closed = false;

  constructor(private readonly options: LocalShareOptions) {
    this.#refreshView();
  }

  get view(): PoolView | undefined {
    return this.#view;
  }

  /** The lane to admit into during the outage (undefined before any view of the pool). */
  lane(): Lane | undefined {
    return this.#open;
  }

  info(): LocalShareInfo | undefined {
    const lane = this.#open;
    if (!lane || !this.#openedWith) return undefined;
    return { ...this.#openedWith, inflight: lane.leases.size, waiting: lane.broker.waiting };
  }

  /** The outage began: start a local lane from the last view. */
  open(): void {
    if (this.#open || this.#closed || !this.#view) {
      if (!this.#view) this.options.log('fairgate: local share: no view of the pool yet: 503');
      return;
    }
    const config = this.options.config();
    const budget = localShareBudget(this.#view);
    const scheduler = new LocalScheduler();
    const { replica } = this.options;
    const leases = new HeldLeases({
      scheduler,
      replica,
      heartbeatMs: config.scheduler.heartbeat_ms,
    });
    const broker = new GrantBroker({
      scheduler,
      leases,
      replica,
      tickMs: config.scheduler.tick_ms,
    });
    const lane: Lane = { scheduler, broker, leases };
    // The LocalScheduler answers at once: configured before the first request can arrive.
    void scheduler.configure({ ...schedulerSettings(config), initialBudget: budget });
    void scheduler.upsertTenants(schedulerTenants(config));
    void scheduler.upsertPods(schedulerPods(config, this.options.healthy));
    leases.start();
    const mirrored = mirror(this.options.sharedLeases, lane);
    this.#open = lane;
    this.#openedWith = { budget, view: this.#view, mirrored };
    this.options.log(
      `fairgate: local share: budget ${budget} (pool budget ${this.#view.budget} / ${this.#view.liveReplicas} live replicas), ${mirrored} Redis grants still running`,
    );
  }

  /** Redis is back: new requests go to it; the local lane drains, mirrored into Redis. */
  close(): Promise<void> {
    const lane = this.#open;
    this.#open = undefined;
    if (lane) {
      mirror(lane.leases, { scheduler: this.options.shared, leases: this.options.sharedLeases });
      this.#draining.add(lane);
    }
    this.#refreshView();
    return this.#reapDrained();
  }

  /** Stops the view refresh and every lane (gateway shutdown). */
  async stop(): Promise<void> {
    this.#closed = true;
    if (this.#viewTimer) clearTimeout(this.#viewTimer);
    await this.close();
    for (const lane of this.#draining) await closeLane(lane);
    this.#draining.clear();
  }

  async #reapDrained(): Promise<void> {
    for (const lane of this.#draining) {
      if (lane.leases.size === 0 && lane.broker.waiting === 0) {
        this.#draining.delete(lane);
        await closeLane(lane);
      }
    }
  }

  #refreshView(): void {
    if (this.#closed) return;
    if (this.#viewTimer) clearTimeout(this.#viewTimer);
    this.#viewTimer = setTimeout(
      () => {
        void this.#readView().finally(() => this.#refreshView());
      },
      this.#view ? (this.options.viewEveryMs ?? 1_000) : 0,
    );
    this.#viewTimer.unref();
  }

  async #readView(): Promise<void> {
    void this.#reapDrained();
    if (this.#open) return;
    try {
      const snapshot = await this.options.shared.snapshot();
      const liveReplicas = snapshot.replicas.filter(
        (r) => r.livenessExpiresAtMs > snapshot.nowMs,
      ).length;
      this.#view = { budget: snapshot.budget, liveReplicas };
    } catch {
      // Redis away: keep the last view.
    }
  }
}

async function closeLane(lane: Lane): Promise<void> {
  lane.broker.close();
  lane.leases.close();
  await lane.scheduler.close();
}

/**
 * Registers the requests `from` holds as placeholders in `into` (each takes a slot there, or
 * waits for one, on its own pod) and releases each placeholder when its request ends.
 * Returns how many were registered.
 */
function mirror(from: HeldLeases, into: Pick<Lane, 'scheduler' | 'leases'>): number {
  /** Each placeholder's enqueue: its release is sent only after it, or it could overtake it. */
  const registered = new Map<string, Promise<unknown>>();
  for (const [id, held] of from.held()) {
    if (!held.request) continue;
    into.leases.track(id, held.pod, held.request);
    registered.set(
      id,
      into.scheduler.enqueue({ ...held.request, podHint: held.pod }).catch(() => {}),
    );
  }
  from.onUntrack = (id) => {
    if (!into.leases.holds(id)) return;
    into.leases.untrack(id);
    const release = () => into.scheduler.release(id, { outcome: 'completed' }).catch(() => {});
    const enqueue = registered.get(id);
    registered.delete(id);
    void (enqueue ? enqueue.then(release) : release());
  };
  return registered.size;
}

/** The outage state the request path and /readyz read. */
export function outageState(
  monitor: OutageMonitor,
  localShare: () => LocalShare | undefined,
): OutageState {
  return {
    get down() {
      return monitor.down;
    },
    mode: monitor.mode,
    localShare: () => (monitor.down ? localShare()?.lane() : undefined),
    localShareInfo: () => (monitor.down ? localShare()?.info() : undefined),
  };
}
