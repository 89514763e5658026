import {
  assertInteger,
  assertValidName,
  DEFAULT_SLO_CLASS,
  isReleaseOutcome,
  MAX_PREFIX_BLOCKS,
  type ReleaseOutcome,
} from '@fairgate/core';
import type {
  EnqueueRequest,
  PodAdapterReport,
  PodLoadReport,
  ReleaseOptions,
  UsageBucket,
  UsageCount,
} from './contract.js';
import { MAX_TOKENS } from './settings.js';

const DAY_MS = 86_400_000;
/** A block hash as the gateway sends it (base64url); joined with ',' in the request record. */
const BLOCK_HASH = /^[A-Za-z0-9_-]{1,64}$/;

/** An enqueue with defaults filled, validated once for both implementations. */
export interface NormalizedEnqueue {
  id: string;
  tenant: string;
  band: number;
  replica: string;
  sloClass: string;
  cost: number;
  kvBlocks: number;
  deadlineMs: number | undefined;
  ttlMs: number | undefined;
  /** '' when none. */
  podHint: string;
  /** Token-bucket cost (0 = not charged). */
  tokens: number;
  /** Prompt block hashes (empty = none). */
  prefix: readonly string[];
  /** Token estimate reserved against the tenant's budgets (0 = none). */
  budgetTokens: number;
  /** The prompt's tokens and max_tokens (fairness in tokens; 0 = none). */
  inputTokens: number;
  maxTokens: number;
  /** The LoRA adapter it asks for; '' when none. */
  adapter: string;
}

export function normalizeEnqueue(request: EnqueueRequest): NormalizedEnqueue {
  assertValidName('request.id', request.id);
  assertValidName('request.tenant', request.tenant);
  assertValidName('request.replica', request.replica);
  assertInteger('request.band', request.band, -1_000, 1_000);
  const sloClass = request.sloClass ?? DEFAULT_SLO_CLASS;
  assertValidName('request.sloClass', sloClass);
  const cost = request.cost ?? 1;
  assertInteger('request.cost', cost, 1, 1_000_000_000);
  const kvBlocks = request.kvBlocks ?? 0;
  assertInteger('request.kvBlocks', kvBlocks, 0);
  if (request.deadlineMs !== undefined)
    assertInteger('request.deadlineMs', request.deadlineMs, 0, DAY_MS);
  if (request.ttlMs !== undefined) assertInteger('request.ttlMs', request.ttlMs, 1, DAY_MS);
  if (request.podHint !== undefined) assertValidName('request.podHint', request.podHint);
  const tokens = request.tokens ?? 0;
  assertInteger('request.tokens', tokens, 0, MAX_TOKENS);
  const budgetTokens = request.budgetTokens ?? 0;
  assertInteger('request.budgetTokens', budgetTokens, 0, MAX_TOKENS);
  const inputTokens = request.inputTokens ?? 0;
  assertInteger('request.inputTokens', inputTokens, 0, MAX_TOKENS);
  const maxTokens = request.maxTokens ?? 0;
  assertInteger('request.maxTokens', maxTokens, 0, MAX_TOKENS);
  if (request.adapter !== undefined) assertValidName('request.adapter', request.adapter);
  const prefix = request.prefix ?? [];
  if (!Array.isArray(prefix) || prefix.length > MAX_PREFIX_BLOCKS) {
    throw new TypeError(`request.prefix must be an array of at most ${MAX_PREFIX_BLOCKS} hashes`);
  }
  prefix.forEach((hash, i) => {
    if (typeof hash !== 'string' || !BLOCK_HASH.test(hash)) {
      throw new TypeError(
        `request.prefix[${i}] must be 1-64 characters of [A-Za-z0-9_-], got ${JSON.stringify(hash)}`,
      );
    }
  });
  return {
    id: request.id,
    tenant: request.tenant,
    band: request.band,
    replica: request.replica,
    sloClass,
    cost,
    kvBlocks,
    deadlineMs: request.deadlineMs,
    ttlMs: request.ttlMs,
    podHint: request.podHint ?? '',
    tokens,
    prefix,
    budgetTokens,
    inputTokens,
    maxTokens,
    adapter: request.adapter ?? '',
  };
}

