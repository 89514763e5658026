import { conservationViolations, type FlowCounters, noticeDropCode } from '@fairgate/core';
import { metricsText } from '@fairgate/telemetry';
import type { Context } from 'hono';
import type { GatewayDeps } from '../context.js';
import { controllerView } from '../control/controller-view.js';
import type { PoolRuntime } from '../pool-runtime.js';
import { authenticateTenant } from '../tenants.js';
import type { ModelEntry } from '../upstream/pod-models.js';

/** GET /healthz: the process is up. */
export function healthz(c: Context): Response {
  return c.json({ status: 'ok' });
}

/**
 * GET /readyz: every pool's scheduler answers and at least one pod (of any pool) is healthy.
 * During a Redis outage the replica is ready only in local_share mode with a share to
 * admit into (`scheduler: 'local_share'`); in reject mode it is not ready, so a load
 * balancer can prefer replicas that still reach Redis. A draining replica (SIGTERM)
 * answers 503 `draining` at once. `pools` gives each pool's part; the top-level fields
 * sum them (pods) or take the worst (scheduler).
 */
export function readyz(deps: GatewayDeps) {
  return async function ready(c: Context): Promise<Response> {
    // Draining (SIGTERM): not ready at once, so the balancer stops sending here.
    if (deps.drain.draining) {
      return c.json({ status: 'draining', active_requests: deps.drain.active }, 503);
    }
    const pools = await Promise.all(deps.pools.all.map((pool) => poolReadiness(deps, pool)));
    const healthyPods = pools.reduce((sum, pool) => sum + pool.healthy_pods, 0);
    const scheduler = pools.some((pool) => pool.scheduler === false)
      ? false
      : pools.some((pool) => pool.scheduler === 'local_share')
        ? 'local_share'
        : true;
    const ok = scheduler !== false && healthyPods > 0;
    const { outage } = deps.pools.first; // the pools share one Redis
    return c.json(
      {
        status: ok ? 'ready' : 'not_ready',
        scheduler,
        ...(outage
          ? {
              redis: outage.down ? 'unreachable' : 'ok',
              on_outage: outage.mode,
              local_share: outage.localShareInfo() ?? null,
            }
          : {}),
        healthy_pods: healthyPods,
        pools: Object.fromEntries(pools.map(({ name, ...rest }) => [name, rest])),
      },
      ok ? 200 : 503,
    );
  };
}

async function poolReadiness(deps: GatewayDeps, pool: PoolRuntime) {
  let scheduler: boolean | 'local_share' = true;
  if (pool.outage?.down) {
    scheduler = pool.outage.localShare() ? 'local_share' : false;
  } else {
    try {
      await pool.scheduler.heartbeat(deps.replica);
    } catch {
      scheduler = false;
    }
  }
  return {
    name: pool.name,
    scheduler,
    healthy_pods: pool.pods.healthyPods().length,
    ...(pool.outage ? { local_share: pool.outage.localShareInfo() ?? null } : {}),
  };
}

/** GET /metrics: Prometheus text. */
export function metrics(deps: GatewayDeps) {
  return async function metricsRoute(c: Context): Promise<Response> {
    const registries = [deps.metrics.registry, ...deps.pools.all.map((p) => p.metrics.registry)];
    return c.body(await metricsText(registries), 200, {
      'content-type': deps.metrics.registry.contentType,
    });
  };
}

/**
 * GET /v1/models: the models the tenant may use, each once. A pool lists its configured
 * models (each with what its pods' own /v1/models says of it, when they list it) and, with
 * `discover_models` or without configured models (a single-pool config without `models:`),
 * every model its pods list (upstream/pod-models.ts, refreshed every
 * `upstream.models_refresh_ms`).
 */
export function models(deps: GatewayDeps) {
  return async function modelsRoute(c: Context): Promise<Response> {
    const tenant = await authenticateTenant(deps, c.req.header('authorization'));
    await Promise.all(deps.pools.all.map((pool) => pool.models.ready()));
    const byId = new Map<string, ModelEntry>();
    for (const pool of deps.pools.all) {
      const configured = pool.config().models ?? [];
      for (const model of configured) {
        byId.set(
          model.name,
          pool.models.get(model.name) ?? {
            id: model.name,
            object: 'model',
            created: 0,
            owned_by: 'fairgate',
          },
        );
      }
      if (configured.length === 0 || pool.discoversModels()) {
        for (const entry of pool.models.all()) if (!byId.has(entry.id)) byId.set(entry.id, entry);
      }
    }
    const data = [...byId.values()].filter((model) => deps.pools.allows(tenant, model.id));
    return c.json({ object: 'list', data });
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
    add(noticeDropCode('expired'), row.outcomes.expired);
    add(noticeDropCode('shed'), row.shed);
    add(noticeDropCode('evict'), row.outcomes.evicted - row.shed);
  }
  return rows;
}

/**
 * GET /admin/state[?pool=<name>]: a pool as this replica sees it (behind adminAuth; the
 * first pool without `pool`). `pools` names every pool.
 */
export function adminState(deps: GatewayDeps) {
  return async function adminStateRoute(c: Context): Promise<Response> {
    return c.json(await adminStateBody(deps, deps.pools.fromQuery(c.req.query('pool'))));
  };
}

/** The body of GET /admin/state, as JSON carries it (tests and the load generator read it). */
export type AdminState = Awaited<ReturnType<typeof adminStateBody>>;

async function adminStateBody(deps: GatewayDeps, pool: PoolRuntime) {
  const snapshot = await pool.scheduler.snapshot();
  return {
    replica: deps.replica,
    pool: pool.name,
    pools: deps.pools.all.map((p) => p.name),
    mode: deps.mode,
    budget: snapshot.budget,
    inflight: snapshot.inflight,
    waiting: snapshot.waiting,
    waiting_by_band: snapshot.waitingByBand,
    tenants: snapshot.tenants,
    pods: snapshot.pods.map((pod) => ({
      ...pod,
      reachable: pool.pods.get(pod.name)?.healthy ?? false,
    })),
    replicas: snapshot.replicas,
    leader: snapshot.leader,
    epoch: snapshot.epoch,
    is_leader: pool.control.election.fence !== null,
    controller: await controllerView(pool.scheduler, pool.config(), snapshot),
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
    ...(pool.outage
      ? { redis: { reachable: !pool.outage.down, on_outage: pool.outage.mode } }
      : {}),
    local: {
      waiting: pool.broker.waiting,
      inflight: pool.leases.size,
      fenced_writes: pool.control.ledger.view(),
      // Slot recycling (Redis scheduler): slots parked now, and whether it is paused
      // because the pool is contended.
      ...(pool.recycler
        ? { recycling: { parked: pool.recycler.parked, contended: pool.recycler.contended } }
        : {}),
    },
  };
}
