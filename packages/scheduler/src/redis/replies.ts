import {
  currentBucket,
  DEFAULT_SATURATION,
  type FlowCounters,
  type LimitCounters,
  poolSaturation,
  type TenantLimits,
  wholeTokens,
} from '@fairgate/core';
import type { PodSnapshot, SchedulerSnapshot, TenantSnapshot } from '../contract.js';
import { compareBytes, countersFromFields } from '../counters.js';
import { standingAt } from '../limits.js';
import { decodeSettings } from './settings-hash.js';

/** Reply shapes of the scripts, decoded into the contract's types. */

export function flatToMap(flat: unknown): Map<string, string> {
  const map = new Map<string, string>();
  const items = Array.isArray(flat) ? (flat as string[]) : [];
  for (let i = 0; i + 1 < items.length; i += 2) map.set(String(items[i]), String(items[i + 1]));
  return map;
}

const num = (value: string | undefined, fallback = 0): number =>
  value === undefined || value === '' ? fallback : Number(value);
const limit = (value: string | undefined): number | null =>
  value === undefined || value === '' ? null : Number(value);

/**
 * Pods hash ('cap:<pod>', 'healthy:<pod>', 'inflight:<pod>' and the scraped 'waiting:',
 * 'running:', 'kv:', 'scrapedAt:', 'pxcap:', 'lslots:') to rows sorted by name
 * (lua/includes/pods.lua), with each pod's adapters (pod -> names joined by ',').
 */
export function decodePods(
  pods: Map<string, string>,
  adapters: Map<string, string> = new Map(),
): PodSnapshot[] {
  const byName = new Map<string, PodSnapshot>();
  const scraped = new Map<string, Map<string, number>>();
  for (const [field, value] of pods) {
    const sep = field.indexOf(':');
    if (sep < 0) continue;
    const kind = field.slice(0, sep);
    const name = field.slice(sep + 1);
    const pod = byName.get(name) ?? {
      name,
      cap: 0,
      healthy: false,
      leaving: false,
      inflight: 0,
      load: null,
      prefixCapacity: null,
      loraSlots: null,
      adapters: [],
    };
    byName.set(name, pod);
    if (kind === 'cap') pod.cap = Number(value);
    else if (kind === 'healthy') pod.healthy = value === '1';
    else if (kind === 'inflight') pod.inflight = Number(value);
    else if (kind === 'leaving') pod.leaving = value === '1';
    else if (kind === 'pxcap') pod.prefixCapacity = Number(value);
    else if (kind === 'lslots') pod.loraSlots = Number(value);
    else if (['waiting', 'running', 'kv', 'scrapedAt'].includes(kind)) {
      const fields = scraped.get(name) ?? new Map<string, number>();
      scraped.set(name, fields.set(kind, Number(value)));
    }
  }
  for (const [name, fields] of scraped) {
    const scrapedAtMs = fields.get('scrapedAt');
    const pod = byName.get(name);
    if (pod && scrapedAtMs !== undefined) {
      pod.load = {
        waiting: fields.get('waiting') ?? 0,
        running: fields.get('running') ?? 0,
        kvUtilization: fields.get('kv') ?? 0,
        scrapedAtMs,
      };
    }
  }
  for (const [name, list] of adapters) {
    const pod = byName.get(name);
    if (pod && list !== '') pod.adapters = list.split(',').sort(compareBytes);
  }
  return [...byName.values()].sort((a, b) => compareBytes(a.name, b.name));
}

export function decodeSnapshot(reply: unknown): SchedulerSnapshot {
  const [
    now,
    config,
    ctl,
    pods,
    replicas,
    stats,
    tenants,
    leader,
    epoch,
    backlogged,
    idle,
    adapters,
  ] = reply as unknown[];
  const nowMs = Number(now);
  const ctlMap = flatToMap(ctl);
  const settings = decodeSettings(flatToMap(config));
  const waitingByBand: Record<string, number> = {};
  for (const [field, value] of ctlMap) {
    if (field.startsWith('waiting:') && Number(value) !== 0) {
      waitingByBand[field.slice('waiting:'.length)] = Number(value);
    }
  }
  const podRows = decodePods(flatToMap(pods), flatToMap(adapters ?? []));
  return {
    nowMs,
    settings,
    budget: num(ctlMap.get('budget')),
    controllerState: ctlMap.get('controllerState') ?? null,
    inflight: num(ctlMap.get('inflight')),
    waiting: num(ctlMap.get('waiting')),
    waitingByBand,
    tenants: withService(
      decodeTenants(tenants as string[], nowMs),
      (backlogged as string[] | undefined) ?? [],
      flatToMap(idle ?? []),
    ),
    pods: podRows,
    replicas: [...flatToMap(replicas)].map(([replica, score]) => ({
      replica,
      livenessExpiresAtMs: Number(score),
    })),
    leader: typeof leader === 'string' ? leader : null,
    epoch: num(typeof epoch === 'string' ? epoch : undefined),
    counters: decodeCounters(flatToMap(stats)),
    saturation: poolSaturation(podRows, nowMs, settings?.saturation ?? DEFAULT_SATURATION),
  };
}

