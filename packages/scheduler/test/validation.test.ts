import { RejectCode } from '@fairgate/core';
import { describe, expect, it } from 'vitest';
import { SchedulerError, ScriptCode, schedulerError } from '../src/codes.js';
import { countersFromFields, rejectionField } from '../src/counters.js';
import { poolKeys } from '../src/index.js';
import { formatNotice, parseNotice } from '../src/notices.js';
import { normalizeEnqueue, normalizePodLoads, normalizeRelease } from '../src/requests.js';
import { resolvePod, resolveSettings, resolveTenant } from '../src/settings.js';

describe('settings validation names the bad key', () => {
  it.each([
    [
      { fairness: 'fair' as never },
      /scheduler.fairness must be one of drr, round-robin, global-strict/,
    ],
    [
      { dispatchOrder: 'lifo' as never },
      /scheduler.dispatchOrder must be one of priority, fifo, slo-deadline/,
    ],
    [{ order: 'fifo' } as never, /scheduler.order was replaced by scheduler.dispatchOrder/],
    [{ quantum: 0 }, /scheduler.quantum must be an integer/],
    [{ queueTtlMs: 1.5 }, /scheduler.queueTtlMs must be an integer/],
    [{ leaseTtlMs: -1 }, /scheduler.leaseTtlMs/],
    [{ initialBudget: Number.NaN }, /scheduler.initialBudget/],
    [
      { admission: { policy: 'maybe' as never } },
      /scheduler.admission.policy must be one of always-admit, tier-shed, gaie-legacy, reject-all/,
    ],
    [{ admission: { tierShedThreshold: -1 } }, /scheduler.admission.tierShedThreshold/],
    [{ admission: { tierShedMinPriority: 1.5 } }, /scheduler.admission.tierShedMinPriority/],
    [{ admission: 'tier-shed' as never }, /scheduler.admission must be an object/],
    [{ saturation: { queueDepthThreshold: 0 } }, /scheduler.saturation.queueDepthThreshold/],
    [{ saturation: { kvCacheUtilThreshold: 1.2 } }, /scheduler.saturation.kvCacheUtilThreshold/],
    [{ saturation: { staleMs: 0 } }, /scheduler.saturation.staleMs/],
    [{ gating: { enabled: 'yes' as never } }, /scheduler.gating.enabled must be a boolean/],
    [{ gating: { defaultCeiling: -0.5 } }, /scheduler.gating.defaultCeiling/],
    [{ gating: { bandCeilings: { high: 1 } } }, /scheduler.gating.bandCeilings keys/],
    [{ gating: { bandCeilings: { '2000': 1 } } }, /scheduler.gating.bandCeilings keys/],
    [{ gating: { bandCeilings: { '-1': Number.NaN } } }, /scheduler.gating.bandCeilings.-1/],
    [{ queueShedding: 1 as never }, /scheduler.queueShedding must be a boolean/],
    [{ inflightEviction: 'on' as never }, /scheduler.inflightEviction must be a boolean/],
  ])('%j', (input, message) => {
    expect(() => resolveSettings(input)).toThrow(message);
  });

  it('fills defaults and keeps given values', () => {
    expect(resolveSettings({ quantum: 4, initialBudget: undefined })).toMatchObject({
      fairness: 'drr',
      dispatchOrder: 'priority',
      quantum: 4,
      initialBudget: 64,
      admission: { policy: 'always-admit', tierShedThreshold: 8, tierShedMinPriority: 3 },
      saturation: { queueDepthThreshold: 5, kvCacheUtilThreshold: 0.8, staleMs: 1_000 },
      gating: { enabled: false, bandCeilings: {}, defaultCeiling: 1 },
      queueShedding: false,
      inflightEviction: false,
      prefix: {
        enabled: false,
        weight: 0.5,
        pressureWeight: 0.25,
        entriesPerPod: 0,
        ttlMs: 3_600_000,
      },
    });
  });

  it.each([
    [{ prefix: { weight: -1 } }, /scheduler.prefix.weight/],
    [{ prefix: { pressureWeight: Number.NaN } }, /scheduler.prefix.pressureWeight/],
    [{ prefix: { entriesPerPod: -1 } }, /scheduler.prefix.entriesPerPod/],
    [{ prefix: { ttlMs: 10 } }, /scheduler.prefix.ttlMs/],
    [{ prefix: { enabled: 'yes' } }, /scheduler.prefix.enabled/],
  ])('rejects prefix settings %j', (input, message) => {
    expect(() => resolveSettings(input as never)).toThrow(message);
  });

  it('merges nested groups with their defaults and normalizes band keys', () => {
    const settings = resolveSettings({
      admission: { policy: 'tier-shed' },
      gating: { enabled: true, bandCeilings: { '03': 0.9, '-1': 0.5 } },
    });
    expect(settings.admission).toEqual({
      policy: 'tier-shed',
      tierShedThreshold: 8,
      tierShedMinPriority: 3,
    });
    expect(settings.gating).toEqual({
      enabled: true,
      bandCeilings: { '3': 0.9, '-1': 0.5 },
      defaultCeiling: 1,
    });
  });

  it('drops unknown keys', () => {
    expect(resolveSettings({ nonsense: 1 } as never)).not.toHaveProperty('nonsense');
  });

  it('tenants and pods', () => {
    expect(resolveTenant({ id: 'acme' })).toEqual({
      id: 'acme',
      weight: 1,
      queueMax: null,
      maxConcurrent: null,
      maxKvBlocks: null,
      tokenBucket: null,
      limits: { tokensPerDay: null, tokensPerMonth: null, requestsPerMinute: null },
    });
    expect(
      resolveTenant({ id: 'acme', tokenBucket: { capacity: 10, refillPerSecond: 0 } }).tokenBucket,
    ).toEqual({ capacity: 10, refillPerSecond: 0 });
    expect(resolveTenant({ id: 'acme', limits: { tokensPerMonth: 5 } }).limits).toEqual({
      tokensPerDay: null,
      tokensPerMonth: 5,
      requestsPerMinute: null,
    });
    for (const [limits, key] of [
      [{ tokensPerDay: 0 }, 'limits.tokensPerDay'],
      [{ tokensPerMonth: 1.5 }, 'limits.tokensPerMonth'],
      [{ tokensPerMonth: 2e12 }, 'limits.tokensPerMonth'],
      [{ requestsPerMinute: -1 }, 'limits.requestsPerMinute'],
    ] as const) {
      expect(() => resolveTenant({ id: 'acme', limits })).toThrow(`tenant acme: ${key}`);
    }
    expect(() =>
      resolveTenant({ id: 'acme', tokenBucket: { capacity: 0, refillPerSecond: 1 } }),
    ).toThrow(/tenant acme: tokenBucket.capacity/);
    expect(() =>
      resolveTenant({ id: 'acme', tokenBucket: { capacity: 5, refillPerSecond: 0.5 } }),
    ).toThrow(/tenant acme: tokenBucket.refillPerSecond/);
    expect(() => resolveTenant({ id: 'acme', weight: 0 })).toThrow(/tenant acme: weight/);
    expect(() => resolveTenant({ id: 'acme', maxKvBlocks: -1 })).toThrow(
      /tenant acme: maxKvBlocks/,
    );
    expect(() => resolveTenant({ id: 'a{b}' })).toThrow(/tenant.id must be/);
    expect(resolvePod({ name: 'pod-0', cap: 8 })).toEqual({ name: 'pod-0', cap: 8, healthy: true });
    expect(() => resolvePod({ name: 'pod-0', cap: 1.5 })).toThrow(/pod pod-0: cap/);
  });
});

