/**
 * Prefix-aware routing on vs off (docs/routing.md), in one run: a built-in scenario on its
 * stack, once with `routing.prefix: off` and once `on`, each on fresh sims (cold caches)
 * with the same seed and schedule. The sims' own counters are the ground truth:
 * vllm:prefix_cache_hits / queries (the hit rate), vllm:request_success (each pod's share).
 * Bounded: the scenario's duration (PREFIX_BENCH_SECONDS overrides it) plus its drain.
 *
 *   npm run bench:prefix-routing -w @fairgate/loadtest
 *   BENCH_SCENARIO=documents npm run bench:prefix-routing -w @fairgate/loadtest
 *   BENCH_SCENARIO=documents BENCH_INDEX_ENTRIES_PER_POD=65536 npm run bench:prefix-routing -w @fairgate/loadtest
 *
 * BENCH_SCENARIO: the scenario, `shared_prefix` by default (examples/scenarios/
 * shared_prefix.yaml: 64 users, 8 system prompts of 1,000 tokens, growing conversations,
 * 4 sims, 3 replicas) or `documents` (documents.yaml: 24 documents of ~2,800 tokens asked
 * about at random, 3 sims whose caches hold ~6 each, 2 replicas), or any built-in or file.
 * BENCH_INDEX_ENTRIES_PER_POD: sets `routing.index_entries_per_pod` in both runs (default:
 * the scenario's, else the gateway's 0, each pod's index sized from its KV cache).
 *
 * Goals (issue 18): hit rate >= 2x and p50 TTFT >= 30% lower with routing on, at >= the
 * same throughput, every pod's share within 25% of the mean pod.
 */

import { poolPeakConcurrency } from '../../test/support/pool.js';
import { runScenario } from '../src/load/runner.js';
import { DEV_ADMIN_TOKEN, loadScenario, type Scenario } from '../src/load/scenario.js';
import { type Infra, SIM_MODEL, startGateways, startInfra } from '../src/load/stack.js';
import { percentile } from '../src/load/stats.js';
import { fmt, verdict } from './harness/report.js';
import { runBench } from './harness/stack.js';

const DURATION_S = Number(process.env.PREFIX_BENCH_SECONDS ?? 0) || undefined;
const SCENARIO = process.env.BENCH_SCENARIO || 'shared_prefix';
const INDEX_ENTRIES = process.env.BENCH_INDEX_ENTRIES_PER_POD;

/** Sum of every sample of `name` in a Prometheus text. */
function sum(text: string, name: string): number {
  let total = 0;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+-]+)$`, 'gm'))) {
    total += Number(m[1]);
  }
  return total;
}

/**
 * Per pod, the prompt tokens the prefix index predicted the pod held against those it
 * served from its cache (fairgate_prefix_predicted_tokens_total and
 * fairgate_prefix_cached_tokens_total, summed over the replicas).
 */
function indexPrecision(
  texts: readonly string[],
): { pod: string; predicted: number; cached: number }[] {
  const byPod = new Map<string, { predicted: number; cached: number }>();
  for (const text of texts) {
    for (const [metric, field] of [
      ['fairgate_prefix_predicted_tokens_total', 'predicted'],
      ['fairgate_prefix_cached_tokens_total', 'cached'],
    ] as const) {
      for (const m of text.matchAll(
        new RegExp(`^${metric}\\{[^}]*pod="([^"]+)"[^}]*\\} ([0-9.e+-]+)$`, 'gm'),
      )) {
        const pod = m[1] as string;
        const counts = byPod.get(pod) ?? { predicted: 0, cached: 0 };
        counts[field] += Number(m[2]);
        byPod.set(pod, counts);
      }
    }
  }
  return [...byPod].sort(([a], [b]) => a.localeCompare(b)).map(([pod, c]) => ({ pod, ...c }));
}

