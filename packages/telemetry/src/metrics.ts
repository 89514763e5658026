import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** Latency buckets in seconds: 1 ms .. 60 s, dense where TTFT SLOs live. */
export const LATENCY_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5,
  10, 20, 60,
];

/**
 * The gateway's Prometheus metrics (prefix fairgate_), one registry per
 * gateway instance so tests can run several in one process.
 */
export function createGatewayMetrics(labels: { replica: string }) {
  const registry = new Registry();
  registry.setDefaultLabels(labels);
  const latency = (name: string, help: string) =>
    new Histogram({
      name,
      help,
      labelNames: ['tenant', 'class'],
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    });
  return {
    registry,
    ttft: latency(
      'fairgate_ttft_seconds',
      'Gateway time to first token (t5 - t1), queue wait included.',
    ),
    queueWait: latency('fairgate_queue_wait_seconds', 'Time from arrival to grant (t2 - t1).'),
    requestDuration: latency(
      'fairgate_request_duration_seconds',
      'Time from arrival to finalize (t7 - t1).',
    ),
    requests: new Counter({
      name: 'fairgate_requests_total',
      help: 'Requests by terminal outcome.',
      labelNames: ['tenant', 'class', 'outcome'],
      registers: [registry],
    }),
    drops: new Counter({
      name: 'fairgate_drops_total',
      help: 'Requests dropped by flow control or admission, by reason.',
      labelNames: ['tenant', 'class', 'reason'],
      registers: [registry],
    }),
    inflight: new Gauge({
      name: 'fairgate_inflight',
      help: 'Requests this replica is serving (granted, not yet finalized).',
      registers: [registry],
    }),
    waiting: new Gauge({
      name: 'fairgate_waiting',
      help: 'Requests this replica has queued, waiting for a grant.',
      registers: [registry],
    }),
    budget: new Gauge({
      name: 'fairgate_budget',
      help: 'Global concurrency budget the controller last wrote (exported by the leader only).',
      registers: [registry],
    }),
    isLeader: new Gauge({
      name: 'fairgate_is_leader',
      help: '1 while this replica holds the leader lease, else 0.',
      registers: [registry],
    }),
    leaderEpoch: new Gauge({
      name: 'fairgate_leader_epoch',
      help: 'Leadership epoch of the lease this replica holds (exported by the leader only).',
      registers: [registry],
    }),
    capPerWorker: new Gauge({
      name: 'fairgate_cap_per_worker',
      help: 'Controller cap per worker (exported by the leader only).',
      registers: [registry],
    }),
    controllerP99Ttft: new Gauge({
      name: 'fairgate_controller_p99_ttft_seconds',
      help: 'p99 TTFT of the shared window the controller last read (exported by the leader only).',
      registers: [registry],
    }),
    controllerActions: new Counter({
      name: 'fairgate_controller_actions_total',
      help: 'Controller ticks written, by action (increase, decrease, hold).',
      labelNames: ['action'],
      registers: [registry],
    }),
    controllerTicksDropped: new Counter({
      name: 'fairgate_controller_ticks_dropped_total',
      help: 'Controller ticks dropped because leadership was lost mid-tick.',
      registers: [registry],
    }),
    staleFencedWrites: new Counter({
      name: 'fairgate_stale_fenced_writes_total',
      help: 'Fenced writes (lease renewal, in-flight peak take, controller write) rejected because this replica no longer leads in its epoch.',
      labelNames: ['operation'],
      registers: [registry],
    }),
    upstreamErrors: new Counter({
      name: 'fairgate_upstream_errors_total',
      help: 'Upstream failures by pod and kind.',
      labelNames: ['pod', 'kind'],
      registers: [registry],
    }),
    podHealthy: new Gauge({
      name: 'fairgate_pod_healthy',
      help: '1 while a pod passes health checks, 0 while ejected.',
      labelNames: ['pod'],
      registers: [registry],
    }),
    redisErrors: new Counter({
      name: 'fairgate_redis_errors_total',
      help: 'Errors talking to Redis.',
      labelNames: ['operation'],
      registers: [registry],
    }),
    redisOutage: new Gauge({
      name: 'fairgate_redis_outage',
      help: '1 while this replica cannot reach Redis and runs in its outage mode (redis.on_outage), else 0.',
      labelNames: ['mode'],
      registers: [registry],
    }),
    redisOutages: new Counter({
      name: 'fairgate_redis_outages_total',
      help: 'Times this replica entered its Redis outage mode.',
      labelNames: ['mode'],
      registers: [registry],
    }),
    schedulerReseeds: new Counter({
      name: 'fairgate_scheduler_reseeds_total',
      help: "Times this replica found the pool's shared state missing in Redis (settings, tenants) and wrote it again from its config.",
      registers: [registry],
    }),
    tunerAlpha: new Gauge({
      name: 'fairgate_tuner_alpha_ms',
      help: 'Capacity tuner: learned fixed cost of one engine iteration, ms (leader only).',
      labelNames: ['pod'],
      registers: [registry],
    }),
    tunerBeta: new Gauge({
      name: 'fairgate_tuner_beta_ms',
      help: 'Capacity tuner: learned compute per processed token, ms (leader only).',
      labelNames: ['pod'],
      registers: [registry],
    }),
    tunerGamma: new Gauge({
      name: 'fairgate_tuner_gamma_ms',
      help: 'Capacity tuner: learned KV-cache read per context token, ms (leader only).',
      labelNames: ['pod'],
      registers: [registry],
    }),
    tunerNis: new Gauge({
      name: 'fairgate_tuner_nis',
      help: 'Capacity tuner: normalized innovation squared of the last update (>= 7.378 rejected).',
      labelNames: ['pod'],
      registers: [registry],
    }),
    capacityRps: new Gauge({
      name: 'fairgate_capacity_rps',
      help: 'Capacity tuner: lambda*, the most requests/s the pod serves within the SLO targets.',
      labelNames: ['pod'],
      registers: [registry],
    }),
    desiredPods: new Gauge({
      name: 'fairgate_desired_pods',
      help: 'Capacity tuner: pods needed for the observed load, ceil(total rate / lambda*).',
      registers: [registry],
    }),
    podScrapes: new Counter({
      name: 'fairgate_pod_scrapes_total',
      help: "The leader's scrapes of the pods' /metrics, by pod and result (ok, error).",
      labelNames: ['pod', 'result'],
      registers: [registry],
    }),
  };
}

export type GatewayMetrics = ReturnType<typeof createGatewayMetrics>;