describe('requests', () => {
  const base = { id: 'r1', tenant: 't', band: 3, replica: 'gw-1' };

  it('fills defaults', () => {
    expect(normalizeEnqueue(base)).toEqual({
      ...base,
      sloClass: 'standard',
      cost: 1,
      kvBlocks: 0,
      deadlineMs: undefined,
      ttlMs: undefined,
      podHint: '',
      tokens: 0,
      prefix: [],
      budgetTokens: 0,
      inputTokens: 0,
      maxTokens: 0,
      adapter: '',
    });
  });

  it.each([
    [{ band: 2.5 }, /request.band/],
    [{ cost: 0 }, /request.cost/],
    [{ kvBlocks: -1 }, /request.kvBlocks/],
    [{ ttlMs: 0 }, /request.ttlMs/],
    [{ inputTokens: -1 }, /request.inputTokens/],
    [{ maxTokens: 1.5 }, /request.maxTokens/],
    [{ budgetTokens: -1 }, /request.budgetTokens/],
    [{ replica: 'a|b' }, /request.replica/],
    [{ sloClass: 'x y' }, /request.sloClass/],
    [{ tokens: -1 }, /request.tokens/],
    [{ tokens: 1.5 }, /request.tokens/],
    [{ prefix: ['ok', 'a,b'] }, /request.prefix\[1\]/],
    [{ prefix: [''] }, /request.prefix\[0\]/],
    [{ prefix: ['x'.repeat(65)] }, /request.prefix\[0\]/],
    // A caller without types (a string where the array goes).
    [{ prefix: 'abc' as unknown as string[] }, /request.prefix must be an array/],
    [{ prefix: Array.from({ length: 513 }, (_, i) => `h${i}`) }, /at most 512/],
  ])('rejects %j', (patch, message) => {
    expect(() => normalizeEnqueue({ ...base, ...patch })).toThrow(message);
  });

  it('accepts only caller outcomes at release', () => {
    expect(normalizeRelease('r1', { outcome: 'completed' }).outcome).toBe('completed');
    expect(() => normalizeRelease('r1', { outcome: 'expired' as never })).toThrow(
      /release outcome/,
    );
    expect(() =>
      normalizeRelease('r1', { outcome: 'completed', usage: { inputTokens: -3 } }),
    ).toThrow(/usage.inputTokens/);
    expect(() => normalizeRelease('r1', { outcome: 'completed', actualTokens: -1 })).toThrow(
      /actualTokens/,
    );
    expect(normalizeRelease('r1', { outcome: 'completed', actualTokens: 7 }).actualTokens).toBe(7);
  });

  it('validates pod load reports naming the pod', () => {
    const load = { pod: 'pod-a', waiting: 1, running: 2, kvUtilization: 0.5 };
    expect(normalizePodLoads([load])).toEqual([load]);
    expect(() => normalizePodLoads([{ ...load, waiting: -1 }])).toThrow(/pod pod-a: waiting/);
    expect(() => normalizePodLoads([{ ...load, running: 0.5 }])).toThrow(/pod pod-a: running/);
    expect(() => normalizePodLoads([{ ...load, kvUtilization: Number.NaN }])).toThrow(
      /pod pod-a: kvUtilization/,
    );
    expect(() => normalizePodLoads([{ ...load, pod: 'a|b' }])).toThrow(/load.pod/);
  });
});

