import { defaultTestTenants, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate, type Pool, sleep, startPool } from './support/pool.js';

/**
 * Tenants and keys made at run time through the admin API, across 3 gateway replicas on
 * one Redis (docs/tenants.md): a key made on one replica works on the others at once, a
 * revoked one is refused everywhere within 2 s, a rotated key's successor is never refused,
 * and keys churning beside 10,000 authenticated requests never fail a valid one.
 */
describe('tenants and keys at run time', () => {
  let pool: Pool;
  const url = (i: number) => pool.gateways[i]?.url as string;

  const admin = async (i: number, method: string, path: string, body?: unknown) => {
    const response = await fetch(`${url(i)}/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${TEST_KEYS.admin}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, any> };
  };
  /** An authenticated request that never reaches a pod: GET /v1/models. */
  const models = async (i: number, key: string) =>
    (await fetch(`${url(i)}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status;

  beforeAll(async () => {
    pool = await startPool({ replicas: 3, tenants: defaultTestTenants() });
  }, 60_000);
  afterAll(() => pool?.stop());

  it('creates a tenant and a key on one replica; both work on the others at once', async () => {
    const created = await admin(0, 'POST', '/tenants', { id: 'acme', weight: 3 });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body).toMatchObject({ id: 'acme', weight: 3, source: 'api' });
    const key = await admin(0, 'POST', '/tenants/acme/keys', { name: 'ci' });
    expect(key.status).toBe(201);
    expect(key.body.key).toMatch(/^fg-/);
    expect(key.body.prefix).toBe(key.body.key.slice(0, 10));
    // No wait: the other replicas find a key they have not heard of yet in the store.
    expect(await Promise.all([1, 2].map((i) => models(i, key.body.key)))).toEqual([200, 200]);
    const served = await generate(url(2), key.body.key, {});
    expect(served.status).toBe(200);
    // Every replica's scheduler has the tenant with its weight.
    const state = await pool.state(1);
    expect(state.tenants.find((t) => t.tenant === 'acme')?.weight).toBe(3);

    const listed = await admin(1, 'GET', '/tenants/acme/keys');
    expect(listed.body.data).toHaveLength(1);
    expect(listed.body.data[0]).toMatchObject({ name: 'ci', prefix: key.body.prefix });
    expect(listed.body.data[0].key).toBeUndefined();
  });

  it('a tenant made at run time with limits has them on every replica', async () => {
    expect(
      (await admin(0, 'POST', '/tenants', { id: 'rated', limits: { tokens_per_day: 0 } })).body
        .error.param,
    ).toBe('limits.tokens_per_day');
    const created = await admin(0, 'POST', '/tenants', {
      id: 'rated',
      limits: { requests_per_minute: 5 },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const key = (await admin(0, 'POST', '/tenants/rated/keys', {})).body.key as string;
    // Well inside one minute.
    const intoMinute = Date.now() % 60_000;
    if (intoMinute > 50_000) await sleep(60_500 - intoMinute);
    const statuses = [];
    for (let n = 0; n < 7; n++) statuses.push((await generate(url(n % 3), key, {})).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429]);
    const state = await pool.state(2);
    expect(state.tenants.find((t) => t.tenant === 'rated')?.standing?.requests).toMatchObject({
      limit: 5,
      remaining: 0,
    });
  });

  it('refuses bad input with the key it names, and changes nothing', async () => {
    const cases: Array<[string, string, unknown, number, string | null]> = [
      ['POST', '/tenants', { id: 'x', default_class: 'gold' }, 400, 'default_class'],
      ['POST', '/tenants', { id: 'x', weight: 0 }, 400, 'weight'],
      ['POST', '/tenants', { id: 'bad id' }, 400, 'id'],
      ['POST', '/tenants', { id: 'x', api_key_sha256: ['ab'] }, 400, null],
      ['POST', '/tenants', { id: 'paying' }, 409, null],
      ['POST', '/tenants', { id: 'acme' }, 409, null],
      ['PATCH', '/tenants/paying', { weight: 5 }, 409, null],
      ['DELETE', '/tenants/paying', undefined, 409, null],
      ['PATCH', '/tenants/nobody', { weight: 5 }, 404, 'id'],
      ['POST', '/tenants/nobody/keys', {}, 404, 'id'],
      ['POST', '/tenants/acme/keys', { expires_in_s: -1 }, 400, 'expires_in_s'],
      ['POST', '/keys/key_nope/rotate', {}, 404, 'id'],
      ['DELETE', '/keys/key_nope', undefined, 404, 'id'],
    ];
    const before = await admin(0, 'GET', '/tenants');
    for (const [method, path, body, status, param] of cases) {
      const answer = await admin(0, method, path, body);
      expect(answer.status, `${method} ${path} ${JSON.stringify(answer.body)}`).toBe(status);
      if (param) expect(answer.body.error.param, `${method} ${path}`).toBe(param);
    }
    expect(await admin(1, 'GET', '/tenants')).toEqual(before);
  });

  it('a revoked key is refused on every replica within 2 s, and never accepted after', async () => {
    const key = (await admin(0, 'POST', '/tenants/acme/keys', { name: 'leaked' })).body;
    // Three clients, one per replica, until 3 s after the revocation.
    let revokedAt = Number.POSITIVE_INFINITY;
    const seen = [0, 1, 2].map(() => [] as Array<[number, number]>);
    const clients = [0, 1, 2].map(async (i) => {
      for (let n = 0; n < 2_000 && performance.now() < revokedAt + 3_000; n++) {
        seen[i]?.push([performance.now(), await models(i, key.key)]);
      }
    });
    await sleep(300);
    revokedAt = performance.now();
    expect((await admin(1, 'DELETE', `/keys/${key.id}`)).status).toBe(200);
    await Promise.all(clients);
    const refusedAfterMs = seen.map((results) => {
      const firstRefusal = results.find(([, status]) => status === 401);
      const refusedAt = firstRefusal ? firstRefusal[0] : Number.POSITIVE_INFINITY;
      // Nothing but 200 before the first refusal, nothing but 401 after it.
      expect(results.filter(([at, s]) => at >= refusedAt && s !== 401)).toEqual([]);
      expect(results.filter(([at, s]) => at < refusedAt && s !== 200)).toEqual([]);
      return Math.round(refusedAt - revokedAt);
    });
    console.log(`revoked key refused after (ms, per replica): ${refusedAfterMs.join(', ')}`);
    for (const ms of refusedAfterMs) expect(ms).toBeLessThan(2_000);
  });

  it('a rotated key: the successor works everywhere at once, the old one until its grace ends', async () => {
    const old = (await admin(0, 'POST', '/tenants/acme/keys', { name: 'app' })).body;
    const rotated = await admin(0, 'POST', `/keys/${old.id}/rotate`, { grace_s: 2 });
    expect(rotated.status).toBe(201);
    const successor = rotated.body.key as string;
    expect(rotated.body.name).toBe('app');
    expect(rotated.body.replaces.id).toBe(old.id);
    expect(await Promise.all([0, 1, 2].map((i) => models(i, successor)))).toEqual([200, 200, 200]);
    expect(await Promise.all([0, 1, 2].map((i) => models(i, old.key)))).toEqual([200, 200, 200]);
    await sleep(2_100);
    expect(await Promise.all([0, 1, 2].map((i) => models(i, old.key)))).toEqual([401, 401, 401]);
    expect(await Promise.all([0, 1, 2].map((i) => models(i, successor)))).toEqual([200, 200, 200]);
  });

  it('10,000 requests on valid keys while keys churn: none fails auth', async () => {
    const keys = [TEST_KEYS.paying];
    for (let k = 0; k < 3; k++) {
      keys.push((await admin(k, 'POST', '/tenants/acme/keys', { name: `k${k}` })).body.key);
    }
    // Beside the requests: new tenants and keys, rotations (their successors join the
    // valid keys at once) and revocations of keys nobody uses.
    let running = true;
    const churn = (async () => {
      for (let n = 0; running && n < 200; n++) {
        const spare = (await admin(n % 3, 'POST', '/tenants/acme/keys', {})).body;
        if (n % 2 === 0) {
          const next = await admin((n + 1) % 3, 'POST', `/keys/${spare.id}/rotate`, {});
          keys.push(next.body.key);
        } else await admin((n + 2) % 3, 'DELETE', `/keys/${spare.id}`);
      }
    })();
    const statuses: Record<string, number> = {};
    const chat: number[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        for (let n = c; n < 10_000; n += 8) {
          const key = keys[n % keys.length] as string;
          const status =
            n % 50 === 0 ? (await generate(url(n % 3), key, {})).status : await models(n % 3, key);
          if (n % 50 === 0) chat.push(status);
          statuses[status] = (statuses[status] ?? 0) + 1;
        }
      }),
    );
    running = false;
    await churn;
    expect(statuses).toEqual({ 200: 10_000 });
    expect(chat.length).toBe(200);
    expect(new Set(chat)).toEqual(new Set([200]));
  }, 120_000);
});
