import type { RedisConnection } from '@fairgate/scheduler';
import { TENANT_CHANNEL, type TenantSnapshot, type TenantStore } from './tenant-store.js';

export interface TenantViewOptions {
  store: TenantStore;
  /** A connection of its own for SUBSCRIBE (a subscribed connection runs no other command). */
  subscriber: RedisConnection;
  /** Called after a reload that changed the version (not for the first load). */
  onChange: (snapshot: TenantSnapshot) => void;
  log: (line: string) => void;
  /** How often the version is read when no message came (the staleness bound). */
  pollMs?: number;
  /** How often the keys' last use is written. */
  touchMs?: number;
}

const EMPTY: TenantSnapshot = { version: 0, tenants: new Map(), keys: new Map() };

/**
 * This replica's copy of the run-time tenants and keys (tenant-store.ts). Requests read
 * the copy, never Redis. A write anywhere publishes on `fg-tenants:changed`, and the copy
 * reloads at once; the version is also read every `pollMs` (1 s), so a lost message (a
 * subscriber reconnecting) delays a change by at most that much plus one load. While Redis
 * is away the copy stays as it was.
 */
export class TenantView {
  #snapshot: TenantSnapshot = EMPTY;
  #loading: Promise<void> | undefined;
  #again = false;
  #poll: NodeJS.Timeout | undefined;
  #touch: NodeJS.Timeout | undefined;
  #failing = false;
  readonly #used = new Map<string, number>();

  constructor(private readonly options: TenantViewOptions) {}

  get snapshot(): TenantSnapshot {
    return this.#snapshot;
  }

  /** First load (waited for), then the subscription, the version poll and the touch timer. */
  async start(): Promise<void> {
    await this.reload().catch((error: unknown) => this.#failed(error));
    const { subscriber } = this.options;
    subscriber.on('message', (channel: string) => {
      if (channel === TENANT_CHANNEL) void this.reload().catch((e: unknown) => this.#failed(e));
    });
    await subscriber.subscribe(TENANT_CHANNEL).catch((error: unknown) => this.#failed(error));
    const pollMs = this.options.pollMs ?? 1_000;
    const poll = async () => {
      try {
        if ((await this.options.store.version()) !== this.#snapshot.version) await this.reload();
      } catch (error) {
        this.#failed(error);
      }
      this.#poll = setTimeout(poll, pollMs).unref();
    };
    this.#poll = setTimeout(poll, pollMs).unref();
    const touch = () => {
      void this.flushUse().finally(() => {
        this.#touch = setTimeout(touch, this.options.touchMs ?? 10_000).unref();
      });
    };
    this.#touch = setTimeout(touch, this.options.touchMs ?? 10_000).unref();
  }

  async stop(): Promise<void> {
    clearTimeout(this.#poll);
    clearTimeout(this.#touch);
    this.#poll = undefined;
    this.#touch = undefined;
    await this.flushUse();
  }

  /** Loads the store now; a reload asked for while one runs runs once more after it. */
  reload(): Promise<void> {
    if (this.#loading) {
      this.#again = true;
      return this.#loading;
    }
    this.#loading = (async () => {
      do {
        this.#again = false;
        const next = await this.options.store.load();
        const changed = next.version !== this.#snapshot.version;
        const first = this.#snapshot === EMPTY;
        this.#snapshot = next;
        if (this.#failing) {
          this.#failing = false;
          this.options.log('fairgate: run-time tenants: the store answers again');
        }
        if (changed && !first) this.options.onChange(next);
      } while (this.#again);
    })().finally(() => {
      this.#loading = undefined;
    });
    return this.#loading;
  }

  /** A request authenticated with run-time key `id` (written with the next flush). */
  used(id: string): void {
    this.#used.set(id, Date.now());
  }

  async flushUse(): Promise<void> {
    if (this.#used.size === 0) return;
    const seen = new Map(this.#used);
    this.#used.clear();
    await this.options.store.touchKeys(seen).catch(() => {
      for (const [id, ms] of seen) if (!this.#used.has(id)) this.#used.set(id, ms);
    });
  }

  #failed(error: unknown): void {
    if (this.#failing) return;
    this.#failing = true;
    this.options.log(
      `fairgate: run-time tenants: reading the store failed (the last copy stays): ${String(error)}`,
    );
  }
}
