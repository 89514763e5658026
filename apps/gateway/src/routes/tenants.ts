import { randomBytes } from 'node:crypto';
import {
  apiKeyDigest,
  ConfigError,
  type FairgateConfig,
  parseRuntimeTenant,
} from '@fairgate/config';
import { type Context, Hono } from 'hono';
import type { GatewayDeps } from '../context.js';
import { badRequest, noSuchTenantObject, tenancyUnavailable, tenantConflict } from '../errors.js';
import type { Tenancy } from '../tenancy/tenancy.js';
import type { StoredKey, StoredTenant } from '../tenancy/tenant-store.js';

/**
 * The tenant admin API (admin token; docs/tenants.md): tenants and API keys made at run
 * time, shared by every replica through Redis. A key is returned once, at creation or
 * rotation, and only its digest is stored. Every write is in this replica's copy when the
 * answer is sent, and in every other replica's within its staleness bound (pub/sub, else
 * the 1 s version poll).
 */
export function registerTenantRoutes(app: Hono, deps: GatewayDeps): void {
  const routes = new Hono();
  routes.get('/tenants', (c) => c.json(listTenants(deps, need(deps))));
  routes.post('/tenants', async (c) => c.json(await createTenant(deps, need(deps), c), 201));
  routes.get('/tenants/:id', async (c) => {
    const tenancy = need(deps);
    const id = c.req.param('id');
    await known(deps, tenancy, id);
    return c.json(tenantBody(deps, tenancy, id));
  });
  routes.patch('/tenants/:id', async (c) => c.json(await updateTenant(deps, need(deps), c)));
  routes.delete('/tenants/:id', async (c) => c.json(await deleteTenant(deps, need(deps), c)));
  routes.post('/tenants/:id/keys', async (c) => c.json(await createKey(deps, need(deps), c), 201));
  routes.get('/tenants/:id/keys', async (c) => c.json(await listKeys(deps, need(deps), c)));
  routes.post('/keys/:id/rotate', async (c) => c.json(await rotateKey(need(deps), c), 201));
  routes.delete('/keys/:id', async (c) => c.json(await revokeKey(need(deps), c)));
  app.route('/admin', routes);
}

function need(deps: GatewayDeps): Tenancy {
  if (!deps.tenancy) throw tenancyUnavailable();
  return deps.tenancy;
}

type Source = 'config' | 'api';

function listTenants(deps: GatewayDeps, tenancy: Tenancy) {
  const config = deps.config();
  return {
    object: 'list',
    data: config.tenants.map((tenant) => describe(config, tenancy, tenant.id)),
  };
}

function tenantBody(deps: GatewayDeps, tenancy: Tenancy, id: string) {
  const config = deps.config();
  if (!config.tenants.some((t) => t.id === id)) throw noSuchTenantObject('tenant', id);
  return describe(config, tenancy, id);
}

/** A tenant as the API shows it: its settings in force, where it comes from, its keys' count. */
function describe(config: FairgateConfig, tenancy: Tenancy, id: string) {
  const tenant = config.tenants.find((t) => t.id === id)!;
  const stored = tenancy.view.snapshot.tenants.get(id);
  const source: Source = tenancy.isRuntime(config, id) ? 'api' : 'config';
  const { api_key_sha256, ...settings } = tenant;
  const keys = [...tenancy.view.snapshot.keys.values()].filter((k) => k.tenant === id).length;
  return {
    object: 'tenant',
    ...settings,
    source,
    keys: { config: api_key_sha256.length, api: keys },
    ...(source === 'api' && stored
      ? { created_at: seconds(stored.createdAt), updated_at: seconds(stored.updatedAt) }
      : {}),
  };
}

async function createTenant(deps: GatewayDeps, tenancy: Tenancy, c: Context) {
  const body = await jsonBody(c);
  const config = deps.config();
  const settings = validTenant(config, body);
  if (config.tenants.some((t) => t.id === settings.id)) {
    throw tenantConflict('tenant_exists', `A tenant '${settings.id}' exists`);
  }
  const now = Date.now();
  const stored: StoredTenant = { settings, createdAt: now, updatedAt: now };
  if (!(await tenancy.store.createTenant(stored))) {
    throw tenantConflict('tenant_exists', `A tenant '${settings.id}' exists`);
  }
  await tenancy.view.reload();
  return tenantBody(deps, tenancy, settings.id);
}

