import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findRedisServer } from '@fairgate/testkit';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { describeWithTools } from '../../test/support/required-tools.js';
import type { RequestRecord } from '../src/load/client.js';
import { runCli } from '../src/load/main.js';
import {
  computeServiceSeries,
  type RunSummary,
  summarizeService,
} from '../src/load/report-data.js';
import type { RunResult } from '../src/load/runner.js';
import { loadScenario, parseScenario, ScenarioError, withGateway } from '../src/load/scenario.js';

/** An answered request: input (usage) and output tokens, first token at 1 s, end at 3 s. */
function answered(tenant: number, promptTokens: number, extra: Partial<RequestRecord>) {
  return {
    tenant,
    seq: 0,
    target: 0,
    scheduledS: 0,
    startS: 0,
    endS: 3,
    status: 200,
    outcome: 'ok',
    ttftMs: 1_000,
    e2eMs: 3_000,
    promptTokens,
    outputTokens: 10,
    maxTokens: 10,
    ...extra,
  } satisfies RequestRecord;
}

function twoTenants(requests: RequestRecord[]): RunResult {
  return {
    label: 'unit',
    scenario: 'unit',
    startedAt: new Date(0).toISOString(),
    durationS: 4,
    seed: 1,
    targets: [],
    tenants: [
      { name: 'short', sloClass: 'standard', weight: 1 },
      { name: 'long', sloClass: 'standard', weight: 2 },
    ],
    requests,
    admin: [],
    actions: [],
    stoppedEarly: false,
    meta: {},
  };
}

describe('weighted-token service and compare:', () => {
  // short: 120 input (usage) + 10 output; long: 500 input (no usage: the drawn length) + 10
  // output, and a dropped request that counts nothing.
  const result = twoTenants([
    answered(0, 100, { inputTokens: 120 }),
    answered(1, 500, {}),
    { ...answered(1, 500, {}), outcome: 'dropped', status: 429, outputTokens: 0 },
  ]);

  it('counts input x1 at the first token and output x2 as it streams, per tenant', () => {
    const all = summarizeService(result, { fromS: 0, toS: 4 });
    expect(all.tenants.map((t) => t.weightedTokens)).toEqual([140, 520]);
    expect(all.tenants.map((t) => t.fairSharePct)).toEqual([100 / 3, 200 / 3]);
    expect(all.tenants[0]?.sharePct).toBeCloseTo((100 * 140) / 660, 9);
    // Per unit of weight: 140 / (520 / 2).
    expect(all.ratio).toEqual({ names: ['short', 'long'], value: 140 / 260 });
    expect(all.weightedTokensPerS).toBe(660 / 4);
    // [0, 2): the inputs and half of each output (streamed from 1 s to 3 s).
    const early = summarizeService(result, { fromS: 0, toS: 2 });
    expect(early.tenants.map((t) => t.weightedTokens)).toEqual([130, 510]);
    const weighted = summarizeService(
      { ...result, tokenWeights: { input: 1, output: 4 } },
      {
        fromS: 0,
        toS: 4,
      },
    );
    expect(weighted.tenants.map((t) => t.weightedTokens)).toEqual([160, 540]);
  });

  it('shares per window add up to 100% and the tokens to the total', () => {
    const series = computeServiceSeries(result, 2);
    expect(series.times).toEqual([0, 2]);
    expect(series.tenants.map((t) => t.weightedTokens)).toEqual([
      [130, 10],
      [510, 10],
    ]);
    expect(series.tenants[0]!.sharePct[1]! + series.tenants[1]!.sharePct[1]!).toBeCloseTo(100, 9);
  });

  it('merges a compare entry over the gateway sections, and checks the entries', () => {
    const scenario = loadScenario('unequal_sizes');
    expect(scenario.compare?.map((c) => c.label)).toEqual(['requests', 'tokens']);
    const tokens = withGateway(scenario, {
      scheduler: { fairness_unit: 'tokens', token_weights: { output: 3 } },
    });
    expect(tokens.gateway.scheduler).toEqual({
      queue_ttl_ms: 30_000,
      fairness_unit: 'tokens',
      token_weights: { output: 3 },
    });
    expect(tokens.gateway.controller).toEqual({ enabled: false });
    expect(scenario.gateway.scheduler).toEqual({ queue_ttl_ms: 30_000 });
    const bad =
      (compare: unknown, kind = 'run') =>
      () =>
        parseScenario({ ...scenario, kind, sweep: {}, compare });
    expect(bad([{ label: 'a' }, { label: 'a' }])).toThrow(
      /compare\[1\]\.label: duplicate label 'a'/,
    );
    expect(bad([{ label: 'a' }, { label: 'b' }], 'sweep')).toThrow(ScenarioError);
    expect(bad([{ label: 'a', gateway: { schedulr: {} } }, { label: 'b' }])).toThrow(
      /compare\[0\]\.gateway\.schedulr: unknown key/,
    );
  });

  it('refuses compare: without --stack and with --baseline', async () => {
    const errors: string[] = [];
    const spy = (line: string) => errors.push(line);
    const original = console.error;
    console.error = spy;
    try {
      expect((await runCli(['unequal_sizes', '--target', 'http://127.0.0.1:1'])).code).toBe(2);
      expect((await runCli(['unequal_sizes', '--stack', '--baseline'])).code).toBe(2);
    } finally {
      console.error = original;
    }
    expect(errors[0]).toMatch(/compares gateway configurations \(compare:\): add --stack/);
    expect(errors[1]).toMatch(/--baseline does not apply/);
  });
});