const TENANT_ROW = 22;

function decodeTenants(flat: string[], nowMs: number): TenantSnapshot[] {
  const rows: TenantSnapshot[] = [];
  for (let i = 0; i + TENANT_ROW - 1 < flat.length; i += TENANT_ROW) {
    const [
      tenant,
      weight,
      queueMax,
      maxConcurrent,
      maxKvBlocks,
      inflight,
      kvBlocks,
      waiting,
      capacity,
      refillPerSecond,
      level,
      at,
      ...rest
    ] = flat.slice(i, i + TENANT_ROW);
    const limitFields = rest.slice(0, 9);
    const outMean = rest[9];
    const [
      perDay,
      perMonth,
      perMinute,
      minuteId,
      minuteRequests,
      dayId,
      dayTokens,
      monthId,
      monthTokens,
    ] = limitFields.map((v) => (v === undefined || v === '' ? null : Number(v)));
    const limits: TenantLimits = {
      tokensPerDay: perDay ?? null,
      tokensPerMonth: perMonth ?? null,
      requestsPerMinute: perMinute ?? null,
    };
    const counters: LimitCounters = {
      minuteId: minuteId ?? -1,
      minuteRequests: minuteRequests ?? 0,
      dayId: dayId ?? -1,
      dayTokens: dayTokens ?? 0,
      monthId: monthId ?? -1,
      monthTokens: monthTokens ?? 0,
    };
    const tokenBucket =
      capacity === undefined || capacity === ''
        ? null
        : { capacity: Number(capacity), refillPerSecond: num(refillPerSecond) };
    const state =
      level === undefined || level === '' ? null : { levelMilli: num(level), updatedAtMs: num(at) };
    rows.push({
      tenant: tenant as string,
      weight: num(weight, 1),
      queueMax: limit(queueMax),
      maxConcurrent: limit(maxConcurrent),
      maxKvBlocks: limit(maxKvBlocks),
      tokenBucket,
      inflight: num(inflight),
      kvBlocks: num(kvBlocks),
      waiting: num(waiting),
      tokens: tokenBucket && wholeTokens(currentBucket(state, tokenBucket, nowMs)),
      limits,
      standing: standingAt(limits, counters, nowMs),
      meanOutputTokens: outMean === undefined || outMean === '' ? null : Number(outMean) / 1_000,
      service: [],
    });
  }
  return rows.sort((a, b) => compareBytes(a.tenant, b.tenant));
}

/**
 * Each tenant's service counters: the backlogged ones (band, tenant, counter triples) and the
 * idle store (`<band>:<tenant>` -> counter; `<band>:` is a band's last leaver, and an idle
 * entry of a backlogged tenant is stale).
 */
function withService(
  tenants: TenantSnapshot[],
  backlogged: string[],
  idle: Map<string, string>,
): TenantSnapshot[] {
  const byTenant = new Map(tenants.map((t) => [t.tenant, t]));
  const active = new Set<string>();
  for (let i = 0; i + 2 < backlogged.length; i += 3) {
    const [band, tenant, counter] = backlogged.slice(i, i + 3) as [string, string, string];
    active.add(`${band}:${tenant}`);
    byTenant
      .get(tenant)
      ?.service.push({ band: Number(band), counter: Number(counter), backlogged: true });
  }
  for (const [field, counter] of idle) {
    const sep = field.indexOf(':');
    const tenant = field.slice(sep + 1);
    if (tenant === '' || active.has(field)) continue;
    byTenant.get(tenant)?.service.push({
      band: Number(field.slice(0, sep)),
      counter: Number(counter),
      backlogged: false,
    });
  }
  for (const t of tenants) t.service.sort((a, b) => b.band - a.band);
  return tenants;
}

function decodeCounters(stats: Map<string, string>): FlowCounters[] {
  return countersFromFields([...stats].map(([field, value]) => [field, Number(value)] as const));
}
