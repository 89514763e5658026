import { describe, expect, it } from 'vitest';
import {
  type AdmissionConfig,
  DEFAULT_ADMISSION,
  decideAdmission,
  maxPodLoad,
  newestScrapeMs,
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
    ['tier-shed', -1, { maxPodLoad: 9, saturation: 0 }, false, 'shed_by_tier'], // saturation is not its signal
    ['gaie-legacy', -1, overloaded, false, 'saturated'],
    ['gaie-legacy', -1, { maxPodLoad: 0, saturation: 1 }, false, 'saturated'],
    ['gaie-legacy', -1, { maxPodLoad: 0, saturation: 0.99 }, true, undefined],
    ['gaie-legacy', 0, overloaded, true, undefined],
    ['gaie-legacy', 3, overloaded, true, undefined],
    ['gaie-legacy', -3, { maxPodLoad: 100, saturation: 0.5 }, true, undefined], // pod load is not its signal
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

const scraped = (waiting: number, kv: number, scrapedAtMs = 1_000, running = 0): PodLoad => ({
  healthy: true,
  inflight: 0,
  load: { waiting, running, kvUtilization: kv, scrapedAtMs },
});
const unscraped = (inflight = 0, healthy = true): PodLoad => ({ healthy, inflight, load: null });
const sick = (pod: PodLoad): PodLoad => ({ ...pod, healthy: false });
const busy = (pod: PodLoad, inflight: number): PodLoad => ({ ...pod, inflight });

describe('poolSaturation (now 1,200, stale after 1,000 ms)', () => {
  it.each<[string, PodLoad[], number]>([
    ['idle pods', [scraped(0, 0), scraped(0, 0)], 0],
    ['queue-bound pod', [scraped(5, 0)], 1],
    ['kv-bound pod', [scraped(0, 0.4)], 0.5],
    ['the larger of the two signals', [scraped(10, 0.4)], 2],
    ['running requests do not count', [scraped(0, 0, 1_000, 50)], 0],
    ['mean over pods', [scraped(5, 0), scraped(0, 0)], 0.5],
    ['a scrape exactly staleMs old is fresh', [scraped(5, 0, 200)], 1],
    ['a scrape older than staleMs counts as 1', [scraped(0, 0, 199), scraped(0, 0)], 0.5],
    ['a pod never scraped counts as 1', [unscraped(), scraped(0, 0)], 0.5],
    ['unhealthy pods are left out of the mean', [sick(scraped(50, 1)), scraped(0, 0.2)], 0.25],
    ['unhealthy unscraped pods are left out too', [sick(unscraped()), scraped(0, 0)], 0],
    ['no healthy pod is saturated', [sick(scraped(0, 0))], 1],
    ['no pods is saturated', [], 1],
    ['in-flight not yet running counts as queued', [busy(scraped(0, 0), 40)], 8],
    ['in-flight up to the scraped running adds nothing', [busy(scraped(0, 0, 1_000, 4), 4)], 0],
    ['in-flight beyond running', [busy(scraped(0, 0, 1_000, 4), 9)], 1],
    ['scraped waiting when larger than in-flight - running', [busy(scraped(6, 0), 3)], 1.2],
    ['in-flight on a stale pod still counts 1', [busy(scraped(0, 0, 100), 40)], 1],
  ])('%s -> %s', (_name, pods, expected) => {
    expect(poolSaturation(pods, 1_200)).toBeCloseTo(expected, 12);
  });

  it('honours configured thresholds', () => {
    const config = { queueDepthThreshold: 2, kvCacheUtilThreshold: 0.5, staleMs: 100 };
    expect(poolSaturation([scraped(1, 0.1, 1_150)], 1_200, config)).toBe(0.5);
    expect(poolSaturation([scraped(0, 0.45, 1_150)], 1_200, config)).toBeCloseTo(0.9, 12);
    expect(poolSaturation([scraped(0, 0, 1_000)], 1_200, config)).toBe(1);
  });
});

describe('maxPodLoad (now 1,200, stale after 1,000 ms)', () => {
  it.each<[string, PodLoad[], number]>([
    ['no pods', [], 0],
    [
      'busiest fresh pod: running + waiting',
      [scraped(3, 0, 1_000, 4), scraped(1, 0, 1_000, 9)],
      10,
    ],
    ['stale scrapes are ignored', [scraped(50, 0, 0, 50), scraped(1, 0, 1_000, 1)], 2],
    ['gateway in-flight counts without a scrape', [unscraped(7), unscraped(3)], 7],
    ['in-flight above the scrape wins', [busy(scraped(1, 0, 1_000, 2), 6)], 6],
    ['the scrape above in-flight wins', [busy(scraped(4, 0, 1_000, 5), 6)], 9],
    ['a stale pod still counts its in-flight', [busy(scraped(40, 0, 0, 40), 5)], 5],
    ['unhealthy pods count', [sick(unscraped(12)), scraped(0, 0)], 12],
  ])('%s -> %s', (_name, pods, expected) => {
    expect(maxPodLoad(pods, 1_200, 1_000)).toBe(expected);
  });
});

describe('newestScrapeMs', () => {
  it.each<[string, PodLoad[], number | undefined]>([
    ['none scraped', [unscraped(), unscraped()], undefined],
    ['the latest healthy scrape', [scraped(0, 0, 900), scraped(0, 0, 1_100)], 1_100],
    ['unhealthy pods are ignored', [scraped(0, 0, 900), sick(scraped(0, 0, 1_100))], 900],
  ])('%s -> %s', (_name, pods, expected) => {
    expect(newestScrapeMs(pods)).toBe(expected);
  });
});
