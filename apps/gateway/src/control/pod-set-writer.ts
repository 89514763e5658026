import type { Fence, Scheduler } from '@fairgate/scheduler';
import type { PoolDiscovery } from '../discovery/pool-discovery.js';
import type { PodPool } from '../upstream/pods.js';
import type { LeaderElection } from './election.js';

export interface PodSetWriterOptions {
  scheduler: Pick<Scheduler, 'syncPods'>;
  election: Pick<LeaderElection, 'holds'>;
  discovery: PoolDiscovery;
  /** The leader's own pods: a new pod joins with the health its first check found. */
  pods: PodPool;
  /** How often the set is written again while nothing changes (discovery.refresh_ms). */
  everyMs: () => number;
  onError: (error: unknown) => void;
  onRejected: () => void;
}

/**
 * The leader's duty of writing the pool's discovered pods into the shared state (syncPods,
 * fenced): at once when its discovery reports a change, and again every refresh, which
 * restores the set after Redis lost it and deletes pods that left once their requests have
 * ended. One writer means one pod set: every replica's grants, the budget (cap x live pods)
 * and the prefix index follow the same pods, whatever each replica's own DNS answered.
 * Writes run one at a time, each with the set as it is when it starts.
 */
export class PodSetWriter {
  #fence: Fence | undefined;
  #timer: NodeJS.Timeout | undefined;
  #queued = false;
  #chain: Promise<void> = Promise.resolve();
  readonly #unsubscribe: () => void;

  constructor(private readonly options: PodSetWriterOptions) {
    this.#unsubscribe = options.discovery.onChange(() => this.#request());
  }

  lead(fence: Fence): void {
    this.stepDown();
    this.#fence = fence;
    this.#request();
    const tick = () => {
      this.#request();
      this.#timer = setTimeout(tick, this.options.everyMs()).unref();
    };
    this.#timer = setTimeout(tick, this.options.everyMs()).unref();
  }

  stepDown(): void {
    this.#fence = undefined;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  async stop(): Promise<void> {
    this.stepDown();
    this.#unsubscribe();
    await this.#chain;
  }

  /** Queues one write (a write already queued covers this request too). */
  #request(): void {
    const fence = this.#fence;
    if (!fence || this.#queued) return;
    this.#queued = true;
    this.#chain = this.#chain.then(async () => {
      this.#queued = false;
      await this.#write(fence).catch(this.options.onError);
    });
  }

  async #write(fence: Fence): Promise<void> {
    const { discovery, pods, election, scheduler } = this.options;
    const listed = discovery.pods;
    // Before its source's first answer the leader knows nothing: writing an empty set
    // would remove every pod.
    if (!listed || !election.holds(fence)) return;
    const written = await scheduler.syncPods(
      fence,
      listed.map((pod) => ({
        name: pod.name,
        cap: pod.cap,
        healthy: pods.get(pod.name)?.healthy ?? false,
      })),
    );
    if (!written) this.options.onRejected();
  }
}