/** One run of the scenario with prefix routing `on` or `off`, from the sims' own counters. */
async function measure(base: Scenario, prefix: 'on' | 'off') {
  const scenario: Scenario = {
    ...base,
    gateway: { ...base.gateway, routing: { ...base.gateway.routing, prefix } },
  };
  const log = (line: string) => console.log(`  [${prefix}] ${line}`);
  const infra: Infra = await startInfra(scenario.stack, log);
  try {
    const gateways = await startGateways(
      scenario,
      infra,
      { kind: 'fairgate' },
      log,
      `px-${prefix}`,
    );
    try {
      const result = await runScenario({
        scenario,
        targets: gateways.urls,
        adminToken: DEV_ADMIN_TOKEN,
        model: SIM_MODEL,
        label: prefix,
        ...(DURATION_S ? { durationS: DURATION_S } : {}),
      });
      const texts = await Promise.all(
        infra.sims.map(async (sim) => (await fetch(`${sim.url}/metrics`)).text()),
      );
      const hits = texts.reduce((n, t) => n + sum(t, 'vllm:prefix_cache_hits_total'), 0);
      const queries = texts.reduce((n, t) => n + sum(t, 'vllm:prefix_cache_queries_total'), 0);
      const perPod = texts.map((t) => sum(t, 'vllm:request_success_total'));
      const peakPerPod = await Promise.all(infra.sims.map((sim) => poolPeakConcurrency([sim])));
      const gatewayTexts = await Promise.all(
        gateways.urls.map(async (url) => (await fetch(`${url}/metrics`)).text()),
      );
      const precision = indexPrecision(gatewayTexts);
      const mean = perPod.reduce((a, b) => a + b, 0) / perPod.length;
      const ok = result.requests.filter((r) => r.outcome === 'ok');
      const ttft = ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs]));
      // Little's law over the run: the mean number of requests open at the client.
      const sent = result.requests.filter((r) => r.outcome !== 'overflow');
      const meanOpen = sent.reduce((n, r) => n + r.e2eMs, 0) / 1_000 / result.durationS;
      return {
        hits,
        queries,
        hitRate: queries > 0 ? hits / queries : 0,
        ttftP50Ms: percentile(ttft, 0.5),
        ttftP99Ms: percentile(ttft, 0.99),
        completedPerS: ok.length / result.durationS,
        ok: ok.length,
        meanOpen,
        failed: result.requests.length - ok.length,
        perPod,
        maxOffMean: Math.max(...perPod.map((n) => Math.abs(n - mean) / mean)),
        peakPerPod,
        precision,
      };
    } finally {
      await gateways.stop();
    }
  } finally {
    await infra.stop();
  }
}

await runBench(async () => {
  let scenario = loadScenario(SCENARIO);
  if (INDEX_ENTRIES !== undefined && INDEX_ENTRIES !== '') {
    const entries = Number(INDEX_ENTRIES);
    if (!Number.isInteger(entries) || entries < 0) {
      throw new Error(`BENCH_INDEX_ENTRIES_PER_POD: not an integer >= 0: ${INDEX_ENTRIES}`);
    }
    scenario = {
      ...scenario,
      gateway: {
        ...scenario.gateway,
        routing: { ...scenario.gateway.routing, index_entries_per_pod: entries },
      },
    };
  }
  const { pods, replicas, pod_cap: cap } = scenario.stack;
  const entries = scenario.gateway.routing?.index_entries_per_pod;
  console.log(
    `prefix-routing benchmark: scenario ${scenario.name}, ${pods} sims (${scenario.stack.sim.kv_blocks ?? 'default'} KV blocks) x ${replicas} replicas, ${DURATION_S ?? scenario.duration_s} s each, off then on, routing.index_entries_per_pod ${entries ?? '0 (default: sized from each pod)'}`,
  );
  const off = await measure(scenario, 'off');
  const on = await measure(scenario, 'on');
  for (const [label, m] of [
    ['off', off],
    ['on ', on],
  ] as const) {
    console.log(
      `routing.prefix ${label}  hit rate ${fmt(m.hitRate * 100, 1)}% (${fmt(m.hits)} of ${fmt(m.queries)} tokens)  TTFT p50 ${fmt(m.ttftP50Ms, 1)} ms p99 ${fmt(m.ttftP99Ms, 1)} ms  ${fmt(m.completedPerS, 2)} completed/s (${m.ok} ok, ${m.failed} not, ${fmt(m.meanOpen, 1)} open on average)  per pod ${m.perPod.map((n) => fmt(n)).join(' / ')} (max ${fmt(m.maxOffMean * 100, 1)}% off the mean), peak open per pod ${m.peakPerPod.join(' / ')} (cap ${cap})`,
    );
  }
  const hitRatio = on.hitRate / off.hitRate;
  const ttftLower = 1 - on.ttftP50Ms / off.ttftP50Ms;
  const throughputRatio = on.completedPerS / off.completedPerS;
  console.log(
    `on / off hit rate:       x${fmt(hitRatio, 2)} (goal >= 2: ${verdict(hitRatio >= 2)})`,
  );
  console.log(
    `on / off TTFT p50:       ${fmt(ttftLower * 100, 1)}% lower (goal >= 30%: ${verdict(ttftLower >= 0.3)})`,
  );
  console.log(
    `on / off throughput:     x${fmt(throughputRatio, 3)} (goal >= 1: ${verdict(throughputRatio >= 1)})`,
  );
  console.log(
    `pods with routing on:    within ${fmt(on.maxOffMean * 100, 1)}% of the mean (goal <= 25%: ${verdict(on.maxOffMean <= 0.25)})`,
  );
  for (const { pod, predicted, cached } of on.precision) {
    const off = predicted > 0 ? Math.abs(cached - predicted) / predicted : 0;
    console.log(
      `index precision ${pod}:  predicted ${fmt(predicted)} cached ${fmt(cached)} tokens, ${fmt(off * 100, 1)}% apart (goal <= 10%: ${verdict(off <= 0.1)})`,
    );
  }
});