export interface NormalizedRelease {
  outcome: ReleaseOutcome;
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  actualTokens: number | undefined;
  prefixCachedBlocks: number | undefined;
}

export function normalizeRelease(id: string, options: ReleaseOptions): NormalizedRelease {
  assertValidName('release id', id);
  if (!isReleaseOutcome(options.outcome)) {
    throw new TypeError(
      `release outcome must be completed, cancelled, evicted or upstream_error, got ${JSON.stringify(options.outcome)}`,
    );
  }
  const { inputTokens, outputTokens } = options.usage ?? {};
  if (inputTokens !== undefined) assertInteger('usage.inputTokens', inputTokens, 0);
  if (outputTokens !== undefined) assertInteger('usage.outputTokens', outputTokens, 0);
  const { actualTokens, prefixCachedBlocks } = options;
  if (actualTokens !== undefined) assertInteger('actualTokens', actualTokens, 0, MAX_TOKENS);
  if (prefixCachedBlocks !== undefined) {
    assertInteger('prefixCachedBlocks', prefixCachedBlocks, 0, MAX_PREFIX_BLOCKS);
  }
  return { outcome: options.outcome, inputTokens, outputTokens, actualTokens, prefixCachedBlocks };
}

/**
 * Whether a slot can pass to `request` unchanged (handover): a band >= 0 (a sheddable
 * request's lease is ordered for eviction by its grant), no token-bucket charge (taken
 * before the forward), no prompt prefix (its pod is chosen for its prompt), no LoRA adapter
 * (its pod must hold it). The rule
 * normalizeHandover enforces, as a cheap test for the gateway's request path. (A budget
 * estimate is counted by the handover without a check: the gateway's recycler decides from
 * its tenant's standing.)
 */
export function canHandOver(request: EnqueueRequest): boolean {
  return request.band >= 0 && !request.tokens && !request.prefix?.length && !request.adapter;
}

/**
 * Validates a handover: the finished request's release and the next request, which must be
 * one a slot can pass to unchanged (canHandOver), with no token-bucket true-up.
 */
export function normalizeHandover(
  from: string,
  options: ReleaseOptions,
  request: EnqueueRequest,
): { release: NormalizedRelease; request: NormalizedEnqueue } {
  const release = normalizeRelease(from, options);
  const next = normalizeEnqueue(request);
  if (release.actualTokens !== undefined) {
    throw new TypeError('handover: actualTokens is not allowed (a recycled slot is never charged)');
  }
  if (release.prefixCachedBlocks !== undefined) {
    throw new TypeError(
      'handover: prefixCachedBlocks is not allowed (a request routed by prefix is released)',
    );
  }
  if (next.tokens !== 0) throw new TypeError('handover: request.tokens must be 0');
  if (next.prefix.length > 0) throw new TypeError('handover: request.prefix must be empty');
  if (next.adapter !== '') throw new TypeError('handover: request.adapter must be empty');
  if (next.band < 0) throw new TypeError(`handover: request.band must be >= 0, got ${next.band}`);
  return { release, request: next };
}

/** Validates the leader's pod scrape (integers for counts, a finite utilization >= 0). */
export function normalizePodLoads(loads: readonly PodLoadReport[]): PodLoadReport[] {
  return loads.map((load) => {
    assertValidName('load.pod', load.pod);
    const field = (name: string) => `pod ${load.pod}: ${name}`;
    assertInteger(field('waiting'), load.waiting, 0);
    assertInteger(field('running'), load.running, 0);
    if (
      typeof load.kvUtilization !== 'number' ||
      !Number.isFinite(load.kvUtilization) ||
      load.kvUtilization < 0
    ) {
      throw new TypeError(
        `${field('kvUtilization')} must be a finite number >= 0, got ${String(load.kvUtilization)}`,
      );
    }
    if (load.prefixCapacity !== undefined) {
      assertInteger(field('prefixCapacity'), load.prefixCapacity, 1, 1_000_000_000);
    }
    return {
      pod: load.pod,
      waiting: load.waiting,
      running: load.running,
      kvUtilization: load.kvUtilization,
      ...(load.prefixCapacity !== undefined ? { prefixCapacity: load.prefixCapacity } : {}),
    };
  });
}