async function updateTenant(deps: GatewayDeps, tenancy: Tenancy, c: Context) {
  const id = c.req.param('id') as string;
  await known(deps, tenancy, id);
  const stored = runtimeTenant(deps, tenancy, id);
  const body = await jsonBody(c);
  if ('id' in body && body.id !== id) throw badRequest('A tenant keeps its id', 'id');
  const settings = validTenant(deps.config(), { ...stored.settings, ...body, id });
  await tenancy.store.putTenant({ ...stored, settings, updatedAt: Date.now() });
  await tenancy.view.reload();
  return tenantBody(deps, tenancy, id);
}

async function deleteTenant(deps: GatewayDeps, tenancy: Tenancy, c: Context) {
  const id = c.req.param('id') as string;
  await known(deps, tenancy, id);
  runtimeTenant(deps, tenancy, id);
  const keys = [...tenancy.view.snapshot.keys.values()].filter((k) => k.tenant === id);
  if (!(await tenancy.store.deleteTenant(id, keys))) throw noSuchTenantObject('tenant', id);
  await tenancy.view.reload();
  return { object: 'tenant.deleted', id, deleted: true, keys_revoked: keys.length };
}

async function createKey(deps: GatewayDeps, tenancy: Tenancy, c: Context) {
  const tenant = c.req.param('id') as string;
  if (!(await known(deps, tenancy, tenant))) throw noSuchTenantObject('tenant', tenant);
  const body = await jsonBody(c);
  const { secret, key } = newKey(tenant, keyName(body), expiresAt(body));
  await tenancy.store.putKeys([key]);
  await tenancy.view.reload();
  return keyBody(key, undefined, secret);
}

async function listKeys(deps: GatewayDeps, tenancy: Tenancy, c: Context) {
  const tenant = c.req.param('id') as string;
  if (!(await known(deps, tenancy, tenant))) throw noSuchTenantObject('tenant', tenant);
  const used = await tenancy.store.lastUsed();
  const keys = [...tenancy.view.snapshot.keys.values()]
    .filter((k) => k.tenant === tenant)
    .sort((a, b) => a.createdAt - b.createdAt);
  return { object: 'list', data: keys.map((k) => keyBody(k, used.get(k.id))) };
}

/**
 * A new key for the same tenant; the old one keeps working for `grace_s` (default 3600,
 * 0 = refused at once) so clients can move over without a 401.
 */
async function rotateKey(tenancy: Tenancy, c: Context) {
  const old = await knownKey(tenancy, c.req.param('id') as string);
  const body = await jsonBody(c);
  const grace = body.grace_s ?? 3_600;
  if (typeof grace !== 'number' || !Number.isFinite(grace) || grace < 0 || grace > 30 * 86_400) {
    throw badRequest('grace_s must be a number of seconds in [0, 2592000]', 'grace_s');
  }
  const until = Date.now() + grace * 1_000;
  const retiring: StoredKey = {
    ...old,
    expiresAt: old.expiresAt === null ? until : Math.min(old.expiresAt, until),
  };
  const { secret, key } = newKey(old.tenant, keyName(body) ?? old.name, expiresAt(body));
  await tenancy.store.putKeys([key, retiring]);
  await tenancy.view.reload();
  return { ...keyBody(key, undefined, secret), replaces: keyBody(retiring) };
}

async function revokeKey(tenancy: Tenancy, c: Context) {
  const key = await knownKey(tenancy, c.req.param('id') as string);
  if (!(await tenancy.store.deleteKey(key))) throw noSuchTenantObject('key', key.id);
  await tenancy.view.reload();
  return { object: 'key.deleted', id: key.id, deleted: true };
}

/**
 * Whether tenant `id` is in force; one this replica has not heard of yet (made on another
 * replica a moment ago) is read from the store first.
 */
async function known(deps: GatewayDeps, tenancy: Tenancy, id: string): Promise<boolean> {
  const has = () => deps.config().tenants.some((t) => t.id === id);
  if (!has()) await tenancy.view.reload();
  return has();
}

