import { timingSafeEqual } from 'node:crypto';
import { apiKeyDigest, type FairgateConfig, type TenantConfig } from '@fairgate/config';
import { unauthorized } from './errors.js';
import { JwtRejected, type JwtVerifier, looksLikeJwt } from './tenancy/jwt.js';
import type { Tenancy } from './tenancy/tenancy.js';
import type { StoredKey } from './tenancy/tenant-store.js';

/** A key the admin API made (tenancy/): whose, and until when. */
interface RuntimeKey {
  readonly id: string;
  readonly tenant: TenantConfig;
  readonly expiresAt: number | null;
}

/**
 * API key -> tenant. Keys are never stored: the config holds sha256 digests.
 * Lookup hashes the presented key and finds the digest in a map. The map is keyed by the
 * digest, whose bits an attacker cannot steer, so lookup timing reveals nothing about
 * keys; a hit is an exact match of the whole digest (a constant-time compare after it
 * would compare two equal values).
 */
export class TenantDirectory {
  readonly #byDigest = new Map<string, TenantConfig>();
  readonly #byId = new Map<string, TenantConfig>();
  /** Run-time keys by digest: checked after the file's, with their expiry. */
  readonly #runtime = new Map<string, RuntimeKey>();

  /**
   * `runtimeKeys`: keys the admin API made (a key of a tenant not in `config` is left out);
   * `onKeyUsed` hears of each request one of them authenticated (its last use).
   */
  constructor(
    config: Pick<FairgateConfig, 'tenants'>,
    runtimeKeys: Iterable<StoredKey> = [],
    private readonly onKeyUsed?: (id: string) => void,
  ) {
    for (const tenant of config.tenants) {
      this.#byId.set(tenant.id, tenant);
      for (const hex of tenant.api_key_sha256) {
        this.#byDigest.set(hex, tenant);
      }
    }
    for (const key of runtimeKeys) {
      const tenant = this.#byId.get(key.tenant);
      if (tenant && !this.#byDigest.has(key.digest)) {
        this.#runtime.set(key.digest, { id: key.id, tenant, expiresAt: key.expiresAt });
      }
    }
  }

  /** The tenant owning `apiKey`, or undefined (unknown, or a run-time key past its expiry). */
  authenticate(apiKey: string): TenantConfig | undefined {
    const digest = apiKeyDigest(apiKey);
    const fromFile = this.#byDigest.get(digest);
    if (fromFile) return fromFile;
    const key = this.#runtime.get(digest);
    if (!key || (key.expiresAt !== null && Date.now() >= key.expiresAt)) return undefined;
    this.onKeyUsed?.(key.id);
    return key.tenant;
  }

  get(id: string): TenantConfig | undefined {
    return this.#byId.get(id);
  }

  get all(): TenantConfig[] {
    return [...this.#byId.values()];
  }
}

/**
 * The tenant an `Authorization: Bearer <API key>` header names; 401 (OpenAI's wording)
 * without one or with an unknown key. Every tenant-facing route authenticates here. A key
 * this replica's copy does not know is looked up once in the run-time store (a key another
 * replica made a moment ago: tenancy/tenancy.ts, `lookup`) before the 401. With `auth.jwt`, a
 * token of a JWT's shape is verified instead (tenancy/jwt.ts) and names its tenant.
 */
export async function authenticateTenant(
  deps: { tenants: () => TenantDirectory; tenancy: Tenancy | undefined; jwt?: JwtVerifier },
  authorization: string | undefined,
): Promise<TenantConfig> {
  const token = bearerToken(authorization);
  if (!token) throw unauthorized('Missing `Authorization: Bearer <API key>` header');
  if (deps.jwt && looksLikeJwt(token)) return tenantOfJwt(deps, deps.jwt, token);
  const tenant = deps.tenants().authenticate(token);
  if (tenant) return tenant;
  if (deps.tenancy && (await deps.tenancy.lookup(token))) {
    const fresh = deps.tenants().authenticate(token);
    if (fresh) return fresh;
  }
  throw unauthorized('Incorrect API key provided');
}

/** The tenant a verified JWT names; 401 with the reason for any failure, or an unknown tenant. */
async function tenantOfJwt(
  deps: { tenants: () => TenantDirectory; tenancy: Tenancy | undefined },
  jwt: JwtVerifier,
  token: string,
): Promise<TenantConfig> {
  const id = await jwt.verify(token).catch((error: unknown) => {
    throw unauthorized(error instanceof JwtRejected ? error.message : 'JWT cannot be verified');
  });
  // A run-time tenant made on another replica a moment ago: looked up once in the store.
  const tenant =
    deps.tenants().get(id) ??
    ((await deps.tenancy?.lookupTenant(id)) ? deps.tenants().get(id) : undefined);
  if (!tenant) throw unauthorized(`JWT names an unknown tenant '${id}'`);
  return tenant;
}

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return match?.[1];
}

/** Constant-time check of an admin token against its configured digest. */
export function adminTokenMatches(
  token: string | undefined,
  digestHex: string | undefined,
): boolean {
  if (!token || !digestHex) return false;
  const presented = Buffer.from(apiKeyDigest(token), 'hex');
  const expected = Buffer.from(digestHex, 'hex');
  return expected.length === presented.length && timingSafeEqual(expected, presented);
}
