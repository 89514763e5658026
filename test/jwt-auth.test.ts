import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { defaultTestTenants, TEST_KEYS } from '@fairgate/testkit';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectConserved, generate, type Pool, startPool, tenantTotal } from './support/pool.js';

/**
 * JWT bearer tokens beside API keys (docs/tenants.md, *JWT*), through 2 gateway processes on
 * one Redis, the issuer's JWKS served over HTTP on 127.0.0.1: a valid token for `paying` is
 * served on either replica, every bad one (expired, wrongly signed, for another audience,
 * naming an unknown tenant) gets 401 invalid_api_key without a word of the token, and the
 * tenants' API keys keep working beside it. The JWKS is fetched once per replica.
 */
describe('JWT authentication', () => {
  const ISSUER = 'https://idp.test/';
  const AUDIENCE = 'fairgate';
  let pool: Pool;
  let jwksServer: Server;
  let jwksFetches = 0;
  type KeyPair = Awaited<ReturnType<typeof generateKeyPair>>;
  let issuerKey: KeyPair;
  let forgerKey: KeyPair;
  const url = (i: number) => pool.gateways[i]?.url as string;

  const sign = (
    claims: Record<string, unknown>,
    { key = issuerKey, kid = 'k1', aud = AUDIENCE, expIn = 300 } = {},
  ) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: 'ES256', kid })
      .setIssuer(ISSUER)
      .setAudience(aud)
      .setIssuedAt()
      .setExpirationTime(Math.floor(Date.now() / 1000) + expIn)
      .sign(key.privateKey);

  beforeAll(async () => {
    [issuerKey, forgerKey] = await Promise.all([
      generateKeyPair('ES256'),
      generateKeyPair('ES256'),
    ]);
    const jwks = JSON.stringify({
      keys: [{ ...(await exportJWK(issuerKey.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }],
    });
    jwksServer = createServer((_request, response) => {
      jwksFetches++;
      response.writeHead(200, { 'content-type': 'application/json' }).end(jwks);
    });
    await new Promise<void>((resolve) => jwksServer.listen(0, '127.0.0.1', resolve));
    const jwksUrl = `http://127.0.0.1:${(jwksServer.address() as AddressInfo).port}/jwks.json`;
    pool = await startPool({
      replicas: 2,
      tenants: defaultTestTenants(),
      sections: { auth: { jwt: { jwks_url: jwksUrl, issuer: ISSUER, audience: AUDIENCE } } },
    });
  }, 60_000);
  afterAll(async () => {
    await pool?.stop();
    await new Promise((resolve) => jwksServer?.close(resolve));
  });

  it('a valid token for paying is served on both replicas, beside the API keys', async () => {
    const token = await sign({ tenant: 'paying', sub: 'user-1' });
    const results = await Promise.all([
      generate(url(0), token),
      generate(url(1), token),
      generate(url(0), TEST_KEYS.paying),
      generate(url(1), TEST_KEYS.free),
    ]);
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(JSON.parse(results[0]?.body ?? '{}').choices).toHaveLength(1);
    // The requests counted against the tenant the token names.
    const state = await expectConserved(pool);
    expect(tenantTotal(state, 'paying', (row) => row.outcomes.completed)).toBe(3);
    expect(tenantTotal(state, 'free', (row) => row.outcomes.completed)).toBe(1);
  });

  it.each<[string, () => Promise<string>, string]>([
    ['expired', () => sign({ tenant: 'paying' }, { expIn: -120 }), 'JWT expired'],
    [
      'signed by another key (same kid)',
      () => sign({ tenant: 'paying' }, { key: forgerKey }),
      'JWT signature is invalid',
    ],
    [
      'signed by another key (its own kid)',
      () => sign({ tenant: 'paying' }, { key: forgerKey, kid: 'k2' }),
      'JWT is signed by a key the JWKS does not hold',
    ],
    [
      'for another audience',
      () => sign({ tenant: 'paying' }, { aud: 'billing' }),
      'JWT audience is not accepted',
    ],
    [
      'naming an unknown tenant',
      () => sign({ tenant: 'ghost' }),
      "JWT names an unknown tenant 'ghost'",
    ],
  ])('a token %s gets 401 invalid_api_key on both replicas', async (_case, make, message) => {
    const token = await make();
    for (const i of [0, 1]) {
      const result = await generate(url(i), token);
      expect(result.status).toBe(401);
      expect(JSON.parse(result.body)).toEqual({
        error: { message, type: 'authentication_error', param: null, code: 'invalid_api_key' },
      });
      expect(result.body).not.toContain(token.split('.')[2]);
    }
  });

  it('a token for a tenant the admin API made on the other replica a moment ago is served', async () => {
    const created = await fetch(`${url(0)}/admin/tenants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_KEYS.admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'newcomer' }),
    });
    expect(created.status).toBe(201);
    // No wait: replica 1 finds the tenant in the store on its first request.
    const result = await generate(url(1), await sign({ tenant: 'newcomer' }));
    expect(result.status, result.body).toBe(200);
  });

  it('an unknown API key is still refused as one', async () => {
    const result = await generate(url(0), 'fg-not-a-key');
    expect(result.status).toBe(401);
    expect(JSON.parse(result.body).error.message).toBe('Incorrect API key provided');
  });

  it('the JWKS was fetched once per replica (cached; an unknown kid waits out the cooldown)', () => {
    expect(jwksFetches).toBe(2);
  });
});
