import { Counter, Gauge, Registry } from 'prom-client';
import { BoundCounter } from './bound-counter.js';
import { BoundHistogram } from './bound-histogram.js';

/** Latency buckets in seconds: 1 ms .. 60 s, dense where TTFT SLOs live. */
export const LATENCY_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5,
  10, 20, 60,
];

/** Redis call buckets in seconds: 100 µs .. 1 s (the command timeout is 250 ms by default). */
export const REDIS_CALL_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
];

/** What the config-derived gauges show, read from the replica's current config at each scrape. */
export interface ConfigGaugeValues {
  classes: Array<{ name: string; priority: number; ttftTargetS?: number }>;
  /** Set only while the controller is enabled. */
  capPerWorkerMin?: number;
  capPerWorkerMax?: number;
}

/** A request's series of one tenant and class, label values bound (GatewayMetrics.series). */
export interface RequestSeries {
  readonly labels: { readonly tenant: string; readonly class: string };
  readonly ttft: { observe(seconds: number): void };
  readonly queueWait: { observe(seconds: number): void };
  readonly requestDuration: { observe(seconds: number): void };
  /** fairgate_requests_total for one outcome. */
  outcome(outcome: string): { inc(): void };
}

/**
 * One pool's Prometheus metrics in a replica (prefix fairgate_): one registry per pool
 * (default labels replica and pool), so tests can run several in one process and a pool's
 * controller, tuner and request path need not name their pool on each series.
 */
export function createGatewayMetrics(labels: { replica: string; pool?: string }) {
  const registry = new Registry();
  registry.setDefaultLabels(labels);
  const configView: { read?: () => ConfigGaugeValues } = {};
  // Spread in registration order: the order /metrics lists the families in.
  return {
    registry,
    ...requestMetrics(registry),
    ...leaderMetrics(registry),
    ...upstreamMetrics(registry),
    ...schedulerMetrics(registry),
    ...tunerMetrics(registry),
    ...operationsMetrics(registry, configView),
    ...poolSnapshotMetrics(registry),
    ...podScrapeMetrics(registry),
    ...tunerPeriodMetrics(registry),
    /**
     * Where the config gauges (TTFT targets, class priorities, the controller's cap range)
     * read the current config from at each scrape; the gateway's control plane sets it.
     */
    readConfigFrom(read: () => ConfigGaugeValues): void {
      configView.read = read;
    },
  };
}

/** The request path's series: latency histograms, outcomes, drops, inflight and waiting. */
function requestMetrics(registry: Registry) {
  // The request path's histograms and outcome counter: bound once per tenant and class (and
  // outcome), no label work per observe or inc (BoundMetric).
  const latency = (name: string, help: string) =>
    new BoundHistogram(name, help, ['tenant', 'class'], LATENCY_BUCKETS, registry);
  const ttft = latency(
    'fairgate_ttft_seconds',
    'Gateway time to first token (t5 - t1), queue wait included.',
  );
  const queueWait = latency('fairgate_queue_wait_seconds', 'Time from arrival to grant (t2 - t1).');
  const requestDuration = latency(
    'fairgate_request_duration_seconds',
    'Time from arrival to finalize (t7 - t1).',
  );
  const requests = new BoundCounter(
    'fairgate_requests_total',
    'Requests by terminal outcome.',
    ['tenant', 'class', 'outcome'],
    registry,
  );
  // By tenant, then class: two lookups of strings whose hashes are cached, no key to build.
  const seriesByLabels = new Map<string, Map<string, RequestSeries>>();
  return {
    ttft,
    queueWait,
    requestDuration,
    requests,
    /**
     * The per-request series of one tenant and class, bound once: no label object is
     * built per observe or inc, and the histograms and the outcome counter do no label
     * work at all (BoundMetric: prom-client 15 validates and hashes bound labels on every
     * observe). Bounded by tenants x classes (x outcomes) of the config.
     */
    series(tenant: string, cls: string): RequestSeries {
      let byClass = seriesByLabels.get(tenant);
      if (!byClass) {
        byClass = new Map();
        seriesByLabels.set(tenant, byClass);
      }
      let series = byClass.get(cls);
      if (!series) {
        const labels = { tenant, class: cls };
        const outcomes = new Map<string, { inc(): void }>();
        series = {
          labels,
          ttft: ttft.labels(labels),
          queueWait: queueWait.labels(labels),
          requestDuration: requestDuration.labels(labels),
          outcome(outcome) {
            let counter = outcomes.get(outcome);
            if (!counter) {
              counter = requests.labels({ ...labels, outcome });
              outcomes.set(outcome, counter);
            }
            return counter;
          },
        };
        byClass.set(cls, series);
      }
      return series;
    },
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
  };
}

