import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiKeyDigest, ConfigError, configSchema } from '@fairgate/config';
import { exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  JWT_FAILURES,
  type JwtAuthConfig,
  type JwtFailure,
  JwtRejected,
  JwtVerifier,
  type JwtVerifierOptions,
  looksLikeJwt,
} from '../src/tenancy/jwt.js';
import { authenticateTenant, TenantDirectory } from '../src/tenants.js';

/**
 * JwtVerifier against keys jose makes here, with the JWKS served over real HTTP on 127.0.0.1
 * and from a file: each kind of bad token gets its own reason, and the remote JWKS is fetched
 * once, again on an unknown kid after the cooldown, and kept while fetching fails.
 */

const ISSUER = 'https://idp.test/';
const AUDIENCE = 'fairgate';
type KeyPair = Awaited<ReturnType<typeof generateKeyPair>>;
let rsa: KeyPair;
let ec: KeyPair;
let rsa2: KeyPair;
/** Nobody's JWKS holds it: a forger's key. */
let forger: KeyPair;

const publicJwk = async (pair: KeyPair, kid: string, alg: string): Promise<JWK> => ({
  ...(await exportJWK(pair.publicKey)),
  kid,
  alg,
  use: 'sig',
});

interface TokenOptions {
  key?: KeyPair;
  alg?: string;
  /** undefined = the key's usual kid; null = no kid. */
  kid?: string | null;
  iss?: string;
  aud?: string | string[];
  /** Seconds from now; null = no exp. */
  exp?: number | null;
  nbf?: number;
}

const now = () => Math.floor(Date.now() / 1000);