/**
 * The built-in unequal_sizes scenario shortened to 10 s per run (drain 1 s), through the
 * CLI on a real stack: redis-server, 4 sims, 3 gateway replicas (built dist/: `npm run
 * build` first). Its compare: runs it with scheduler.fairness_unit requests, then tokens.
 * Counted in requests the long tenant takes about 90% of the weighted tokens; counted in
 * tokens the short:long ratio is about 1. The full run's figures: docs/load.md.
 */
describeWithTools(
  'unequal_sizes: fairness in requests vs tokens, side by side',
  { 'redis-server': findRedisServer() },
  'apt-get install -y redis-server',
  () => {
    it('tokens share the weighted tokens evenly, requests do not; one report with both', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'fairgate-load-unequal-'));
      const scenario = loadScenario('unequal_sizes');
      scenario.name = 'unequal_sizes_short';
      scenario.duration_s = 9;
      scenario.limits.drain_s = 4;
      const file = join(dir, 'unequal_sizes_short.yaml');
      writeFileSync(file, stringify(scenario));
      const out = join(dir, 'report');
      const lines: string[] = [];
      const outcome = await runCli([file, '--stack', '--plain', '--out', out], (line) =>
        lines.push(line),
      );
      expect(outcome.code, lines.join('\n')).toBe(0);

      const json = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8')) as {
        kind: string;
        summaries: RunSummary[];
        results: RunResult[];
      };
      expect(json.kind).toBe('compare');
      expect(json.results.map((r) => r.label)).toEqual(['requests', 'tokens']);
      // Each run's gateways had its fairness unit (compare: merged over gateway:).
      expect(json.results.map((r) => r.meta.gatewayConfig)).toEqual([
        expect.objectContaining({
          scheduler: expect.objectContaining({ fairness_unit: 'requests' }),
        }),
        expect.objectContaining({
          scheduler: expect.objectContaining({ fairness_unit: 'tokens' }),
        }),
      ]);
      for (const r of json.results) {
        expect(r.requests.filter((q) => q.outcome === 'error')).toEqual([]);
        // The input counted is the pods' own (usage.prompt_tokens): the drawn length.
        const served = r.requests.filter((q) => q.outcome === 'ok');
        expect(served.length).toBeGreaterThan(40);
        for (const q of served) expect(q.inputTokens).toBe(q.promptTokens);
      }

      const ratio = (s: RunSummary | undefined) => s?.service.ratio;
      const [byRequests, byTokens] = json.summaries;
      const picture = lines.filter((l) => l.includes('weighted tokens')).join('\n');
      expect(ratio(byRequests)?.names).toEqual(['short', 'long']);
      expect(ratio(byRequests)?.value, picture).toBeLessThan(0.5);
      expect(ratio(byTokens)?.value, picture).toBeGreaterThanOrEqual(0.8);
      expect(ratio(byTokens)?.value, picture).toBeLessThanOrEqual(1.25);
      // Both tenants were served in both runs; by tokens the short tenant got more requests.
      const served = (s: RunSummary | undefined, i: number) => s?.tenants[i]?.completed ?? 0;
      expect(served(byRequests, 1)).toBeGreaterThan(0);
      expect(served(byTokens, 0)).toBeGreaterThan(3 * served(byTokens, 1));
      // One summary line per run on the console.
      expect(lines).toContainEqual(
        expect.stringMatching(/^requests: weighted tokens .* short:long/),
      );
      expect(lines).toContainEqual(expect.stringMatching(/^tokens: weighted tokens .* short:long/));

      // The report has both runs' share-over-time charts (files and inline) and the bars.
      const html = readFileSync(join(out, 'report.html'), 'utf8');
      for (const chart of [
        'requests-service-share.svg',
        'tokens-service-share.svg',
        'compare-service.svg',
      ]) {
        expect(existsSync(join(out, chart)), chart).toBe(true);
        expect(readFileSync(join(out, chart), 'utf8')).toMatch(/^<svg/);
        expect(html).toContain(`href="${chart}"`);
      }
      expect(html).toContain('Weighted-token share per 5 s (requests)');
      expect(html).toContain('Weighted-token share per 5 s (tokens)');
    }, 90_000);
  },
);
