import type { FlowCounters } from '@fairgate/core';
import type { PodSnapshot, SchedulerSnapshot, TenantSnapshot } from '../contract.js';
import { compareBytes, countersFromFields } from '../counters.js';
import type { SchedulerSettings } from '../settings.js';

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

export function decodeSettings(config: Map<string, string>): SchedulerSettings | null {
  const fairness = config.get('fairness');
  if (fairness === undefined) return null;
  return {
    fairness: fairness as SchedulerSettings['fairness'],
    order: config.get('order') as SchedulerSettings['order'],
    quantum: num(config.get('quantum')),
    bandCapacity: num(config.get('bandCapacity')),
    maxQueueDepth: num(config.get('maxQueueDepth')),
    queueTtlMs: num(config.get('queueTtlMs')),
    leaseTtlMs: num(config.get('leaseTtlMs')),
    maxGrantsPerPass: num(config.get('maxGrantsPerPass')),
    janitorBatch: num(config.get('janitorBatch')),
    initialBudget: num(config.get('initialBudget')),
  };
}

/** Pods hash ('cap:<pod>', 'healthy:<pod>', 'inflight:<pod>') to rows sorted by name. */
export function decodePods(pods: Map<string, string>): PodSnapshot[] {
  const byName = new Map<string, PodSnapshot>();
  for (const [field, value] of pods) {
    const sep = field.indexOf(':');
    if (sep < 0) continue;
    const kind = field.slice(0, sep);
    const name = field.slice(sep + 1);
    const pod = byName.get(name) ?? { name, cap: 0, healthy: false, inflight: 0 };
    byName.set(name, pod);
    if (kind === 'cap') pod.cap = Number(value);
    else if (kind === 'healthy') pod.healthy = value === '1';
    else if (kind === 'inflight') pod.inflight = Number(value);
  }
  return [...byName.values()].sort((a, b) => compareBytes(a.name, b.name));
}

export function decodeSnapshot(reply: unknown): SchedulerSnapshot {
  const [now, config, ctl, pods, replicas, stats, tenants, leader, epoch] = reply as unknown[];
  const ctlMap = flatToMap(ctl);
  const settings = decodeSettings(flatToMap(config));
  const waitingByBand: Record<string, number> = {};
  for (const [field, value] of ctlMap) {
    if (field.startsWith('waiting:') && Number(value) !== 0) {
      waitingByBand[field.slice('waiting:'.length)] = Number(value);
    }
  }
  return {
    nowMs: Number(now),
    settings,
    budget: num(ctlMap.get('budget')),
    controllerState: ctlMap.get('controllerState') ?? null,
    inflight: num(ctlMap.get('inflight')),
    waiting: num(ctlMap.get('waiting')),
    waitingByBand,
    tenants: decodeTenants(tenants as string[]),
    pods: decodePods(flatToMap(pods)),
    replicas: [...flatToMap(replicas)].map(([replica, score]) => ({
      replica,
      livenessExpiresAtMs: Number(score),
    })),
    leader: typeof leader === 'string' ? leader : null,
    epoch: num(typeof epoch === 'string' ? epoch : undefined),
    counters: decodeCounters(flatToMap(stats)),
  };
}

function decodeTenants(flat: string[]): TenantSnapshot[] {
  const rows: TenantSnapshot[] = [];
  for (let i = 0; i + 7 < flat.length; i += 8) {
    const [tenant, weight, queueMax, maxConcurrent, maxKvBlocks, inflight, kvBlocks, waiting] =
      flat.slice(i, i + 8);
    rows.push({
      tenant: tenant as string,
      weight: num(weight, 1),
      queueMax: limit(queueMax),
      maxConcurrent: limit(maxConcurrent),
      maxKvBlocks: limit(maxKvBlocks),
      inflight: num(inflight),
      kvBlocks: num(kvBlocks),
      waiting: num(waiting),
    });
  }
  return rows.sort((a, b) => compareBytes(a.tenant, b.tenant));
}

function decodeCounters(stats: Map<string, string>): FlowCounters[] {
  return countersFromFields([...stats].map(([field, value]) => [field, Number(value)] as const));
}
