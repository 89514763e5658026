import {
  apiKeyDigest,
  ConfigError,
  type FairgateConfig,
  parseRuntimeTenant,
  type TenantConfig,
} from '@fairgate/config';
import { createRedisConnection } from '@fairgate/scheduler';
import { redisTopology } from '../scheduler-setup.js';
import { TenantDirectory } from '../tenants.js';
import { type TenantSnapshot, TenantStore } from './tenant-store.js';
import { TenantView } from './tenant-view.js';

/** How long an unknown key's digest is not asked of Redis again. */
const MISS_TTL_MS = 1_000;
/** Most unknown digests remembered (then the memory starts afresh). */
const MAX_MISSES = 10_000;

/** Commands of the tenant store (admin writes, the view's loads): not on a request's path. */
const STORE_COMMAND_TIMEOUT_MS = 2_000;

/**
 * Tenants as data (docs/tenants.md): the config file's tenants, the bootstrap, plus those
 * the admin API made at run time, shared by every replica through Redis. The file wins:
 * a run-time tenant cannot take a file tenant's id (the API refuses it, and one made
 * before the file named it is left out, logged), and the API cannot change or delete a file
 * tenant. Keys work the same way for both kinds: a file tenant's digests come from the file,
 * and the API can add keys to any tenant.
 */
export class Tenancy {
  readonly store: TenantStore;
  readonly view: TenantView;
  readonly #close: () => void;
  #merged:
    | {
        file: FairgateConfig;
        snapshot: TenantSnapshot;
        config: FairgateConfig;
        runtime: ReadonlySet<string>;
      }
    | undefined;
  readonly #skipped = new Set<string>();
  readonly #misses = new Map<string, number>();

  private constructor(
    redis: NonNullable<FairgateConfig['redis']>,
    private readonly log: (line: string) => void,
    onChange: () => void,
  ) {
    const connection = createRedisConnection({
      topology: redisTopology(redis),
      commandTimeoutMs: STORE_COMMAND_TIMEOUT_MS,
    });
    // SUBSCRIBE holds its connection: a twin of its own (ioredis subscribes again after a
    // reconnect; the view's version poll covers the gap).
    const subscriber = connection.duplicate();
    subscriber.on('error', () => {});
    this.store = new TenantStore(connection);
    this.view = new TenantView({ store: this.store, subscriber, onChange, log });
    this.#close = () => {
      connection.disconnect();
      subscriber.disconnect();
    };
  }

  /** Run-time tenants need Redis: undefined on the embedded scheduler. */
  static async start(
    config: FairgateConfig,
    log: (line: string) => void,
    onChange: () => void,
  ): Promise<Tenancy | undefined> {
    if (!config.redis) return undefined;
    const tenancy = new Tenancy(config.redis, log, onChange);
    await tenancy.view.start();
    return tenancy;
  }

  async close(): Promise<void> {
    await this.view.stop();
    this.#close();
  }

  /**
   * The config in force: `file` with the run-time tenants after its own. Built again only
   * when the file or the store changed, so everything that caches per config object (pool
   * views, model routes) keeps working.
   */
  config(file: FairgateConfig): FairgateConfig {
    const snapshot = this.view.snapshot;
    const merged = this.#merged;
    if (merged && merged.file === file && merged.snapshot === snapshot) return merged.config;
    const runtime = this.#runtimeTenants(file, snapshot);
    const config = { ...file, tenants: [...file.tenants, ...runtime] };
    this.#merged = { file, snapshot, config, runtime: new Set(runtime.map((t) => t.id)) };
    return config;
  }

  /**
   * A key this replica's copy does not know: made on another replica a moment ago (its
   * message not here yet), or no key at all. Asks Redis for its digest; if the store has it,
   * the copy is reloaded (the caller authenticates again) and true is returned. An unknown
   * digest is not asked again for MISS_TTL_MS, so a flood of bad keys costs Redis at most
   * one read per distinct key per second.
   */
  async lookup(apiKey: string): Promise<boolean> {
    const digest = apiKeyDigest(apiKey);
    return this.#lookupOnce(
      `key:${digest}`,
      async () => (await this.store.keyByDigest(digest)) !== undefined,
    );
  }

  /**
   * The same for a tenant a verified JWT names (tenancy/jwt.ts): one the store has but this
   * copy does not yet reloads the copy (true); an unknown id is not asked again for a second.
   */
  lookupTenant(id: string): Promise<boolean> {
    return this.#lookupOnce(`tenant:${id}`, () => this.store.hasTenant(id));
  }

  async #lookupOnce(miss: string, inStore: () => Promise<boolean>): Promise<boolean> {
    const now = Date.now();
    const missed = this.#misses.get(miss);
    if (missed !== undefined && missed > now) return false;
    if (!(await inStore().catch(() => false))) {
      if (this.#misses.size >= MAX_MISSES) this.#misses.clear();
      this.#misses.set(miss, now + MISS_TTL_MS);
      return false;
    }
    await this.view.reload().catch(() => {});
    return true;
  }

  /** Whether tenant `id` of the config in force was made by the admin API (not the file's). */
  isRuntime(config: FairgateConfig, id: string): boolean {
    return this.#merged?.config === config && this.#merged.runtime.has(id);
  }

  /** Who a key belongs to, for the config in force: the file's digests and the run-time keys. */
  directory(config: FairgateConfig): TenantDirectory {
    return new TenantDirectory(config, this.view.snapshot.keys.values(), (id) =>
      this.view.used(id),
    );
  }

  #runtimeTenants(file: FairgateConfig, snapshot: TenantSnapshot): TenantConfig[] {
    const fileIds = new Set(file.tenants.map((t) => t.id));
    const tenants: TenantConfig[] = [];
    for (const stored of snapshot.tenants.values()) {
      const id = stored.settings.id;
      try {
        if (fileIds.has(id)) throw new ConfigError('the config file has a tenant of that id', 'id');
        tenants.push(parseRuntimeTenant(file, stored.settings));
        this.#skipped.delete(id);
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        if (!this.#skipped.has(id)) {
          this.#skipped.add(id);
          this.log(`fairgate: run-time tenant '${id}' left out: ${error.message}`);
        }
      }
    }
    return tenants;
  }
}