/** Most hours one readUsage may span (a leap year). */
export const MAX_USAGE_HOURS = 366 * 24;

const USAGE_KINDS = {
  r: 'requests',
  i: 'inputTokens',
  o: 'outputTokens',
  c: 'cachedTokens',
} as const satisfies Record<string, keyof UsageCount>;

/** The hash fields of a usage count: '<tenant>|<kind>|<model>' -> count (zeros left out). */
export function usageFields(count: UsageCount): Array<[string, number]> {
  assertValidName('usage tenant', count.tenant);
  if (typeof count.model !== 'string' || count.model.length === 0 || count.model.length > 256) {
    throw new TypeError(`usage model must be 1-256 characters, got ${JSON.stringify(count.model)}`);
  }
  const fields: Array<[string, number]> = [];
  for (const [kind, key] of Object.entries(USAGE_KINDS)) {
    const value = count[key];
    assertInteger(`usage.${key}`, value, 0);
    if (value > 0) fields.push([`${count.tenant}|${kind}|${count.model}`, value]);
  }
  return fields;
}

/**
 * Validates a meterUsage call: its retention, its flush id and every count; returns the
 * hash fields to add (usageFields of each count).
 */
export function normalizeUsage(
  counts: readonly UsageCount[],
  retentionS: number,
  flushId: string,
): Array<[string, number]> {
  assertInteger('usage retention (s)', retentionS, 1);
  assertValidName('usage flush id', flushId);
  return counts.flatMap(usageFields);
}

/** A usage hash back to counts per tenant and model. */
export function usageCounts(hour: number, fields: Iterable<[string, number]>): UsageBucket[] {
  const byKey = new Map<string, UsageBucket>();
  for (const [field, value] of fields) {
    const first = field.indexOf('|');
    const second = field.indexOf('|', first + 1);
    if (first < 0 || second < 0) continue;
    const tenant = field.slice(0, first);
    const kind = field.slice(first + 1, second) as keyof typeof USAGE_KINDS;
    const model = field.slice(second + 1);
    const key = `${tenant}|${model}`;
    let bucket = byKey.get(key);
    if (!bucket) {
      bucket = {
        hour,
        tenant,
        model,
        requests: 0,
        inputTokens: 0,
        outputTokens: 0,
        cachedTokens: 0,
      };
      byKey.set(key, bucket);
    }
    const name = USAGE_KINDS[kind];
    if (name) bucket[name] += value;
  }
  return [...byKey.values()];
}

/** Checks a readUsage range: whole hours, from <= to, at most MAX_USAGE_HOURS. */
export function usageHours(fromHour: number, toHour: number): number[] {
  assertInteger('fromHour', fromHour, 0);
  assertInteger('toHour', toHour, fromHour);
  if (fromHour % 3600 !== 0 || toHour % 3600 !== 0) {
    throw new TypeError('usage hours must be multiples of 3600 (Unix seconds)');
  }
  const hours: number[] = [];
  for (let h = fromHour; h <= toHour; h += 3600) hours.push(h);
  if (hours.length > MAX_USAGE_HOURS) {
    throw new TypeError(`a usage read spans at most ${MAX_USAGE_HOURS} hours, got ${hours.length}`);
  }
  return hours;
}

/** Validates the leader's adapter report (names as request.adapter, slots an integer >= 0). */
export function normalizePodAdapters(
  reports: readonly PodAdapterReport[],
  keepClaimsMs: number,
): PodAdapterReport[] {
  assertInteger('keepClaimsMs', keepClaimsMs, 0, DAY_MS);
  return reports.map((report) => {
    assertValidName('report.pod', report.pod);
    if (!Array.isArray(report.adapters)) {
      throw new TypeError(`pod ${report.pod}: adapters must be an array`);
    }
    for (const adapter of report.adapters) assertValidName(`pod ${report.pod}: adapter`, adapter);
    if (report.slots !== undefined) {
      assertInteger(`pod ${report.pod}: slots`, report.slots, 0, 1_000_000);
    }
    return {
      pod: report.pod,
      adapters: [...new Set(report.adapters)],
      ...(report.slots !== undefined ? { slots: report.slots } : {}),
    };
  });
}