/** The leader's lease and the controller's writes (most exported by the leader only). */
function leaderMetrics(registry: Registry) {
  return {
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
  };
}

/** The upstream pods: failures and health. */
function upstreamMetrics(registry: Registry) {
  return {
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
    discoveredPods: new Gauge({
      name: 'fairgate_discovered_pods',
      help: "Pods the pool's discovery (DNS or Kubernetes) lists on this replica.",
      registers: [registry],
    }),
    // Counted at every release: bound per tenant, model and direction (BoundMetric).
    tokens: new BoundCounter(
      'fairgate_tokens_total',
      'Tokens the pods reported at release, by tenant, model and direction (input, output, cached: input served from the prefix cache).',
      ['tenant', 'model', 'direction'],
      registry,
    ),
    // Counted at every release with usage: bound per tenant and band.
    serviceTokens: new BoundCounter(
      'fairgate_service_tokens_total',
      'Weighted tokens served, as the pods reported them at release (input x scheduler.token_weights.input + output x token_weights.output), by tenant and band: what fairness_unit tokens shares by weight.',
      ['tenant', 'band'],
      registry,
    ),
    // Prefix routing: counted at the release of a request routed by prefix whose usage
    // says what the pod had cached (docs/routing.md, *How precise the index is*).
    prefixPredictedTokens: new Counter({
      name: 'fairgate_prefix_predicted_tokens_total',
      help: "Prompt tokens the prefix index predicted the pod held at the grant (whole blocks of scheduler.kv_block_size, within the request's routing.max_blocks keys), by pod.",
      labelNames: ['pod'],
      registers: [registry],
    }),
    prefixCachedTokens: new Counter({
      name: 'fairgate_prefix_cached_tokens_total',
      help: "Prompt tokens the pod served from its prefix cache (the usage's cached_tokens in whole blocks, within the request's routing.max_blocks keys), by pod: against fairgate_prefix_predicted_tokens_total, how precise the index is.",
      labelNames: ['pod'],
      registers: [registry],
    }),
    loraLoads: new Counter({
      name: 'fairgate_lora_loads_total',
      help: "LoRA adapter loads this replica asked a pod for before a forward (routing.lora_load: on), by pod and result: loaded, held (the pod had it already: vLLM's 400 'already been loaded'), failed (the claim is dropped), no_path (no routing.lora_paths entry and no pod lists its root).",
      labelNames: ['pod', 'result'],
      registers: [registry],
    }),
    discoveryErrors: new Counter({
      name: 'fairgate_discovery_errors_total',
      help: 'Discovery reads that failed (the last pod set stays in force).',
      registers: [registry],
    }),
  };
}

/** The scheduler's Redis: errors, outage mode, recycled slots and reseeds. */
function schedulerMetrics(registry: Registry) {
  return {
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
    slotsRecycled: new Counter({
      name: 'fairgate_slots_recycled_total',
      help: "Requests that took a finished request's slot on this replica (slot recycling: no Redis call before the forward).",
      registers: [registry],
    }),
    schedulerReseeds: new Counter({
      name: 'fairgate_scheduler_reseeds_total',
      help: "Times this replica found the pool's shared state missing in Redis (settings, tenants) and wrote it again from its config.",
      registers: [registry],
    }),
  };
}

