import { conservationViolations, type FlowCounters, noticeDropResponse } from '@fairgate/core';
import type { Context } from 'hono';
import type { GatewayDeps } from '../context.js';
import { controllerView } from '../control/controller-view.js';
import { unauthorized } from '../errors.js';
import { bearerToken } from '../tenants.js';

/** GET /healthz: the process is up. */
export function healthz(c: Context): Response {
  return c.json({ status: 'ok' });
}

/**
 * GET /readyz: the scheduler answers and at least one pod is healthy. During a Redis outage
 * the replica is ready only in local_share mode with a share to admit into (`scheduler:
 * 'local_share'`); in reject mode it is not ready, so a load balancer can prefer replicas
 * that still reach Redis. A draining replica (SIGTERM) answers 503 `draining` at once.
 */
export function readyz(deps: GatewayDeps) {
  return async function ready(c: Context): Promise<Response> {
    // Draining (SIGTERM): not ready at once, so the balancer stops sending here.
    if (deps.drain.draining) {
      return c.json({ status: 'draining', active_requests: deps.drain.active }, 503);
    }
    const healthyPods = deps.pods.healthyPods().length;
    let scheduler: boolean | 'local_share' = true;
    if (deps.outage?.down) {
      scheduler = deps.outage.localShare() ? 'local_share' : false;
    } else {
      try {
        await deps.scheduler.heartbeat(deps.replica);
      } catch {
        scheduler = false;
      }
    }
    const ok = scheduler !== false && healthyPods > 0;
    return c.json(
      {
        status: ok ? 'ready' : 'not_ready',
        scheduler,
        ...(deps.outage
          ? {
              redis: deps.outage.down ? 'unreachable' : 'ok',
              on_outage: deps.outage.mode,
              local_share: deps.outage.localShareInfo() ?? null,
            }
          : {}),
        healthy_pods: healthyPods,
      },
      ok ? 200 : 503,
    );
  };
}

/** GET /metrics: Prometheus text. */
export function metrics(deps: GatewayDeps) {
  return async function metricsRoute(c: Context): Promise<Response> {
    return c.body(await deps.metrics.registry.metrics(), 200, {
      'content-type': deps.metrics.registry.contentType,
    });
  };
}

interface ModelEntry {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  [key: string]: unknown;
}

/** GET /v1/models: the union of the models the healthy pods serve (cached briefly). */
export function models(deps: GatewayDeps) {
  let cache: { at: number; data: ModelEntry[] } | undefined;
  return async function modelsRoute(c: Context): Promise<Response> {
    const token = bearerToken(c.req.header('authorization'));
    if (!token || !deps.tenants().authenticate(token))
      throw unauthorized('Incorrect or missing API key');
    if (!cache || performance.now() - cache.at > 5_000) {
      const byId = new Map<string, ModelEntry>();
      await Promise.all(
        deps.pods.healthyPods().map(async (pod) => {
          try {
            const response = await pod.pool.request({
              method: 'GET',
              path: '/v1/models',
              headersTimeout: 2_000,
            });
            const body = (await response.body.json()) as { data?: ModelEntry[] };
            for (const model of body.data ?? []) if (!byId.has(model.id)) byId.set(model.id, model);
          } catch {
            // an unreachable pod contributes nothing
          }
        }),
      );
      cache = { at: performance.now(), data: [...byId.values()] };
    }
    return c.json({ object: 'list', data: cache.data });
  };
}

/**
 * Every drop pool-wide by tenant, class and reason: rejections at enqueue by their code,
 * queue TTL expiries, queue-shedding victims and in-flight evictions.
 */
export function dropsByReason(
  counters: readonly FlowCounters[],
): { tenant: string; class: string; reason: string; count: number }[] {
  const rows: { tenant: string; class: string; reason: string; count: number }[] = [];
  for (const row of counters) {
    const add = (reason: string, count: number) => {
      if (count > 0) rows.push({ tenant: row.tenant, class: row.sloClass, reason, count });
    };
    for (const [code, count] of Object.entries(row.rejected)) add(code, count ?? 0);
    // Shed requests end with outcome evicted; the counters keep them apart (row.shed).
    add(noticeDropResponse('expired').dropReason, row.outcomes.expired);
    add(noticeDropResponse('shed').dropReason, row.shed);
    add(noticeDropResponse('evict').dropReason, row.outcomes.evicted - row.shed);
  }
  return rows;
}

/** GET /admin/state: the pool as this replica sees it (behind adminAuth). */
export function adminState(deps: GatewayDeps) {
  return async function adminStateRoute(c: Context): Promise<Response> {
    return c.json(await adminStateBody(deps));
  };
}

/** The body of GET /admin/state, as JSON carries it (tests and the load generator read it). */
export type AdminState = Awaited<ReturnType<typeof adminStateBody>>;

async function adminStateBody(deps: GatewayDeps) {
  const snapshot = await deps.scheduler.snapshot();
  return {
    replica: deps.replica,
    pool: deps.config().pool,
    mode: deps.mode,
    budget: snapshot.budget,
    inflight: snapshot.inflight,
    waiting: snapshot.waiting,
    waiting_by_band: snapshot.waitingByBand,
    tenants: snapshot.tenants,
    pods: snapshot.pods.map((pod) => ({
      ...pod,
      reachable: deps.pods.get(pod.name)?.healthy ?? false,
    })),
    replicas: snapshot.replicas,
    leader: snapshot.leader,
    epoch: snapshot.epoch,
    is_leader: deps.control.election.fence !== null,
    controller: await controllerView(deps.scheduler, deps.config(), snapshot),
    saturation: snapshot.saturation,
    counters: snapshot.counters,
    drops: dropsByReason(snapshot.counters),
    /**
     * Every admitted request ends in exactly one outcome: offered = admitted + rejected per
     * flow, and admitted = ended + live pool-wide, over what the store records. Empty when
     * it holds (after Redis lost its data, over what it recorded since).
     */
    conservation_violations: conservationViolations(
      snapshot.counters,
      snapshot.inflight + snapshot.waiting,
    ),
    ...(deps.outage
      ? { redis: { reachable: !deps.outage.down, on_outage: deps.outage.mode } }
      : {}),
    local: {
      waiting: deps.broker.waiting,
      inflight: deps.broker.inflight,
      fenced_writes: deps.control.ledger.view(),
    },
  };
}
