import { meanBatchOf } from '@fairgate/control';
import type { Context } from 'hono';
import type { GatewayDeps } from '../context.js';
import { CAPACITY_REPORT_FIELD, type CapacityView } from '../control/tuner-loop.js';

const round = (v: number | null | undefined, digits = 6) =>
  v === null || v === undefined || !Number.isFinite(v) ? null : Number(v.toPrecision(digits));

/** The capacity report in the HTTP shape (snake_case, like /admin/state). */
export function capacityBody(view: CapacityView, source: 'leader' | 'store', replica: string) {
  return {
    replica,
    source,
    period: view.period,
    period_s: view.periodS,
    slo_multiplier: view.sloMultiplier,
    writer: view.writer,
    written_at: new Date(view.writtenAt).toISOString(),
    /** The scaling signal (hysteresis over the periods' need: docs/tuner.md). */
    desired_pods: view.desiredPods,
    /** The last period's need in pods, unrounded. */
    need: round(view.need ?? null),
    controller: view.controller
      ? { start_cap: view.controller.startCap, ceiling_cap: view.controller.ceilingCap }
      : null,
    models: Object.fromEntries(
      Object.entries(view.models).map(([model, m]) => [
        model,
        {
          targets: m.targets
            ? {
                ttft_ms: round(m.targets.ttftMs),
                itl_ms: round(m.targets.itlMs),
                source: m.targets.source,
              }
            : null,
          total_rate: round(m.totalRate),
          desired_pods: m.desiredPods,
          need: round(m.need ?? null),
          pods: m.pods,
        },
      ]),
    ),
    pods: Object.fromEntries(
      Object.entries(view.pods).map(([pod, p]) => [
        pod,
        {
          model: p.model,
          alpha_ms: round(p.alphaMs),
          beta_ms: round(p.betaMs),
          gamma_ms: round(p.gammaMs),
          relative_std: p.relativeStd?.map((v) => round(v, 3)) ?? null,
          nis: round(p.nis, 4),
          event: p.event,
          updates: p.updates,
          rejected: p.rejected,
          resets: p.resets,
          counts: p.counts,
          history: p.history.map((r) => ({
            at: new Date(r.at).toISOString(),
            outcome: r.outcome,
            reason: r.reason ?? null,
            nis: round(r.nis, 4),
          })),
          observed_rate: round(p.observedRate),
          capacity_rps: round(p.lambdaStar),
          concurrency: round(p.concurrency),
          ceiling: p.ceiling ?? null,
          predicted_ttft_ms: round(p.ttftMs),
          predicted_itl_ms: round(p.itlMs),
          observation: p.observation
            ? {
                rate: round(p.observation.rate),
                ttft_ms: round(p.observation.meanTtftMs),
                itl_ms: round(p.observation.meanItlMs),
                input_tokens: round(p.observation.meanInputTokens),
                output_tokens: round(p.observation.meanOutputTokens),
                requests: p.observation.requests,
                period_s: round(p.observation.periodS),
                queue_ms: round(p.observation.meanQueueMs),
                mean_batch: p.observation.occupancy
                  ? round(meanBatchOf(p.observation.occupancy))
                  : null,
                mean_waiting: round(p.observation.occupancy?.meanQueue),
                noise: p.observation.noise?.map((v) => round(v, 3)) ?? null,
              }
            : null,
        },
      ]),
    ),
  };
}

/**
 * GET /admin/capacity[?pool=<name>]: a pool's capacity tuner's last report (behind
 * adminAuth; the first pool without `pool`). The pool's leader answers from memory; any
 * other replica from the report the leader stored.
 */
export function adminCapacity(deps: GatewayDeps) {
  return async function adminCapacityRoute(c: Context): Promise<Response> {
    const pool = deps.pools.fromQuery(c.req.query('pool'));
    const local = pool.control.tuner.report;
    if (local && pool.control.election.fence !== null) {
      return c.json(capacityBody(local, 'leader', deps.replica));
    }
    const stored = await pool.scheduler.getLeaderData(CAPACITY_REPORT_FIELD);
    if (stored === null) {
      return c.json({ replica: deps.replica, source: 'none', desired_pods: null, pods: {} });
    }
    return c.json(capacityBody(JSON.parse(stored) as CapacityView, 'store', deps.replica));
  };
}