/** The capacity tuner's estimates per pod and the leader's pod scrapes. */
function tunerMetrics(registry: Registry) {
  return {
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

/**
 * Operations: what the dashboard and the alert rules in infra/ read (docs/operations.md):
 * the scheduler's Redis call times and the config gauges, which read `configView` at each
 * scrape.
 */
function operationsMetrics(registry: Registry, configView: { read?: () => ConfigGaugeValues }) {
  return {
    // Observed on every scheduler call (two or more per request): bound per operation.
    redisCall: new BoundHistogram(
      'fairgate_redis_call_seconds',
      'Time of one scheduler call to Redis, by operation (the blocking wait for grant notices excluded).',
      ['operation'],
      REDIS_CALL_BUCKETS,
      registry,
    ),
    ttftTarget: new Gauge({
      name: 'fairgate_ttft_target_seconds',
      help: "p99 TTFT target per SLO class: the class's scheduler.slo_targets_ms, else controller.target_p99_ttft_s for protected classes (from this replica's config).",
      labelNames: ['class'],
      registers: [registry],
      collect() {
        this.reset();
        for (const c of configView.read?.().classes ?? []) {
          if (c.ttftTargetS !== undefined) this.set({ class: c.name }, c.ttftTargetS);
        }
      },
    }),
    sloClassPriority: new Gauge({
      name: 'fairgate_slo_class_priority',
      help: 'Priority (band) of each SLO class; >= 0 is SLO-protected, < 0 sheddable (from this replica config).',
      labelNames: ['class'],
      registers: [registry],
      collect() {
        this.reset();
        for (const c of configView.read?.().classes ?? []) {
          this.set({ class: c.name }, c.priority);
        }
      },
    }),
    capPerWorkerMin: new Gauge({
      name: 'fairgate_cap_per_worker_min',
      help: "The controller's floor per worker, controller.cap_per_worker_min (0 while the controller is disabled).",
      registers: [registry],
      collect() {
        this.reset();
        const min = configView.read?.().capPerWorkerMin;
        if (min !== undefined) this.set(min);
      },
    }),
    capPerWorkerMax: new Gauge({
      name: 'fairgate_cap_per_worker_max',
      help: "The controller's ceiling per worker, controller.cap_per_worker_max (0 while the controller is disabled).",
      registers: [registry],
      collect() {
        this.reset();
        const max = configView.read?.().capPerWorkerMax;
        if (max !== undefined) this.set(max);
      },
    }),
  };
}

/** The pool as the leader's scheduler snapshot and counters show it. */
function poolSnapshotMetrics(registry: Registry) {
  return {
    poolWaiting: new Gauge({
      name: 'fairgate_pool_waiting',
      help: 'Requests waiting pool-wide per priority band, from the scheduler snapshot (leader only).',
      labelNames: ['band'],
      registers: [registry],
    }),
    poolInflight: new Gauge({
      name: 'fairgate_pool_inflight',
      help: 'Requests in flight pool-wide, from the scheduler snapshot (leader only).',
      registers: [registry],
    }),
    poolSaturation: new Gauge({
      name: 'fairgate_pool_saturation',
      help: 'Pool saturation (mean over healthy pods; 1 = at the thresholds) from the scheduler snapshot (leader only).',
      registers: [registry],
    }),
    poolReplicas: new Gauge({
      name: 'fairgate_pool_replicas',
      help: 'Gateway replicas registered in the pool whose liveness (scheduler.lease_ttl_ms after their last heartbeat) has not lapsed (leader only).',
      registers: [registry],
    }),
    poolOffered: new Counter({
      name: 'fairgate_pool_offered_total',
      help: 'Requests offered pool-wide (all replicas), by tenant and class, from the scheduler counters (leader only).',
      labelNames: ['tenant', 'class'],
      registers: [registry],
    }),
    poolAdmitted: new Counter({
      name: 'fairgate_pool_admitted_total',
      help: 'Requests admitted (queued or granted) pool-wide, by tenant and class, from the scheduler counters (leader only).',
      labelNames: ['tenant', 'class'],
      registers: [registry],
    }),
  };
}

/** Each pod as the leader's last scrape of its /metrics shows it. */
function podScrapeMetrics(registry: Registry) {
  return {
    podSaturation: new Gauge({
      name: 'fairgate_pod_saturation',
      help: "A pod's saturation, max(queued / queue_depth_threshold, kv / kv_cache_util_threshold); 1 when stale or unhealthy (leader only).",
      labelNames: ['pod'],
      registers: [registry],
    }),
    podWaiting: new Gauge({
      name: 'fairgate_pod_requests_waiting',
      help: "vllm:num_requests_waiting of the leader's last scrape of the pod (leader only).",
      labelNames: ['pod'],
      registers: [registry],
    }),
    podRunning: new Gauge({
      name: 'fairgate_pod_requests_running',
      help: "vllm:num_requests_running of the leader's last scrape of the pod (leader only).",
      labelNames: ['pod'],
      registers: [registry],
    }),
    podKvCacheUsage: new Gauge({
      name: 'fairgate_pod_kv_cache_usage_ratio',
      help: "vllm:kv_cache_usage_perc (1 = full) of the leader's last scrape of the pod (leader only).",
      labelNames: ['pod'],
      registers: [registry],
    }),
  };
}

/** The capacity tuner's periods per pod, by result. */
function tunerPeriodMetrics(registry: Registry) {
  return {
    tunerUpdates: new Counter({
      name: 'fairgate_tuner_updates_total',
      help: "Capacity tuner periods per pod by result: accepted, rejected, reset, bootstrapped, no_observation (leader's periods).",
      labelNames: ['pod', 'result'],
      registers: [registry],
    }),
    tunerUnused: new Counter({
      name: 'fairgate_tuner_unused_periods_total',
      help: "Capacity tuner periods a pod's filter did not take, by result (rejected, reset, no_observation) and reason (nis, invalid-observation, singular, non-positive, restart; too_few_requests, counter_reset, metrics_missing, no_output_samples, no_scrape).",
      labelNames: ['pod', 'result', 'reason'],
      registers: [registry],
    }),
  };
}

/**
 * The replica's own metrics, outside any pool: what its HTTP edge refused. A replica's
 * /metrics shows these and every pool's (metricsText).
 */
export function createEdgeMetrics(labels: { replica: string }) {
  const registry = new Registry();
  registry.setDefaultLabels(labels);
  return {
    registry,
    connectionsRefused: new Counter({
      name: 'fairgate_connections_refused_total',
      help: 'Client connections the HTTP edge refused or closed, by reason: max_connections (over server.max_connections), headers_timeout / request_timeout (408: headers or whole request not received in time), accept_error (e.g. out of file descriptors).',
      labelNames: ['reason'],
      registers: [registry],
    }),
    /** Batch API lines this replica ran to an end (docs/batch.md), by tenant and outcome. */
    batchLines: new Counter({
      name: 'fairgate_batch_lines_total',
      help: 'Batch API lines this replica ended, by tenant and outcome: completed (in the output file), failed (in the error file), skipped (batch cancelled before the line ran), retried (dropped by flow control or a transient failure: tried again later).',
      labelNames: ['tenant', 'outcome'],
      registers: [registry],
    }),
    batchLinesRunning: new Gauge({
      name: 'fairgate_batch_lines_running',
      help: "Batch API lines this replica's workers are running now (submitted to the scheduler, queued or in flight), by tenant.",
      labelNames: ['tenant'],
      registers: [registry],
    }),
    batchLinesPending: new Gauge({
      name: 'fairgate_batch_lines_pending',
      help: 'Batch API lines not yet ended in the batches in progress, by tenant (each replica reads them from Redis every few seconds: every replica shows the same value; use max).',
      labelNames: ['tenant'],
      registers: [registry],
    }),
  };
}

export type EdgeMetrics = ReturnType<typeof createEdgeMetrics>;

/**
 * One Prometheus text of several registries (the edge's and each pool's, told apart by
 * their default labels): each metric family once, its series from every registry.
 *
 * Merged as text: each registry renders itself (prom-client's `metrics()`: families joined
 * by a blank line, each `# HELP`, `# TYPE`, then its series), and a family that several
 * registries render keeps the first one's header and every registry's series, in registry
 * order. Nothing is summed: no two registries render the same series, as each pool's
 * registry carries its `pool` label and the edge's has families of its own. Not prom-client's
 * AggregatorRegistry: it goes through every series as JSON objects and builds a registry of
 * them per scrape, ~5-12 ms of the replica's event loop on a 2-core VM and hundreds of KB of
 * garbage per scrape that reach the old generation (scraped every few ms, ~40 MB more). The
 * registries render Prometheus text (their type says so; OpenMetrics text has another layout).
 */
export async function metricsText(registries: readonly Registry[]): Promise<string> {
  if (registries.length === 1) return (registries[0] as Registry).metrics();
  const texts = await Promise.all(registries.map((registry) => registry.metrics()));
  const families = new Map<string, string[]>();
  for (const text of texts) {
    for (const block of text.slice(0, -1).split('\n\n')) {
      if (!block) continue; // a registry with no metrics renders '\n'
      const name = familyName(block);
      const merged = families.get(name);
      if (!merged) families.set(name, [block]);
      else {
        // The series only: after the `# HELP` and `# TYPE` lines.
        const series = block.indexOf('\n', block.indexOf('\n') + 1);
        if (series !== -1) merged.push(block.slice(series + 1));
      }
    }
  }
  let out = '';
  for (const blocks of families.values()) out += `${blocks.join('\n')}\n\n`;
  return out ? out.slice(0, -1) : '\n';
}

/** The family name of a rendered block: `# HELP <name> <help>`. */
function familyName(block: string): string {
  const start = '# HELP '.length;
  return block.slice(start, block.indexOf(' ', start));
}

export type GatewayMetrics = ReturnType<typeof createGatewayMetrics>;
