import { timingSafeEqual } from 'node:crypto';
import { apiKeyDigest, type FairgateConfig, type TenantConfig } from '@fairgate/config';
import { unauthorized } from './errors.js';

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

  constructor(config: Pick<FairgateConfig, 'tenants'>) {
    for (const tenant of config.tenants) {
      this.#byId.set(tenant.id, tenant);
      for (const hex of tenant.api_key_sha256) {
        this.#byDigest.set(hex, tenant);
      }
    }
  }

  /** The tenant owning `apiKey`, or undefined. */
  authenticate(apiKey: string): TenantConfig | undefined {
    return this.#byDigest.get(apiKeyDigest(apiKey));
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
 * without one or with an unknown key. Every tenant-facing route authenticates here.
 */
export function authenticateTenant(
  directory: TenantDirectory,
  authorization: string | undefined,
): TenantConfig {
  const token = bearerToken(authorization);
  if (!token) throw unauthorized('Missing `Authorization: Bearer <API key>` header');
  const tenant = directory.authenticate(token);
  if (!tenant) throw unauthorized('Incorrect API key provided');
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