describe('wire formats', () => {
  it('notices round-trip and malformed ones are refused', () => {
    for (const notice of [
      { kind: 'grant', id: 'a', pod: 'pod-1' },
      { kind: 'expired', id: 'b' },
      { kind: 'evict', id: 'c' },
      { kind: 'shed', id: 'd' },
    ] as const) {
      expect(parseNotice(formatNotice(notice))).toEqual(notice);
    }
    expect(() => parseNotice('grant|a')).toThrow(/malformed/);
    expect(() => parseNotice('hello')).toThrow(/malformed/);
  });

  it('counter fields parse back into rows sorted by tenant and class', () => {
    const rows = countersFromFields([
      ['admitted|b|standard', 2],
      [rejectionField('b', 'standard', ScriptCode.BandFull), 1],
      ['completed|b|standard', 2],
      ['inputTokens|b|standard', 40],
      // Written by releases before offered was derived: ignored (offered is admitted plus
      // the rejections, 1 + 3 + 1 here).
      ['offered|a|batch', 1],
      ['admitted|a|batch', 1],
      ['expired|a|batch', 1],
      ['evicted|a|batch', 2],
      ['shed|a|batch', 2],
      [rejectionField('a', 'batch', ScriptCode.RateLimited), 3],
      [rejectionField('a', 'batch', ScriptCode.ShedByTier), 1],
    ]);
    expect(rows.map((r) => [r.tenant, r.sloClass])).toEqual([
      ['a', 'batch'],
      ['b', 'standard'],
    ]);
    expect(rows[1]).toMatchObject({
      offered: 3,
      admitted: 2,
      rejected: { [RejectCode.BandFull]: 1 },
      inputTokens: 40,
    });
    expect(rows[0]?.offered).toBe(5);
    expect(rows[0]?.outcomes.expired).toBe(1);
    expect(rows[0]).toMatchObject({
      shed: 2,
      outcomes: { evicted: 2 },
      rejected: { [RejectCode.RateLimited]: 3, [RejectCode.ShedByTier]: 1 },
    });
    expect(rows[1]?.shed).toBe(0);
  });

  it('pool keys carry only the pool name in the hash tag', () => {
    const keys = poolKeys('prod-eu');
    expect(keys.requestPrefix).toBe('{fg:prod-eu}:req:');
    expect(Object.values(keys).every((key) => key.startsWith('{fg:prod-eu}:'))).toBe(true);
    expect(() => poolKeys('a}b')).toThrow(/pool must be/);
  });

  it('script codes become one error type', () => {
    const error = schedulerError(ScriptCode.UnknownTenant, 'enqueue r1');
    expect(error).toBeInstanceOf(SchedulerError);
    expect(error.code).toBe(ScriptCode.UnknownTenant);
    expect(error.message).toBe('enqueue r1: unknown tenant: call upsertTenants() first');
  });
});