async function token(claims: Record<string, unknown>, options: TokenOptions = {}) {
  const key = options.key ?? rsa;
  const alg = options.alg ?? (key === ec ? 'ES256' : 'RS256');
  const usualKid = key === ec ? 'ec-1' : key === rsa2 ? 'rsa-2' : 'rsa-1';
  const kid = options.kid === undefined ? usualKid : options.kid;
  const jwt = new SignJWT(claims)
    .setProtectedHeader({ alg, ...(kid === null ? {} : { kid }) })
    .setIssuer(options.iss ?? ISSUER)
    .setAudience(options.aud ?? AUDIENCE)
    .setIssuedAt();
  if (options.exp !== null) jwt.setExpirationTime(now() + (options.exp ?? 300));
  if (options.nbf !== undefined) jwt.setNotBefore(now() + options.nbf);
  return jwt.sign(key.privateKey);
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** A JWKS over HTTP: counts its fetches; `status` other than 200 answers that error. */
class JwksServer {
  fetches = 0;
  status = 200;
  jwks: { keys: JWK[] } = { keys: [] };
  readonly #server: Server = createServer((_request, response) => {
    this.fetches++;
    response.writeHead(this.status, { 'content-type': 'application/json' });
    response.end(this.status === 200 ? JSON.stringify(this.jwks) : '{"error":"down"}');
  });
  url = '';

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}/jwks.json`;
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}

const baseConfig = (source: Partial<JwtAuthConfig>): JwtAuthConfig =>
  configSchema.parse({
    tenants: [{ id: 'x', api_key_sha256: [apiKeyDigest('x')] }],
    pods: [{ name: 'p', url: 'http://127.0.0.1:1' }],
    auth: { jwt: { issuer: ISSUER, audience: AUDIENCE, ...source } },
  }).auth?.jwt as JwtAuthConfig;

async function rejection(verifier: JwtVerifier, jwt: string): Promise<JwtFailure | 'accepted'> {
  try {
    await verifier.verify(jwt);
    return 'accepted';
  } catch (error) {
    if (error instanceof JwtRejected) return error.reason;
    throw error;
  }
}

let jwks: { keys: JWK[] };
let dir: string;
const servers: JwksServer[] = [];
async function jwksServer(): Promise<JwksServer> {
  const server = new JwksServer();
  server.jwks = structuredClone(jwks);
  await server.start();
  servers.push(server);
  return server;
}

beforeAll(async () => {
  [rsa, ec, rsa2, forger] = await Promise.all([
    generateKeyPair('RS256'),
    generateKeyPair('ES256'),
    generateKeyPair('RS256'),
    generateKeyPair('RS256'),
  ]);
  jwks = { keys: [await publicJwk(rsa, 'rsa-1', 'RS256'), await publicJwk(ec, 'ec-1', 'ES256')] };
  dir = mkdtempSync(join(tmpdir(), 'fairgate-jwt-'));
});
afterAll(async () => {
  await Promise.all(servers.map((server) => server.stop()));
});

describe.each([
  ['by URL', 'url'],
  ['from a file', 'file'],
] as const)('JwtVerifier, JWKS %s', (_name, source) => {
  let verifier: JwtVerifier;
  beforeAll(async () => {
    if (source === 'url') {
      verifier = await JwtVerifier.create(baseConfig({ jwks_url: (await jwksServer()).url }));
    } else {
      const file = join(dir, 'jwks.json');
      writeFileSync(file, JSON.stringify(jwks));
      verifier = await JwtVerifier.create(baseConfig({ jwks_file: file }));
    }
  });

  it('a valid token names its tenant (RS256 and ES256)', async () => {
    expect(await verifier.verify(await token({ tenant: 'paying' }))).toBe('paying');
    expect(await verifier.verify(await token({ tenant: 'free' }, { key: ec }))).toBe('free');
    // An audience list with ours in it; an expiry within the 30 s clock tolerance.
    const listed = await token({ tenant: 'paying' }, { aud: ['other', AUDIENCE], exp: -10 });
    expect(await verifier.verify(listed)).toBe('paying');
  });

  const unsigned = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ tenant: 'paying', iss: ISSUER, aud: AUDIENCE, exp: now() + 300 })}.`;
  it.each<[string, () => Promise<string>, JwtFailure]>([
    ['expired', () => token({ tenant: 'paying' }, { exp: -120 }), 'expired'],
    ['not yet valid', () => token({ tenant: 'paying' }, { nbf: 120 }), 'not_yet_valid'],
    [
      'signed by another key with the same kid',
      () => token({ tenant: 'paying' }, { key: forger, kid: 'rsa-1' }),
      'bad_signature',
    ],
    [
      'signed by another key with its own kid',
      () => token({ tenant: 'paying' }, { key: forger, kid: 'forged' }),
      'unknown_key',
    ],
    [
      'signed by another key with no kid',
      () => token({ tenant: 'paying' }, { key: forger, kid: null }),
      'bad_signature',
    ],
    [
      'for another audience',
      () => token({ tenant: 'paying' }, { aud: 'billing' }),
      'wrong_audience',
    ],
    [
      'from another issuer',
      () => token({ tenant: 'paying' }, { iss: 'https://evil/' }),
      'wrong_issuer',
    ],
    ['without a tenant claim', () => token({ sub: 'u1' }), 'no_tenant'],
    ['with a tenant claim not a string', () => token({ tenant: 7 }), 'no_tenant'],
    ['with a tenant claim not a tenant id', () => token({ tenant: 'a b' }), 'no_tenant'],
    ['without an expiry', () => token({ tenant: 'paying' }, { exp: null }), 'no_expiry'],
    ['unsigned (alg none)', async () => unsigned, 'algorithm_not_allowed'],
    [
      'HMAC-signed (HS256)',
      () =>
        new SignJWT({ tenant: 'paying' })
          .setProtectedHeader({ alg: 'HS256', kid: 'rsa-1' })
          .setIssuer(ISSUER)
          .setAudience(AUDIENCE)
          .setExpirationTime('5m')
          .sign(new TextEncoder().encode('a shared secret of thirty-two bytes!')),
      'algorithm_not_allowed',
    ],
    [
      'with a garbled signature',
      async () => `${(await token({ tenant: 'paying' })).slice(0, -10)}AAAAAAAAAA`,
      'bad_signature',
    ],
    ['not a JWS at all', async () => 'eyJhbGciOiJSUzI1NiJ9.e30', 'malformed'],
  ])('%s -> %s', async (_case, make, reason) => {
    expect(await rejection(verifier, await make())).toBe(reason);
  });

  it('an error message never holds the token', async () => {
    const expired = await token({ tenant: 'paying' }, { exp: -120 });
    const error = await verifier.verify(expired).catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(JwtRejected);
    expect((error as Error).message).toBe('JWT expired');
  });
});

