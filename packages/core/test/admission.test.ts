import { describe, expect, it } from 'vitest';
import {
  type AdmissionConfig,
  DEFAULT_ADMISSION,
  decideAdmission,
  maxPodLoad,
  type PodLoad,
  poolSaturation,
} from '../src/index.js';

const config = (policy: AdmissionConfig['policy']): AdmissionConfig => ({
  ...DEFAULT_ADMISSION,
  policy,
});
const calm = { maxPodLoad: 2, saturation: 0.3 };
const overloaded = { maxPodLoad: 20, saturation: 1.4 };

describe('decideAdmission', () => {
  it.each([
    // policy, priority, signals, admitted, reason
    ['always-admit', -3, overloaded, true, undefined],
    ['always-admit', 4, overloaded, true, undefined],
    ['reject-all', 4, calm, false, 'rejected_by_policy'],
    ['tier-shed', -2, calm, true, undefined],
    ['tier-shed', -2, overloaded, false, 'shed_by_tier'],
    ['tier-shed', 2, overloaded, false, 'shed_by_tier'],
    ['tier-shed', 3, overloaded, true, undefined],
    ['tier-shed', 4, overloaded, true, undefined],
    ['tier-shed', -1, { maxPodLoad: 8, saturation: 2 }, true, undefined], // at the threshold is not above it
    ['gaie-legacy', -1, overloaded, false, 'saturated'],
    ['gaie-legacy', -1, { maxPodLoad: 0, saturation: 1 }, false, 'saturated'],
    ['gaie-legacy', -1, { maxPodLoad: 0, saturation: 0.99 }, true, undefined],
    ['gaie-legacy', 0, overloaded, true, undefined],
    ['gaie-legacy', 3, overloaded, true, undefined],
  ] as const)(
    '%s, priority %i, %j -> admit %s (%s)',
    (policy, priority, signals, admitted, reason) => {
      const decision = decideAdmission(config(policy), priority, signals);
      expect(decision.admit).toBe(admitted);
      if (!decision.admit) expect(decision.reason).toBe(reason);
    },
  );

  it('tier-shed honours a configured minimum priority', () => {
    const c = { ...config('tier-shed'), tierShedMinPriority: 0 };
    expect(decideAdmission(c, 0, overloaded).admit).toBe(true);
    expect(decideAdmission(c, -1, overloaded).admit).toBe(false);
  });
});

const pod = (waiting: number, kv: number, scrapedAtMs = 1_000, running = 0): PodLoad => ({
  waiting,
  running,
  kvUtilization: kv,
  scrapedAtMs,
});

describe('poolSaturation', () => {
  it.each([
    ['idle pods', [pod(0, 0), pod(0, 0)], 0],
    ['queue-bound pod', [pod(5, 0)], 1],
    ['kv-bound pod', [pod(0, 0.4)], 0.5],
    ['the larger of the two signals', [pod(10, 0.4)], 2],
    ['mean over pods', [pod(5, 0), pod(0, 0)], 0.5],
    ['stale pod counts as 1', [pod(0, 0, -500), pod(0, 0)], 0.5],
    ['missing scrape counts as 1', [undefined, pod(0, 0)], 0.5],
    ['no pods is saturated', [], 1],
  ] as const)('%s -> %s', (_name, pods, expected) => {
    expect(poolSaturation(pods, 1_200)).toBeCloseTo(expected, 12);
  });
});

describe('maxPodLoad', () => {
  it('takes the busiest fresh pod and ignores stale ones', () => {
    expect(
      maxPodLoad([pod(3, 0, 1_000, 4), pod(1, 0, 1_000, 9), pod(50, 0, -5_000, 50)], 1_200, 1_000),
    ).toBe(10);
  });
});