/** The run-time record of tenant `id`; 409 for a file tenant, 404 for none. */
function runtimeTenant(deps: GatewayDeps, tenancy: Tenancy, id: string): StoredTenant {
  const config = deps.config();
  const stored = tenancy.view.snapshot.tenants.get(id);
  if (config.tenants.some((t) => t.id === id) && !tenancy.isRuntime(config, id)) {
    throw tenantConflict(
      'tenant_in_config_file',
      `Tenant '${id}' is defined in the config file: change it there (the API can add keys to it)`,
    );
  }
  if (!stored) throw noSuchTenantObject('tenant', id);
  return stored;
}

/** Key `id`; one this replica has not heard of yet (made elsewhere a moment ago) is read. */
async function knownKey(tenancy: Tenancy, id: string): Promise<StoredKey> {
  if (!tenancy.view.snapshot.keys.has(id)) await tenancy.view.reload();
  const key = tenancy.view.snapshot.keys.get(id);
  if (!key) throw noSuchTenantObject('key', id);
  return key;
}

/** The settings of a run-time tenant, checked as a file tenant is; 400 naming the key. */
function validTenant(config: FairgateConfig, body: Record<string, unknown>) {
  const { object: _object, source: _source, keys: _keys, created_at, updated_at, ...raw } = body;
  try {
    const tenant = parseRuntimeTenant(config, raw);
    const { api_key_sha256: _digests, ...settings } = tenant;
    return { ...settings, id: tenant.id };
  } catch (error) {
    if (error instanceof ConfigError) throw badRequest(error.message, error.key || null);
    throw error;
  }
}

function newKey(tenant: string, name: string | null, expires: number | null) {
  const secret = `fg-${randomBytes(24).toString('base64url')}`;
  const key: StoredKey = {
    id: `key_${randomBytes(9).toString('base64url')}`,
    tenant,
    digest: apiKeyDigest(secret),
    name,
    prefix: secret.slice(0, 10),
    createdAt: Date.now(),
    expiresAt: expires,
  };
  return { secret, key };
}

function keyName(body: Record<string, unknown>): string | null {
  const name = body.name;
  if (name === undefined || name === null) return null;
  if (typeof name !== 'string' || name.length === 0 || name.length > 200) {
    throw badRequest('name must be a string of 1 to 200 characters', 'name');
  }
  return name;
}

/** `expires_in_s` (seconds from now) or `expires_at` (Unix seconds); neither = never. */
function expiresAt(body: Record<string, unknown>): number | null {
  const { expires_in_s: inS, expires_at: atS } = body;
  if (inS !== undefined && atS !== undefined) {
    throw badRequest('give expires_in_s or expires_at, not both', 'expires_in_s');
  }
  if (inS !== undefined) {
    if (typeof inS !== 'number' || !Number.isFinite(inS) || inS <= 0) {
      throw badRequest('expires_in_s must be a positive number of seconds', 'expires_in_s');
    }
    return Date.now() + inS * 1_000;
  }
  if (atS !== undefined) {
    if (typeof atS !== 'number' || !Number.isFinite(atS) || atS * 1_000 <= Date.now()) {
      throw badRequest('expires_at must be a Unix time in seconds, in the future', 'expires_at');
    }
    return atS * 1_000;
  }
  return null;
}

/** A key as the API shows it; `secret` only in the answer that made it. */
function keyBody(key: StoredKey, lastUsed?: number, secret?: string) {
  return {
    object: 'api_key',
    id: key.id,
    tenant: key.tenant,
    name: key.name,
    prefix: key.prefix,
    created_at: seconds(key.createdAt),
    last_used_at: lastUsed === undefined ? null : seconds(lastUsed),
    expires_at: key.expiresAt === null ? null : seconds(key.expiresAt),
    ...(secret ? { key: secret } : {}),
  };
}

const seconds = (ms: number) => Math.floor(ms / 1_000);

async function jsonBody(c: Context): Promise<Record<string, unknown>> {
  const text = await c.req.text();
  if (text.trim() === '') return {};
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw badRequest('The body is not valid JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw badRequest('The body must be a JSON object');
  }
  return body as Record<string, unknown>;
}