describe('JwtVerifier options', () => {
  it('tenant_claim and algorithms are honoured', async () => {
    const file = join(dir, 'jwks-options.json');
    writeFileSync(file, JSON.stringify(jwks));
    const verifier = await JwtVerifier.create(
      baseConfig({ jwks_file: file, tenant_claim: 'org', algorithms: ['ES256'] }),
    );
    expect(await verifier.verify(await token({ org: 'free' }, { key: ec }))).toBe('free');
    expect(await rejection(verifier, await token({ tenant: 'free' }, { key: ec }))).toBe(
      'no_tenant',
    );
    expect(await rejection(verifier, await token({ org: 'free' }))).toBe('algorithm_not_allowed');
  });

  it('a token without a kid is tried against each key that fits it', async () => {
    const file = join(dir, 'jwks-two-rsa.json');
    const keys = [...jwks.keys, await publicJwk(rsa2, 'rsa-2', 'RS256')];
    writeFileSync(file, JSON.stringify({ keys }));
    const verifier = await JwtVerifier.create(baseConfig({ jwks_file: file }));
    for (const key of [rsa, rsa2]) {
      expect(await verifier.verify(await token({ tenant: 'paying' }, { key, kid: null }))).toBe(
        'paying',
      );
    }
    const forged = await token({ tenant: 'paying' }, { key: forger, kid: null });
    expect(await rejection(verifier, forged)).toBe('bad_signature');
  });

  it.each([
    ['a missing file', null, /cannot be read \(ENOENT\)/],
    ['a file that is not JSON', 'keys: []', /is not JSON/],
    ['a JWKS without keys', '{"keys": []}', /is not a JWKS/],
    ['a private key', 'private', /keys\[0\] is a private or secret key/],
  ])('a JWKS file refuses to start on %s, naming the key', async (_case, content, message) => {
    const file = join(dir, `bad-${Math.random().toString(36).slice(2)}.json`);
    if (content === 'private') {
      const jwk = await exportJWK(
        (await generateKeyPair('ES256', { extractable: true })).privateKey,
      );
      writeFileSync(file, JSON.stringify({ keys: [jwk] }));
    } else if (content !== null) writeFileSync(file, content);
    const error = await JwtVerifier.create(baseConfig({ jwks_file: file })).catch((e) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).key).toBe('auth.jwt.jwks_file');
    expect((error as Error).message).toMatch(message);
  });
});

describe('JwtVerifier, the JWKS URL over time', () => {
  const remote = async (server: JwksServer, options: JwtVerifierOptions) => {
    const verifier = await JwtVerifier.create(baseConfig({ jwks_url: server.url }), options);
    // The fetch made at start (not awaited by create).
    await expect.poll(() => server.fetches).toBe(1);
    return verifier;
  };

  it('is fetched once at start; an unknown kid fetches again only after the cooldown', async () => {
    const server = await jwksServer();
    const verifier = await remote(server, { cooldownMs: 500 });
    for (let i = 0; i < 5; i++) await verifier.verify(await token({ tenant: 'paying' }));
    expect(server.fetches).toBe(1);
    // The issuer rotates a new key in; a token signed by it arrives within the cooldown.
    server.jwks.keys.push(await publicJwk(rsa2, 'rsa-2', 'RS256'));
    const rotated = await token({ tenant: 'paying' }, { key: rsa2 });
    expect(await rejection(verifier, rotated)).toBe('unknown_key');
    expect(server.fetches).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 550));
    expect(await verifier.verify(rotated)).toBe('paying');
    expect(server.fetches).toBe(2);
    // A forged kid after the cooldown costs one fetch, then waits out the next cooldown.
    await new Promise((resolve) => setTimeout(resolve, 550));
    const forged = await token({ tenant: 'paying' }, { key: forger, kid: 'forged' });
    for (let i = 0; i < 5; i++) expect(await rejection(verifier, forged)).toBe('unknown_key');
    expect(server.fetches).toBe(3);
  });

  it('keeps the keys it last fetched while the URL fails, and fetches no more than once per retry', async () => {
    const server = await jwksServer();
    const errors: string[] = [];
    const verifier = await remote(server, {
      cacheMaxAgeMs: 0, // every token would fetch the JWKS again
      retryMs: 60_000,
      onJwksError: (error) => errors.push((error as Error).message),
    });
    server.status = 500;
    for (let i = 0; i < 5; i++) {
      expect(await verifier.verify(await token({ tenant: 'paying' }))).toBe('paying');
    }
    expect(server.fetches).toBe(2);
    expect(errors).toHaveLength(1);
    expect(await rejection(verifier, await token({ tenant: 'paying' }, { key: forger }))).toBe(
      'bad_signature',
    );
  });

  it('refuses every token while no JWKS was ever fetched, and says why', async () => {
    const server = await jwksServer();
    server.status = 503;
    const errors: unknown[] = [];
    const verifier = await JwtVerifier.create(baseConfig({ jwks_url: server.url }), {
      retryMs: 60_000,
      onJwksError: (error) => errors.push(error),
    });
    await expect.poll(() => errors.length).toBe(1);
    expect(await rejection(verifier, await token({ tenant: 'paying' }))).toBe('jwks_unavailable');
    expect(server.fetches).toBe(2);
    expect(await rejection(verifier, await token({ tenant: 'paying' }))).toBe('jwks_unavailable');
    expect(server.fetches).toBe(2);
  });
});

