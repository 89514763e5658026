import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { createLiveView } from './live.js';
import { type SweepRun, summaryText } from './report.js';
import { summarize } from './report-data.js';
import { runScenario } from './runner.js';
import { DEV_ADMIN_TOKEN, type Scenario } from './scenario.js';
import { type Infra, type Log, SIM_MODEL, startGateways } from './stack.js';

/**
 * The sweep: the same offered load against a fresh set of gateway replicas (fresh pool, same
 * redis and pods) for every starting cap per worker, first with the controller off (a static
 * budget), then on (the cap is only where it starts). Each run is measured over its last
 * measure_last_s seconds: where it ends, not how it got there.
 */
export async function runSweep(
  scenario: Scenario,
  infra: Infra,
  options: { log: Log; signal: AbortSignal; capacityTokensPerS?: number; plain?: boolean },
): Promise<SweepRun[]> {
  const sweep = scenario.sweep!;
  const runs: SweepRun[] = [];
  const total = sweep.caps.length * sweep.controller.length;
  let n = 0;
  for (const mode of sweep.controller) {
    for (const cap of sweep.caps) {
      if (options.signal.aborted) return runs;
      n++;
      const label = `cap ${cap} controller ${mode}`;
      options.log(`\n[${n}/${total}] ${label}`);
      const gateways = await startGateways(
        scenario,
        infra,
        { kind: 'sweep', capPerWorker: cap, controller: mode === 'on' },
        options.log,
        `sweep-${cap}-${mode}`,
      );
      const view = createLiveView(`${scenario.name} ${label}`, {
        plain: options.plain === true,
        plainEveryS: 10,
      });
      let result: Awaited<ReturnType<typeof runScenario>>;
      try {
        result = await runScenario({
          scenario,
          targets: gateways.urls,
          adminToken: DEV_ADMIN_TOKEN,
          model: SIM_MODEL,
          label,
          durationS: sweep.run_s,
          signal: options.signal,
          onTick: (p) => view.onTick(p),
          ...(options.capacityTokensPerS !== undefined
            ? { capacityTokensPerS: options.capacityTokensPerS }
            : {}),
          meta: {
            variant: { cap, controller: mode },
            gatewayConfig: redactConfig(gateways.config),
          },
        });
      } finally {
        view.finish();
        await gateways.stop();
      }
      const from = Math.max(0, sweep.run_s - sweep.measure_last_s);
      const summary = summarize(result, { fromS: from, toS: sweep.run_s });
      const endCap = mode === 'on' ? (summary.lastCapPerWorker ?? cap) : cap;
      runs.push({ point: { cap, controller: mode, summary, endCap }, result });
      options.log(summaryText(summary));
      await waitForIdlePods(infra, 10_000);
    }
  }
  return runs;
}

/** Waits (bounded) until every pod reports no running and no waiting requests. */
export async function waitForIdlePods(infra: Infra, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    let busy = 0;
    for (const sim of infra.sims) {
      try {
        const response = await request(`${sim.url}/metrics`, {
          signal: AbortSignal.timeout(1_000),
        });
        const text = await response.body.text();
        for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting']) {
          const match = text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+-]+)$`, 'm'));
          busy += match ? Number(match[1]) : 0;
        }
      } catch {
        // a pod that does not answer is not busy with our requests
      }
    }
    if (busy === 0) return;
    await sleep(200);
  }
}

/** The config without key digests (reports are shared). */
export function redactConfig(config: Record<string, unknown>): Record<string, unknown> {
  const copy = structuredClone(config);
  const tenants = copy.tenants as Array<Record<string, unknown>> | undefined;
  for (const t of tenants ?? []) t.api_key_sha256 = ['(redacted)'];
  if (copy.admin) copy.admin = { token_sha256: '(redacted)' };
  return copy;
}
