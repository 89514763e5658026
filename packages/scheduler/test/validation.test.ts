import { RejectCode } from '@fairgate/core';
import { describe, expect, it } from 'vitest';
import { countersFromFields, rejectionField } from '../src/counters.js';
import {
  poolKeys,
  resolveSettings,
  SchedulerError,
  ScriptCode,
  schedulerError,
} from '../src/index.js';
import { formatNotice, parseNotice } from '../src/notices.js';
import { normalizeEnqueue, normalizeRelease } from '../src/requests.js';
import { resolvePod, resolveTenant } from '../src/settings.js';

describe('settings validation names the bad key', () => {
  it.each([
    [
      { fairness: 'fair' as never },
      /scheduler.fairness must be one of drr, round-robin, global-strict/,
    ],
    [{ order: 'lifo' as never }, /scheduler.order must be one of fifo, slo-deadline/],
    [{ quantum: 0 }, /scheduler.quantum must be an integer/],
    [{ queueTtlMs: 1.5 }, /scheduler.queueTtlMs must be an integer/],
    [{ leaseTtlMs: -1 }, /scheduler.leaseTtlMs/],
    [{ initialBudget: Number.NaN }, /scheduler.initialBudget/],
  ])('%j', (input, message) => {
    expect(() => resolveSettings(input)).toThrow(message);
  });

  it('fills defaults and keeps given values', () => {
    expect(resolveSettings({ quantum: 4, initialBudget: undefined })).toMatchObject({
      fairness: 'drr',
      order: 'fifo',
      quantum: 4,
      initialBudget: 32,
    });
  });

  it('tenants and pods', () => {
    expect(resolveTenant({ id: 'acme' })).toEqual({
      id: 'acme',
      weight: 1,
      queueMax: null,
      maxConcurrent: null,
      maxKvBlocks: null,
    });
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
    });
  });

  it.each([
    [{ band: 2.5 }, /request.band/],
    [{ cost: 0 }, /request.cost/],
    [{ kvBlocks: -1 }, /request.kvBlocks/],
    [{ ttlMs: 0 }, /request.ttlMs/],
    [{ replica: 'a|b' }, /request.replica/],
    [{ sloClass: 'x y' }, /request.sloClass/],
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
  });
});

describe('wire formats', () => {
  it('notices round-trip and malformed ones are refused', () => {
    for (const notice of [
      { kind: 'grant', id: 'a', pod: 'pod-1' },
      { kind: 'expired', id: 'b' },
      { kind: 'evict', id: 'c' },
    ] as const) {
      expect(parseNotice(formatNotice(notice))).toEqual(notice);
    }
    expect(() => parseNotice('grant|a')).toThrow(/malformed/);
    expect(() => parseNotice('hello')).toThrow(/malformed/);
  });

  it('counter fields parse back into rows sorted by tenant and class', () => {
    const rows = countersFromFields([
      ['offered|b|standard', 3],
      ['admitted|b|standard', 2],
      [rejectionField('b', 'standard', ScriptCode.BandFull), 1],
      ['completed|b|standard', 2],
      ['inputTokens|b|standard', 40],
      ['offered|a|batch', 1],
      ['admitted|a|batch', 1],
      ['expired|a|batch', 1],
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
    expect(rows[0]?.outcomes.expired).toBe(1);
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
