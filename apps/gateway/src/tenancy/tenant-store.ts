import type { RedisConnection } from '@fairgate/scheduler';

/**
 * Tenants and API keys created at run time (the admin API, routes/tenants.ts), shared by
 * every replica through Redis under the hash tag `{fg-tenants}` (one Cluster slot; the
 * pools' keys live under `{fg:<pool>}`):
 *
 * | key | type | holds |
 * | --- | --- | --- |
 * | `{fg-tenants}:tenants` | hash | tenant id -> the tenant's settings (JSON, the config file's shape without keys) |
 * | `{fg-tenants}:keys` | hash | key id -> the key's record (JSON: digest, tenant, name, prefix, created, expiry) |
 * | `{fg-tenants}:digests` | hash | key digest -> key id (a replica's lookup of a key it does not know yet) |
 * | `{fg-tenants}:last-used` | hash | key id -> when a replica last saw it (ms; written at most every 10 s per replica) |
 * | `{fg-tenants}:version` | string | incremented by every write |
 *
 * Every write bumps the version in the same MULTI and then publishes it on the channel
 * `fg-tenants:changed`. A replica (tenant-view.ts) reloads on that message, and also reads
 * the version every second, which bounds its staleness when a message is lost (a dropped
 * subscriber connection).
 */
export interface StoredTenant {
  /** The tenant's settings as the config file writes them (tenants[] without api_key_sha256). */
  readonly settings: Record<string, unknown> & { id: string };
  readonly createdAt: number;
  readonly updatedAt: number;
}

export interface StoredKey {
  readonly id: string;
  readonly tenant: string;
  /** sha256 hex of the key: the key itself is never stored. */
  readonly digest: string;
  readonly name: string | null;
  /** The key's first characters, to tell keys apart in a list. */
  readonly prefix: string;
  readonly createdAt: number;
  /** ms since the epoch after which the key is refused; null = never. */
  readonly expiresAt: number | null;
}

export interface TenantSnapshot {
  readonly version: number;
  readonly tenants: ReadonlyMap<string, StoredTenant>;
  readonly keys: ReadonlyMap<string, StoredKey>;
}

export const TENANT_CHANNEL = 'fg-tenants:changed';

const TAG = '{fg-tenants}:';
const KEYS = {
  tenants: `${TAG}tenants`,
  keys: `${TAG}keys`,
  lastUsed: `${TAG}last-used`,
  digests: `${TAG}digests`,
  version: `${TAG}version`,
};

export class TenantStore {
  constructor(private readonly redis: RedisConnection) {}

  /** Every tenant and key, and the version they are at (one MULTI: a consistent read). */
  async load(): Promise<TenantSnapshot> {
    const [[, tenants], [, keys], [, version]] = (await this.redis
      .multi()
      .hgetall(KEYS.tenants)
      .hgetall(KEYS.keys)
      .get(KEYS.version)
      .exec()) as [[null, Record<string, string>], [null, Record<string, string>], [null, string]];
    return {
      version: Number(version ?? 0),
      tenants: new Map(
        Object.entries(tenants).map(([id, json]) => [id, JSON.parse(json) as StoredTenant]),
      ),
      keys: new Map(Object.entries(keys).map(([id, json]) => [id, JSON.parse(json) as StoredKey])),
    };
  }

  async version(): Promise<number> {
    return Number((await this.redis.get(KEYS.version)) ?? 0);
  }

  /** The key with this digest, read from Redis (a key another replica just made). */
  async keyByDigest(digest: string): Promise<StoredKey | undefined> {
    const id = await this.redis.hget(KEYS.digests, digest);
    const json = id ? await this.redis.hget(KEYS.keys, id) : null;
    return json ? (JSON.parse(json) as StoredKey) : undefined;
  }

  async hasTenant(id: string): Promise<boolean> {
    return (await this.redis.hexists(KEYS.tenants, id)) === 1;
  }

  async lastUsed(): Promise<Map<string, number>> {
    const all = await this.redis.hgetall(KEYS.lastUsed);
    return new Map(Object.entries(all).map(([id, ms]) => [id, Number(ms)]));
  }

  /** Creates a tenant; false when one with that id exists. */
  async createTenant(tenant: StoredTenant): Promise<boolean> {
    const created = await this.redis.hsetnx(
      KEYS.tenants,
      tenant.settings.id,
      JSON.stringify(tenant),
    );
    if (created === 1) await this.#changed();
    return created === 1;
  }

  /** Replaces an existing tenant's record (the caller read it first). */
  async putTenant(tenant: StoredTenant): Promise<void> {
    await this.#write((multi) =>
      multi.hset(KEYS.tenants, tenant.settings.id, JSON.stringify(tenant)),
    );
  }

  /** Deletes a tenant and every key of it; false when there was none. */
  async deleteTenant(id: string, keys: readonly StoredKey[]): Promise<boolean> {
    const existed = await this.redis.hdel(KEYS.tenants, id);
    if (existed === 0) return false;
    await this.#write((multi) => {
      for (const key of keys) {
        multi.hdel(KEYS.keys, key.id).hdel(KEYS.digests, key.digest).hdel(KEYS.lastUsed, key.id);
      }
      return multi;
    });
    return true;
  }

  /** Writes keys (a new one; with its predecessor's new expiry, a rotation) in one MULTI. */
  async putKeys(keys: readonly StoredKey[]): Promise<void> {
    await this.#write((multi) => {
      for (const key of keys) {
        multi.hset(KEYS.keys, key.id, JSON.stringify(key)).hset(KEYS.digests, key.digest, key.id);
      }
      return multi;
    });
  }

  /** Revokes a key; false when there was none. */
  async deleteKey(key: StoredKey): Promise<boolean> {
    const existed = await this.redis.hdel(KEYS.keys, key.id);
    if (existed === 0) return false;
    await this.#write((multi) => multi.hdel(KEYS.digests, key.digest).hdel(KEYS.lastUsed, key.id));
    return true;
  }

  /** Records when keys were last used (the later of what is stored and what is given). */
  async touchKeys(seen: ReadonlyMap<string, number>): Promise<void> {
    if (seen.size === 0) return;
    const stored = await this.redis.hmget(KEYS.lastUsed, ...seen.keys());
    const later: string[] = [];
    let i = 0;
    for (const [id, ms] of seen) {
      if (ms > Number(stored[i++] ?? 0)) later.push(id, String(ms));
    }
    if (later.length > 0) await this.redis.hset(KEYS.lastUsed, ...later);
  }

  /** Bumps the version with the write, then tells every replica. */
  async #write(
    add: (multi: ReturnType<RedisConnection['multi']>) => ReturnType<RedisConnection['multi']>,
  ): Promise<void> {
    await add(this.redis.multi()).incr(KEYS.version).exec();
    await this.#publish();
  }

  async #changed(): Promise<void> {
    await this.redis.incr(KEYS.version);
    await this.#publish();
  }

  async #publish(): Promise<void> {
    await this.redis.publish(TENANT_CHANNEL, 'changed');
  }
}
