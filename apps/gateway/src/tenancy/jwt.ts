import { readFileSync } from 'node:fs';
import { ConfigError, type FairgateConfig } from '@fairgate/config';
import type { JSONWebKeySet, JWTVerifyGetKey, JWTVerifyOptions } from 'jose';

/** The `auth.jwt` section (docs/tenants.md, *JWT*). */
export type JwtAuthConfig = NonNullable<NonNullable<FairgateConfig['auth']>['jwt']>;

/** Why a token was refused, and the 401's message (tenants.ts): one row per reason. */
export const JWT_FAILURES = {
  malformed: 'JWT is malformed',
  algorithm_not_allowed: 'JWT signing algorithm is not allowed',
  unknown_key: 'JWT is signed by a key the JWKS does not hold',
  bad_signature: 'JWT signature is invalid',
  expired: 'JWT expired',
  no_expiry: 'JWT has no `exp` claim',
  not_yet_valid: 'JWT is not valid yet (`nbf`)',
  wrong_issuer: 'JWT issuer is not accepted',
  wrong_audience: 'JWT audience is not accepted',
  no_tenant: 'JWT has no tenant claim, or its value is not a tenant id',
  jwks_unavailable: 'JWT cannot be verified: the JWKS is unavailable',
} as const;
export type JwtFailure = keyof typeof JWT_FAILURES;

/** A token refused; its message never holds the token. */
export class JwtRejected extends Error {
  constructor(readonly reason: JwtFailure) {
    super(JWT_FAILURES[reason]);
    this.name = 'JwtRejected';
  }
}

export interface JwtVerifierOptions {
  /** Hears of a JWKS fetch that failed (at most one per `retryMs`). */
  onJwksError?: (error: unknown) => void;
  /** jose's cooldown: a token naming a `kid` the cached JWKS lacks fetches it again at most this often. */
  cooldownMs?: number;
  /** How long a fetched JWKS is used before a token fetches it again. */
  cacheMaxAgeMs?: number;
  /** After a failed fetch, the next waits this long (a down issuer costs no fetch per request). */
  retryMs?: number;
  /** Most ms one JWKS fetch may take. */
  timeoutMs?: number;
}

/** jose's defaults, named: the JWKS is fetched again after 10 min, or on an unknown kid at most every 30 s. */
const COOLDOWN_MS = 30_000;
const CACHE_MAX_AGE_MS = 600_000;
const RETRY_MS = 5_000;
const TIMEOUT_MS = 5_000;

/** A tenant id as the config's schema allows it (letters, digits, '.', '_', '-'; 1-64). */
const TENANT_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** Errors of choosing a key in a JWKS that was read fine: the token's fault, not the JWKS's. */
const KEY_SELECTION_CODES = new Set([
  'ERR_JWKS_NO_MATCHING_KEY',
  'ERR_JWKS_MULTIPLE_MATCHING_KEYS',
  'ERR_JOSE_NOT_SUPPORTED',
]);

type Jose = typeof import('jose');
type RemoteJwks = ReturnType<Jose['createRemoteJWKSet']>;

/**
 * Verifies JWT bearer tokens with `jose`: the signature by a key of the configured JWKS, the
 * algorithm, `iss`, `aud`, `exp` (required) and `nbf`; returns the tenant id its tenant claim
 * names. jose is loaded only when `auth.jwt` is configured (create()).
 *
 * A JWKS by URL is jose's remote set (cached; fetched again after `cacheMaxAgeMs`, or when a
 * token names a kid it lacks, at most once per `cooldownMs`), with one addition: when a fetch
 * fails, the keys last fetched go on verifying (stale, not gone: a rotated-out key is removed
 * only by a successful fetch), and the next fetch waits `retryMs`.
 */
export class JwtVerifier {
  readonly #jose: Jose;
  readonly #config: JwtAuthConfig;
  readonly #options: JWTVerifyOptions;
  readonly #keys: JWTVerifyGetKey;