describe('authenticateTenant with auth.jwt', () => {
  const config = configSchema.parse({
    tenants: [{ id: 'paying', api_key_sha256: [apiKeyDigest('fg-plain-key')] }],
    pods: [{ name: 'p', url: 'http://127.0.0.1:1' }],
  });
  const tenants = new TenantDirectory(config);
  let jwt: JwtVerifier;
  beforeAll(async () => {
    const file = join(dir, 'jwks-auth.json');
    writeFileSync(file, JSON.stringify(jwks));
    jwt = await JwtVerifier.create(baseConfig({ jwks_file: file }));
  });
  const authenticate = (bearer: string) =>
    authenticateTenant({ tenants: () => tenants, tenancy: undefined, jwt }, `Bearer ${bearer}`);

  it('a valid JWT and an API key both name their tenant', async () => {
    expect((await authenticate(await token({ tenant: 'paying' }))).id).toBe('paying');
    expect((await authenticate('fg-plain-key')).id).toBe('paying');
  });

  it.each<[string, () => Promise<string>, string]>([
    ['expired', () => token({ tenant: 'paying' }, { exp: -120 }), 'JWT expired'],
    [
      'an unknown tenant',
      () => token({ tenant: 'nobody' }),
      "JWT names an unknown tenant 'nobody'",
    ],
    ['an unknown API key', async () => 'fg-nope', 'Incorrect API key provided'],
  ])('%s -> 401 invalid_api_key', async (_case, make, message) => {
    const error = await authenticate(await make()).catch((e) => e);
    expect(error).toMatchObject({ status: 401, code: 'invalid_api_key', message });
  });

  it('without auth.jwt a JWT is an unknown API key', async () => {
    const error = await authenticateTenant(
      { tenants: () => tenants, tenancy: undefined },
      `Bearer ${await token({ tenant: 'paying' })}`,
    ).catch((e) => e);
    expect(error).toMatchObject({ status: 401, message: 'Incorrect API key provided' });
  });
});

describe('looksLikeJwt', () => {
  it('tells a JWT from an API key', async () => {
    expect(looksLikeJwt(await token({ tenant: 'paying' }))).toBe(true);
    expect(looksLikeJwt(`${b64({ alg: 'none' })}.${b64({})}.`)).toBe(true);
    for (const key of [
      'fg-abcdefABCDEF0123456789_-abcdefgh',
      'test-key-paying',
      'a.b.c',
      'x.y',
      `${b64({ typ: 'JWT' })}.${b64({})}.sig`,
    ]) {
      expect(looksLikeJwt(key), key).toBe(false);
    }
  });
});

describe('docs/tenants.md, *JWT*', () => {
  it("lists every refusal's message, and no other", () => {
    const markdown = readFileSync(new URL('../../../docs/tenants.md', import.meta.url), 'utf8');
    const start = markdown.indexOf('\n## JWT\n');
    const end = markdown.indexOf('\n## ', start + 1);
    const section = markdown.slice(start, end === -1 ? undefined : end);
    const documented = [...section.matchAll(/^\| (`+)(.+?)\1 \|/gm)].map((m) => m[2]?.trim());
    expect(documented.sort()).toEqual(
      [...Object.values(JWT_FAILURES), "JWT names an unknown tenant '<id>'"].sort(),
    );
  });
});