  private constructor(jose: Jose, config: JwtAuthConfig, keys: JWTVerifyGetKey) {
    this.#jose = jose;
    this.#config = config;
    this.#keys = keys;
    this.#options = {
      issuer: config.issuer,
      audience: config.audience,
      algorithms: config.algorithms,
      clockTolerance: config.clock_tolerance_s,
      // A token without an expiry could never be revoked (the gateway keeps no deny list).
      requiredClaims: ['exp'],
    };
  }

  /** A JWKS file that cannot be read, or holds no public key, is a ConfigError naming the key. */
  static async create(
    config: JwtAuthConfig,
    options: JwtVerifierOptions = {},
  ): Promise<JwtVerifier> {
    const jose = await import('jose');
    if (config.jwks_file !== undefined) {
      return new JwtVerifier(jose, config, jose.createLocalJWKSet(readJwksFile(config.jwks_file)));
    }
    const url = new URL(config.jwks_url as string); // the schema: exactly one of the two
    const remote = jose.createRemoteJWKSet(url, {
      cooldownDuration: options.cooldownMs ?? COOLDOWN_MS,
      cacheMaxAge: options.cacheMaxAgeMs ?? CACHE_MAX_AGE_MS,
      timeoutDuration: options.timeoutMs ?? TIMEOUT_MS,
    });
    const keys = staleIfError(jose, remote, options);
    // Fetched now, not awaited: the first token finds the keys, a bad URL is logged at start,
    // and an issuer that is down delays no start (API keys work meanwhile).
    remote.reload().catch((error: unknown) => options.onJwksError?.(error));
    return new JwtVerifier(jose, config, keys);
  }

  /** The tenant id of a valid token; else throws JwtRejected with the reason. */
  async verify(token: string): Promise<string> {
    let payload: Record<string, unknown>;
    try {
      payload = await this.#verified(token);
    } catch (error) {
      throw error instanceof JwtRejected ? error : new JwtRejected(failureOf(error));
    }
    const tenant = payload[this.#config.tenant_claim];
    if (typeof tenant !== 'string' || !TENANT_ID.test(tenant)) throw new JwtRejected('no_tenant');
    return tenant;
  }

  async #verified(token: string): Promise<Record<string, unknown>> {
    try {
      return (await this.#jose.jwtVerify(token, this.#keys, this.#options)).payload;
    } catch (error) {
      // A token without a kid that several keys of the set could have signed: try each.
      if (!hasCode(error, 'ERR_JWKS_MULTIPLE_MATCHING_KEYS')) throw error;
      for await (const key of error as unknown as AsyncIterable<Parameters<Jose['jwtVerify']>[1]>) {
        try {
          return (await this.#jose.jwtVerify(token, key, this.#options)).payload;
        } catch (inner) {
          if (!hasCode(inner, 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED')) throw inner;
        }
      }
      throw new JwtRejected('bad_signature');
    }
  }
}

/**
 * The remote set, and the keys it last fetched while fetching fails. A failed fetch is
 * reported, and for `retryMs` no fetch is tried: the stale keys answer (or, before any
 * fetch succeeded, every token is refused `jwks_unavailable`).
 */
function staleIfError(
  jose: Jose,
  remote: RemoteJwks,
  options: JwtVerifierOptions,
): JWTVerifyGetKey {
  const retryMs = options.retryMs ?? RETRY_MS;
  let stale: JWTVerifyGetKey | undefined;
  let retryAt = 0;
  const fromStale: JWTVerifyGetKey = (header, token) => {
    if (!stale) throw new JwtRejected('jwks_unavailable');
    return stale(header, token);
  };
  return async (header, token) => {
    if (Date.now() < retryAt) return fromStale(header, token);
    try {
      const key = await remote(header, token);
      stale = undefined;
      return key;
    } catch (error) {
      if (KEY_SELECTION_CODES.has(codeOf(error))) throw error;
      options.onJwksError?.(error);
      retryAt = Date.now() + retryMs;
      const last = remote.jwks();
      stale = last ? jose.createLocalJWKSet(last) : undefined;
      return fromStale(header, token);
    }
  };
}

/** The JWKS of `auth.jwt.jwks_file`, read once: public keys only, at least one. */
function readJwksFile(path: string): JSONWebKeySet {
  const refuse = (why: string) =>
    new ConfigError(`invalid config: auth.jwt.jwks_file: ${path}: ${why}`, 'auth.jwt.jwks_file');
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw refuse(`cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  let jwks: unknown;
  try {
    jwks = JSON.parse(text);
  } catch {
    throw refuse('is not JSON');
  }
  const keys = (jwks as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys) || keys.length === 0)
    throw refuse('is not a JWKS with keys: {"keys": [...]}');
  keys.forEach((key: unknown, i) => {
    if (!key || typeof key !== 'object') throw refuse(`keys[${i}] is not a JWK`);
    // A private or symmetric key would sign tokens: a JWKS file holds public keys only.
    if ('d' in key || 'k' in key) throw refuse(`keys[${i}] is a private or secret key`);
  });
  return jwks as JSONWebKeySet;
}

/** jose's error code -> the reason a token is refused (jose's codes are its stable API). */
function failureOf(error: unknown): JwtFailure {
  switch (codeOf(error)) {
    case 'ERR_JOSE_ALG_NOT_ALLOWED':
    case 'ERR_JOSE_NOT_SUPPORTED':
      return 'algorithm_not_allowed';
    case 'ERR_JWKS_NO_MATCHING_KEY':
      return 'unknown_key';
    case 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED':
      return 'bad_signature';
    case 'ERR_JWT_EXPIRED':
      return 'expired';
    case 'ERR_JWT_CLAIM_VALIDATION_FAILED':
      return claimFailure(error as { claim?: string; reason?: string });
    default:
      return 'malformed';
  }
}

function claimFailure({ claim, reason }: { claim?: string; reason?: string }): JwtFailure {
  if (claim === 'iss') return 'wrong_issuer';
  if (claim === 'aud') return 'wrong_audience';
  if (claim === 'exp' && reason === 'missing') return 'no_expiry';
  if (claim === 'nbf' && reason === 'check_failed') return 'not_yet_valid';
  return 'malformed';
}

function codeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
}

function hasCode(error: unknown, code: string): boolean {
  return codeOf(error) === code;
}

/**
 * Whether a bearer token is a JWT rather than an API key: three base64url segments (the
 * last empty for an unsigned token, refused later) whose first is a JSON header with `alg`.
 * An API key (`fg-...`, or any string of the file) is never that.
 */
export function looksLikeJwt(token: string): boolean {
  if (!/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(token)) return false;
  try {
    const header: unknown = JSON.parse(
      Buffer.from(token.slice(0, token.indexOf('.')), 'base64url').toString('utf8'),
    );
    return typeof (header as { alg?: unknown } | null)?.alg === 'string';
  } catch {
    return false;
  }
}
