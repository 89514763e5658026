import { fairnessUnitConflict, isValidName } from '@fairgate/core';
import { z } from 'zod';
import { settingsShape } from './scheduler-settings-schema.js';
import { scrapeSchema, tunerSchema } from './tuner-schema.js';

/**
 * The gateway configuration file (YAML). One schema; every field has a default
 * except tenants and pods. Keys are snake_case as written in the file.
 * docs/config.md documents each key; keep the two in step.
 */

const sha256Hex = z
  .string()
  .regex(/^[0-9a-f]{64}$/, 'must be a lowercase hex sha256 digest (64 characters)');

/** Default SLO classes and priorities (llm-d / GIE): priority < 0 is sheddable. */
export const DEFAULT_SLO_CLASSES: Record<string, number> = {
  critical: 4,
  standard: 3,
  batch: -1,
  sheddable: -2,
  background: -3,
};

const idPattern = /^[A-Za-z0-9._-]+$/;
const identifier = (what: string) =>
  z
    .string()
    .min(1)
    .max(64)
    .regex(idPattern, `${what} may only use letters, digits, '.', '_' and '-'`);

export const quotasSchema = z.strictObject({
  /** Most requests of this tenant in flight at once, pool-wide. */
  max_concurrent: z.number().int().positive().optional(),
  /** Most KV-cache blocks (ceil((input + max_tokens) / block_size)) held at once, pool-wide. */
  max_kv_blocks: z.number().int().positive().optional(),
});

/**
 * Per-tenant token bucket, exact pool-wide (taken in the scheduler's enqueue script). A
 * request costs its estimated input tokens (plus max_tokens with include_max_tokens) and is
 * trued up to its actual usage when it ends.
 */
export const tokenBucketSchema = z.strictObject({
  /** Most tokens the bucket holds (the largest burst); a bigger request is refused. */
  capacity: z.number().int().min(1).max(1_000_000_000),
  /** Tokens added per second (the sustained rate). */
  refill_per_second: z.number().int().min(0).max(1_000_000_000),
  /** Also charge max_tokens (output) up front, trued up to the actual output at the end. */
  include_max_tokens: z.boolean().default(false),
});

/**
 * A tenant's budgets and rates over UTC windows, exact across replicas (checked in the
 * scheduler's enqueue script): a request is admitted while its day and month have tokens
 * left and its minute has a request left. It reserves its estimate (input + max_tokens),
 * trued up to the pod's usage at release. Absent = no limit. Each pool counts its own.
 */
export const tenantLimitsSchema = z.strictObject({
  /** Tokens (input + output) per UTC day. */
  tokens_per_day: z.number().int().min(1).max(1_000_000_000_000).optional(),
  /** Tokens (input + output) per UTC calendar month. */
  tokens_per_month: z.number().int().min(1).max(1_000_000_000_000).optional(),
  /** Requests admitted per UTC minute. */
  requests_per_minute: z.number().int().min(1).max(1_000_000_000).optional(),
});

export const tenantSchema = z.strictObject({
  id: identifier('tenant id'),
  /** sha256 hex digests of the tenant's API keys (never the keys themselves). */
  api_key_sha256: z.array(sha256Hex).min(1),
  weight: z.number().int().min(1).max(1000).default(1),
  queue_max: z.number().int().min(0).default(100),
  default_class: z.string().default('standard'),
  max_class: z.string().optional(),
  quotas: quotasSchema.default({}),
  token_bucket: tokenBucketSchema.optional(),
  limits: tenantLimitsSchema.optional(),
  /**
   * The models (names or aliases) this tenant may use; absent = every model. Another model
   * answers 404 `model_not_found`, and GET /v1/models lists only these.
   */
  models: z.array(z.string().min(1)).min(1).optional(),
  /**
   * The SLO class this tenant's Batch API lines run at (docs/batch.md); absent = `batch`
   * when slo_classes has it, else the tenant's default class. Capped at max_class like
   * x-slo-class.
   */
  batch_class: z.string().optional(),
});

/** A model name as clients send it (`meta-llama/Llama-3.1-8B-Instruct`, a LoRA adapter's name). */
const modelName = z
  .string()
  .min(1)
  .max(256)
  .regex(/^\S+$/, 'a model name may not contain whitespace');

/** A model a pool serves: its name, or its name and the aliases clients may use for it. */
export const modelSchema = z
  .union([modelName, z.strictObject({ name: modelName, aliases: z.array(modelName).default([]) })])
  .transform((m) => (typeof m === 'string' ? { name: m, aliases: [] as string[] } : m));

export const podSchema = z.strictObject({
  name: identifier('pod name'),
  url: z.url({ protocol: /^https?$/ }),
  /** Most requests the gateway sends this pod at once. */
  cap: z.number().int().positive().default(64),
});

/** A discovered pod's scheme: the pods answer plain HTTP inside a cluster, or HTTPS. */
const schemeSchema = z.enum(['http', 'https']).default('http');

/** DNS discovery: a Kubernetes headless Service, a compose service scaled with `--scale`. */
export const dnsDiscoverySchema = z
  .strictObject({
    /** The name to resolve (A and AAAA records; SRV records with `srv: true`). */
    name: z.string().min(1).max(253),
    /** The pods' port (A/AAAA records carry none); with `srv: true` the records give it. */
    port: z.number().int().min(1).max(65_535).optional(),
    srv: z.boolean().default(false),
    /** DNS servers to ask (`host` or `host:port`); absent = the system's resolvers. */
    servers: z.array(z.string().min(1)).min(1).optional(),
    scheme: schemeSchema,
  })
  .refine((dns) => dns.srv || dns.port !== undefined, {
    message: 'port is required unless srv: true (the SRV records carry the port)',
    path: ['port'],
  });

/** Kubernetes discovery: the ready endpoints of a Service's EndpointSlices, watched. */
export const kubernetesDiscoverySchema = z.strictObject({
  service: z.string().min(1).max(63),
  /** The Service's namespace; absent = the gateway's own (in a cluster), else `default`. */
  namespace: z.string().min(1).max(63).optional(),
  /** A port name or number of the slices; absent = their first port. */
  port: z.union([z.string().min(1), z.number().int().min(1).max(65_535)]).optional(),
  scheme: schemeSchema,
});

/**
 * Where a pool's pods come from besides its `pods:` list: DNS or Kubernetes. Every replica
 * discovers; the leader writes the pool's shared pod set (docs/architecture.md, *Who writes
 * the pod set*).
 */
export const discoverySchema = z
  .strictObject({
    dns: dnsDiscoverySchema.optional(),
    kubernetes: kubernetesDiscoverySchema.optional(),
    /** How often DNS is read again (a Kubernetes watch reports changes as they happen). */
    refresh_ms: z.number().int().min(100).max(600_000).default(5_000),
    /** Most requests the gateway sends each discovered pod at once. */
    cap: z.number().int().positive().default(64),
  })
  .refine((d) => (d.dns === undefined) !== (d.kubernetes === undefined), {
    message: 'give exactly one of dns: or kubernetes:',
  });

/**
 * The scheduler section: the pool settings of the settings table (scheduler-settings-schema.ts)
 * and the replica's own scheduling keys.
 */
export const schedulerSchema = z
  .strictObject({
    ...settingsShape('scheduler'),
    /** Per-class TTFT targets (ms): the deadline of a request without x-slo-ttft-ms. */
    slo_targets_ms: z.record(z.string(), z.number().int().positive()).default({}),
    heartbeat_ms: z.number().int().positive().default(1_000),
    tick_ms: z.number().int().positive().default(1),
    /**
     * Slot recycling (Redis scheduler): a completed request's slot is kept this long for the
     * replica's next request of the same tenant and band, which then goes to the pod without
     * waiting for Redis; 0 turns it off (docs/scheduler.md, *Slot recycling*).
     */
    recycle_ms: z.number().int().min(0).max(100).default(2),
    kv_block_size: z.number().int().positive().default(16),
  })
  .superRefine((scheduler, ctx) => {
    const conflict = fairnessUnitConflict({
      fairnessUnit: scheduler.fairness_unit,
      fairness: scheduler.fairness,
      dispatchOrder: scheduler.dispatch_order,
    });
    if (conflict) ctx.addIssue({ code: 'custom', path: ['fairness_unit'], message: conflict });
  });

/** Admission policy, decided at enqueue on the pool's shared load (docs/admission.md). */
export const admissionSchema = z.strictObject(settingsShape('admission'));

/**
 * Pool saturation from the leader's scrapes of the pods' vLLM metrics: mean over healthy
 * pods of max(waiting / queue_depth_threshold, kv_util / kv_cache_util_threshold); a pod
 * without a fresh scrape counts as 1.0.
 */
export const saturationSchema = z.strictObject(settingsShape('saturation'));

export const upstreamSchema = z.strictObject({
  connect_timeout_ms: z.number().int().positive().default(2_000),
  /** Time to the upstream's response headers (504 when exceeded). */
  headers_timeout_ms: z.number().int().positive().default(60_000),
  /** Longest gap between two body chunks of a stream. */
  body_timeout_ms: z.number().int().positive().default(60_000),
  health_interval_ms: z.number().int().positive().default(1_000),
  /** Consecutive failed checks before a pod is ejected. */
  unhealthy_after: z.number().int().positive().default(2),
  /** Retries on another pod for failures before the first byte. */
  retries: z.number().int().min(0).max(3).default(1),
  keepalive_connections: z.number().int().positive().default(128),
  /**
   * How often each replica reads every healthy pod's GET /v1/models: what `GET /v1/models`
   * answers with, and the models of pools with `discover_models`.
   */
  models_refresh_ms: z.number().int().min(100).max(3_600_000).default(10_000),
});

const decreaseSchema = z.discriminatedUnion('mode', [
  z.strictObject({
    mode: z.literal('multiplicative'),
    /** New cap = floor(cap x factor). */
    factor: z.number().gt(0).lt(1).default(0.75),
  }),
  z.strictObject({
    mode: z.literal('subtractive'),
    /** New cap = cap - step. */
    step: z.number().int().positive().default(4),
  }),
]);

/**
 * The AIMD controller on p99 TTFT (docs/controller.md). `enabled` defaults to whether a
 * target is set: a controller without an SLO has nothing to steer by.
 */
export const controllerSchema = z
  .strictObject({
    enabled: z.boolean().optional(),
    target_p99_ttft_s: z.number().positive().max(3_600).optional(),
    tick_s: z.number().min(0.1).max(3_600).default(5),
    /** Whole seconds: the shared window is kept per store second. */
    window_s: z.number().int().min(1).max(3_600).default(30),
    /** Initial cap per worker (until the controller has stored a state). */
    cap_per_worker: z.number().int().positive().default(32),
    cap_per_worker_min: z.number().int().positive().default(4),
    cap_per_worker_max: z.number().int().positive().default(256),
    target_band_pct: z.number().min(0).lt(1).default(0.2),
    cooldown_ticks: z.number().int().min(0).max(1_000).default(3),
    decrease: decreaseSchema.default({ mode: 'multiplicative', factor: 0.75 }),
    increase_step: z.number().int().positive().default(1),
    min_samples: z.number().int().positive().default(10),
    /**
     * p99 in or above the band while the pods' own p99 (grant to first token) is below the
     * band's floor: the rest is queue wait, so increase (never decrease). Lifts the rule
     * that scheduler.queue_ttl_ms stay below the target (the death spiral it guards against
     * is a decrease on queue wait, which this never makes).
     */
    queue_aware: z.boolean().default(false),
    /**
     * model: start at the capacity tuner's concurrency at lambda* per worker and cap at the
     * model's ceiling (the max batch); none: cap_per_worker and cap_per_worker_max as set.
     */
    bootstrap: z.enum(['none', 'model']).default('none'),
  })
  .superRefine((c, ctx) => {
    const enabled = c.enabled ?? c.target_p99_ttft_s !== undefined;
    if (enabled && c.target_p99_ttft_s === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['target_p99_ttft_s'],
        message: 'is required when the controller is enabled',
      });
    }
    if (c.cap_per_worker_min > c.cap_per_worker_max) {
      ctx.addIssue({
        code: 'custom',
        path: ['cap_per_worker_min'],
        message: `must be <= cap_per_worker_max (${c.cap_per_worker_max})`,
      });
    }
    if (c.cap_per_worker < c.cap_per_worker_min || c.cap_per_worker > c.cap_per_worker_max) {
      ctx.addIssue({
        code: 'custom',
        path: ['cap_per_worker'],
        message: `must be within [cap_per_worker_min, cap_per_worker_max] = [${c.cap_per_worker_min}, ${c.cap_per_worker_max}]`,
      });
    }
    if (c.window_s < c.tick_s) {
      ctx.addIssue({
        code: 'custom',
        path: ['window_s'],
        message: `must be >= tick_s (${c.tick_s}): every tick needs a window to read`,
      });
    }
  })
  .transform((c) => ({ ...c, enabled: c.enabled ?? c.target_p99_ttft_s !== undefined }));

/**
 * Which pod a granted request goes to (docs/routing.md): with `prefix: on` the pod that
 * recently served the most of the request's prompt prefix, weighed against load, from one
 * index in Redis shared by every replica; `off`: the least-loaded pod.
 */
export const routingSchema = z.strictObject({
  ...settingsShape('routing'),
  /** Most prompt blocks (of scheduler.kv_block_size tokens) hashed per request. */
  max_blocks: z.number().int().min(1).max(512).default(128),
  /**
   * LoRA adapter name -> the path a pod loads it from (`lora_path` of vLLM's
   * `POST /v1/load_lora_adapter`), for `lora_load: on`. An adapter named here is served by
   * the pool even while no pod holds it; one a pod lists is loaded from that pod's `root`.
   */
  lora_paths: z
    .record(
      z.string().refine(isValidName, 'an adapter name is 1-200 of [A-Za-z0-9._:@/-]'),
      z.string().min(1),
    )
    .default({}),
});

/** The leader lease: every replica runs the election, one leads (docs/controller.md). */
export const leaderSchema = z
  .strictObject({
    lease_ttl_ms: z.number().int().min(100).max(600_000).default(3_000),
    renew_ms: z.number().int().min(10).max(600_000).default(1_000),
  })
  .superRefine((l, ctx) => {
    if (l.renew_ms * 2 > l.lease_ttl_ms) {
      ctx.addIssue({
        code: 'custom',
        path: ['renew_ms'],
        message: `must be at most half of lease_ttl_ms (${l.lease_ttl_ms}) so one lost renewal does not lose the lease`,
      });
    }
  });

/** `host:port`, as Sentinel and Cluster seed lists are written. */
const hostPort = z
  .string()
  .regex(/^[A-Za-z0-9.-]+:\d{1,5}$/, "must be 'host:port'")
  .transform((text) => {
    const at = text.lastIndexOf(':');
    return { host: text.slice(0, at), port: Number(text.slice(at + 1)) };
  });

/**
 * Where the shared scheduler state lives and what a replica does while it cannot reach it.
 * Exactly one of `url` (one server), `sentinels` + `sentinel_name` (a Sentinel-managed
 * primary) or `cluster_nodes` (a Redis Cluster seed list).
 */
export const redisSchema = z
  .strictObject({
    url: z.url({ protocol: /^rediss?$/ }).optional(),
    sentinels: z.array(hostPort).min(1).optional(),
    sentinel_name: z.string().min(1).optional(),
    cluster_nodes: z.array(hostPort).min(1).optional(),
    /** Password of the data nodes (Sentinel and Cluster; a URL carries its own). */
    password: z.string().min(1).optional(),
    /** Most ms one Redis call may take, queued or sent, before it counts as failed. */
    command_timeout_ms: z.number().int().min(10).max(60_000).default(250),
    /**
     * What a replica does while Redis is unreachable: `reject` answers 503
     * scheduler_unavailable at once; `local_share` admits up to budget / live replicas on
     * its embedded scheduler from its last view of the pool (docs/architecture.md).
     */
    on_outage: z.enum(['reject', 'local_share']).default('reject'),
  })
  .superRefine((redis, ctx) => {
    const given = (['url', 'sentinels', 'cluster_nodes'] as const).filter(
      (key) => redis[key] !== undefined,
    );
    if (given.length !== 1) {
      ctx.addIssue({
        code: 'custom',
        path: given.length === 0 ? ['url'] : [given[1] ?? 'url'],
        message:
          given.length === 0
            ? 'one of url, sentinels (with sentinel_name) or cluster_nodes is required'
            : `give only one of url, sentinels, cluster_nodes (got ${given.join(', ')})`,
      });
    }
    if ((redis.sentinels === undefined) !== (redis.sentinel_name === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: [redis.sentinels === undefined ? 'sentinels' : 'sentinel_name'],
        message: 'sentinels and sentinel_name go together: this one is missing',
      });
    }
  });

/**
 * The HTTP edge: Node's server timeouts and connection limit, against slow and idle clients
 * (docs/gateway.md, *The HTTP edge*). Read at start.
 */
export const serverSchema = z
  .strictObject({
    /**
     * Most ms from the first byte of a request (or the accept, for a connection that sends
     * nothing) to the end of its headers; then 408 and the connection is closed.
     */
    headers_timeout_ms: z.number().int().min(100).max(600_000).default(10_000),
    /**
     * Most ms to receive a whole request, headers and body (0 = no limit). It never bounds
     * the response: a stream may run longer. At least headers_timeout_ms.
     */
    request_timeout_ms: z.number().int().min(0).max(3_600_000).default(60_000),
    /** An idle keep-alive connection is closed after this (Node adds 1 s of slack). */
    keep_alive_timeout_ms: z.number().int().min(1).max(600_000).default(5_000),
    /** Most client connections open at once; further ones are closed at accept. */
    max_connections: z.number().int().min(1).max(1_000_000).default(10_000),
  })
  .superRefine((server, ctx) => {
    if (server.request_timeout_ms > 0 && server.request_timeout_ms < server.headers_timeout_ms) {
      ctx.addIssue({
        code: 'custom',
        path: ['request_timeout_ms'],
        message: `must be 0 (no limit) or >= headers_timeout_ms (${server.headers_timeout_ms}): the whole request includes its headers`,
      });
    }
  });

const MiB = 1024 * 1024;

/**
 * The Batch API (docs/batch.md): files and batches in Redis, lines run as BullMQ jobs by
 * workers in every replica, each line through the scheduler at the tenant's batch class.
 * Needs `redis:` (without it the endpoints answer 501).
 */
export const batchSchema = z.strictObject({
  /** Lines one replica runs at once per pool (its BullMQ worker's concurrency); 0 = none. */
  concurrency: z.number().int().min(0).max(4_096).default(16),
  /** Largest file one upload may store (413 past it). */
  max_file_bytes: z
    .number()
    .int()
    .min(1)
    .max(512 * MiB)
    .default(50 * MiB),
  /** Most bytes one tenant's files may hold together (429 past it). */
  max_tenant_bytes: z
    .number()
    .int()
    .min(1)
    .max(64 * 1024 * MiB)
    .default(500 * MiB),
  /** Most lines in one input file (OpenAI's limit is 50,000). */
  max_lines: z.number().int().min(1).max(1_000_000).default(50_000),
  /** First wait before a line the scheduler dropped (evicted, queue TTL, shed) runs again. */
  retry_base_ms: z.number().int().min(1).max(600_000).default(1_000),
  /** Longest wait between tries of one line (the wait doubles from retry_base_ms up to this). */
  retry_max_ms: z.number().int().min(1).max(3_600_000).default(30_000),
  /** Most ms one line may take on its pod, queue wait included; then it is tried again. */
  line_timeout_ms: z.number().int().min(100).max(86_400_000).default(600_000),
  /**
   * A line whose replica stopped renewing its lock for this long (a crash) runs again on
   * another replica (BullMQ's lock duration and stalled-job check).
   */
  stalled_ms: z.number().int().min(100).max(600_000).default(30_000),
});

/**
 * The JWS algorithms a JWT may be signed with: asymmetric only. `none` is never accepted, and
 * HMAC (HS*) is left out: its key is a shared secret, which a JWKS served to every verifier
 * would publish.
 */
const JWT_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
] as const;

/**
 * JWT bearer tokens beside API keys (docs/tenants.md, *JWT*): signed by a key of a JWKS (a
 * URL, fetched and cached, or a file read at start), from `issuer`, for `audience`, naming
 * the tenant in `tenant_claim`. Read at start: a reload cannot change it.
 */
export const jwtAuthSchema = z
  .strictObject({
    /** The issuer's JWKS endpoint (its `jwks_uri`). */
    jwks_url: z.url({ protocol: /^https?$/ }).optional(),
    /** A JWKS (`{"keys": [...]}`) in a file, read once at start. */
    jwks_file: z.string().min(1).optional(),
    /** The `iss` every token must carry. */
    issuer: z.string().min(1),
    /** The `aud` (one of them) every token must carry. */
    audience: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]),
    /** The claim whose value is the tenant id. */
    tenant_claim: z.string().min(1).default('tenant'),
    /** Absent = every algorithm of JWT_ALGORITHMS. */
    algorithms: z
      .array(
        z.enum(JWT_ALGORITHMS, {
          message: `must be one of ${JWT_ALGORITHMS.join(', ')} (asymmetric only: never none or HS*)`,
        }),
      )
      .min(1)
      .optional(),
    /** Seconds of clock skew allowed on `exp` and `nbf`. */
    clock_tolerance_s: z.number().min(0).max(600).default(30),
  })
  .superRefine((jwt, ctx) => {
    if ((jwt.jwks_url === undefined) === (jwt.jwks_file === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: [jwt.jwks_url === undefined ? 'jwks_url' : 'jwks_file'],
        message:
          jwt.jwks_url === undefined
            ? 'one of jwks_url or jwks_file is required'
            : 'give only one of jwks_url, jwks_file',
      });
    }
  })
  .transform((jwt) => ({ ...jwt, algorithms: jwt.algorithms ?? [...JWT_ALGORITHMS] }));

/** How tenants authenticate besides API keys. */
export const authSchema = z.strictObject({ jwt: jwtAuthSchema.optional() });

/** Usage metering (docs/tenants.md, *Usage*): hourly buckets per tenant, model and pool. */
export const usageSchema = z.strictObject({
  /** Days an hourly bucket is kept after its hour (GET /admin/usage reads them). */
  retention_days: z.number().int().min(1).max(3_650).default(35),
  /** How often a replica adds what it counted to the shared buckets. */
  flush_ms: z.number().int().min(10).max(60_000).default(100),
});

/** Graceful shutdown on SIGTERM (docs/gateway.md, *Drain*). */
export const shutdownSchema = z.strictObject({
  /**
   * Seconds in-flight requests get to finish after SIGTERM; then they are aborted, their
   * leases released, and the process exits.
   */
  drain_timeout_s: z.number().min(0).max(3_600).default(30),
});

export const telemetrySchema = z.strictObject({
  service_name: z.string().min(1).default('fairgate'),
  /** Traces go to OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (standard OTEL_* env) is set. */
  traces: z.boolean().default(true),
});

/**
 * One pool of `pools:`: its pods, the models they serve, and optionally its own scheduler,
 * admission, saturation, controller and tuner sections (each replaces the top-level one
 * whole for this pool; absent = the top-level one). docs/config.md, *Pools and models*.
 */
export const poolSchema = z.strictObject({
  name: identifier('pool'),
  models: z.array(modelSchema).default([]),
  /**
   * Also serve every model the pool's pods list in their GET /v1/models (LoRA adapters
   * loaded at run time included); a configured model of another pool keeps its pool.
   */
  discover_models: z.boolean().default(false),
  /** Pods listed by hand; with `discovery` they may be none. */
  pods: z.array(podSchema).default([]),
  discovery: discoverySchema.optional(),
  scheduler: schedulerSchema.optional(),
  admission: admissionSchema.optional(),
  saturation: saturationSchema.optional(),
  controller: controllerSchema.optional(),
  tuner: tunerSchema.optional(),
  routing: routingSchema.optional(),
});

const configObject = z.strictObject({
  /**
   * Pool name of a single-pool config (top-level `pods`): the Redis hash tag {fg:<pool>}
   * every key lives under. With `pools:`, the first pool's name.
   */
  pool: identifier('pool').default('default'),
  /** Models of a single-pool config; absent = its pods get every model a client names. */
  models: z.array(modelSchema).min(1).optional(),
  /** Several pools, each with its pods and models (instead of top-level pods). */
  pools: z.array(poolSchema).min(1).optional(),
  listen: z
    .strictObject({
      host: z.string().min(1).default('0.0.0.0'),
      port: z.number().int().min(0).max(65_535).default(8080),
    })
    .default({ host: '0.0.0.0', port: 8080 }),
  /** Absent or null (`FAIRGATE__REDIS=null`): one replica on the embedded LocalScheduler. */
  redis: redisSchema.nullish(),
  admin: z.strictObject({ token_sha256: sha256Hex.optional() }).default({}),
  /** JWT bearer tokens beside API keys; absent = API keys only. */
  auth: authSchema.optional(),
  limits: z
    .strictObject({
      max_body_bytes: z
        .number()
        .int()
        .positive()
        .default(4 * 1024 * 1024),
      /** An upload's (audio's) limit: it is written to a file, never held in memory. */
      max_upload_bytes: z
        .number()
        .int()
        .positive()
        .default(25 * 1024 * 1024),
    })
    .default({ max_body_bytes: 4 * 1024 * 1024, max_upload_bytes: 25 * 1024 * 1024 }),
  slo_classes: z
    .record(identifier('class'), z.number().int().min(-100).max(100))
    .default(DEFAULT_SLO_CLASSES),
  tenants: z.array(tenantSchema).min(1),
  /** The pods of a single-pool config (or `pools:`). */
  pods: z.array(podSchema).optional(),
  /** Where a single-pool config's pods are discovered (besides or instead of `pods`). */
  discovery: discoverySchema.optional(),
  scheduler: schedulerSchema.default(schedulerSchema.parse({})),
  admission: admissionSchema.default(admissionSchema.parse({})),
  saturation: saturationSchema.default(saturationSchema.parse({})),
  upstream: upstreamSchema.default(upstreamSchema.parse({})),
  telemetry: telemetrySchema.default(telemetrySchema.parse({})),
  controller: controllerSchema.default(controllerSchema.parse({})),
  leader: leaderSchema.default(leaderSchema.parse({})),
  scrape: scrapeSchema.default(scrapeSchema.parse({})),
  tuner: tunerSchema.default(tunerSchema.parse({})),
  routing: routingSchema.default(routingSchema.parse({})),
  server: serverSchema.default(serverSchema.parse({})),
  shutdown: shutdownSchema.default(shutdownSchema.parse({})),
  usage: usageSchema.default(usageSchema.parse({})),
  batch: batchSchema.default(batchSchema.parse({})),
});

type ParsedConfig = z.output<typeof configObject>;
type RefineContext = z.RefinementCtx;
type Path = (string | number)[];

/** Reports each value of `values` seen before, at `path(index)`. */
function checkUnique(
  ctx: RefineContext,
  values: string[],
  path: (index: number) => Path,
  what: string,
): void {
  const seen = new Map<string, number>();
  values.forEach((value, index) => {
    const first = seen.get(value);
    if (first !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: path(index),
        message: `duplicate ${what} '${value}' (also at index ${first})`,
      });
    } else seen.set(value, index);
  });
}

/** `name` is a key of slo_classes, else an issue at `path`. */
function checkKnownClass(config: ParsedConfig, ctx: RefineContext, name: string, path: Path) {
  if (!(name in config.slo_classes)) {
    ctx.addIssue({
      code: 'custom',
      path,
      message: `unknown SLO class '${name}' (known: ${Object.keys(config.slo_classes).join(', ')})`,
    });
  }
}

/** Pod names unique across pools; a model name or alias picks exactly one pool. */
function checkPodAndModelNames(
  config: ParsedConfig,
  ctx: RefineContext,
  pools: PoolConfig[],
): { name: string; path: Path }[] {
  // Pod names are unique across pools: a pod is one metric series and one health state.
  const podPaths = pools.flatMap((pool, i) =>
    pool.pods.map((pod, j) => ({
      name: pod.name,
      path: config.pools ? ['pools', i, 'pods', j, 'name'] : ['pods', j, 'name'],
    })),
  );
  checkUnique(
    ctx,
    podPaths.map((p) => p.name),
    (i) => podPaths[i]?.path ?? [],
    'pod name',
  );
  const modelPaths = pools.flatMap((pool, i) =>
    pool.models.flatMap((model, j) => {
      const base = config.pools ? ['pools', i, 'models', j] : ['models', j];
      return [
        { name: model.name, path: [...base, 'name'] },
        // (an entry that failed its own check reaches here unparsed: no aliases)
        ...(model.aliases ?? []).map((alias, k) => ({
          name: alias,
          path: [...base, 'aliases', k],
        })),
      ];
    }),
  );
  checkUnique(
    ctx,
    modelPaths.map((m) => m.name),
    (i) => modelPaths[i]?.path ?? [],
    'model name or alias',
  );
  return modelPaths;
}

/** An API key digest belongs to one tenant. */
function checkKeyOwners(config: ParsedConfig, ctx: RefineContext): void {
  const digests = config.tenants.flatMap((t, i) => t.api_key_sha256.map((d, j) => ({ d, i, j })));
  const owner = new Map<string, number>();
  for (const { d, i, j } of digests) {
    const other = owner.get(d);
    if (other !== undefined && other !== i) {
      ctx.addIssue({
        code: 'custom',
        path: ['tenants', i, 'api_key_sha256', j],
        message: `API key digest already belongs to tenant '${config.tenants[other]?.id}'`,
      });
    }
    owner.set(d, i);
  }
}

/** Each pool's sections: the queue TTL below the controller's target, known class names. */
function checkPoolSections(config: ParsedConfig, ctx: RefineContext, pools: PoolConfig[]): void {
  pools.forEach((pool, i) => {
    // A section a pool sets is reported at its own path; an inherited one at the top level.
    const at = (section: keyof PoolSections) =>
      config.pools?.[i]?.[section] !== undefined ? ['pools', i, section] : [section];
    const target = pool.controller.target_p99_ttft_s;
    if (pool.controller.enabled && target !== undefined && !pool.controller.queue_aware) {
      // Traps 2 and 4 of docs/controller.md (*The four traps*): a request may wait in the queue as long as the
      // SLO allows for its whole TTFT, and serving it then feeds a death spiral.
      if (pool.scheduler.queue_ttl_ms >= target * 1_000) {
        ctx.addIssue({
          code: 'custom',
          path: [...at('scheduler'), 'queue_ttl_ms'],
          message: `must be below controller.target_p99_ttft_s (${target * 1_000} ms) while the controller is enabled: a queue wait as long as the SLO only feeds a death spiral`,
        });
      }
    }
    for (const name of Object.keys(pool.scheduler.slo_targets_ms)) {
      checkKnownClass(config, ctx, name, [...at('scheduler'), 'slo_targets_ms', name]);
    }
    for (const name of Object.keys(pool.saturation.band_ceilings)) {
      checkKnownClass(config, ctx, name, [...at('saturation'), 'band_ceilings', name]);
    }
  });
  config.pools?.forEach((pool, i) => {
    if (pool.models.length === 0 && !pool.discover_models) {
      ctx.addIssue({
        code: 'custom',
        path: ['pools', i, 'models'],
        message: "list the pool's models, or set discover_models: true",
      });
    }
  });
}

/** Each tenant's models are served somewhere, and its classes exist and are in order. */
function checkTenants(
  config: ParsedConfig,
  ctx: RefineContext,
  pools: PoolConfig[],
  modelPaths: { name: string }[],
): void {
  const served = servedModels(pools, modelPaths);
  config.tenants.forEach((tenant, i) => {
    for (const problem of tenantProblems(config.slo_classes, served, tenant)) {
      ctx.addIssue({
        code: 'custom',
        path: ['tenants', i, ...problem.path],
        message: problem.message,
      });
    }
  });
}

/**
 * The model names a tenant's allow-list may use: every configured name and alias; null
 * when any name can be served (a pool that takes every model, or discovers its models).
 */
export function servedModels(
  pools: readonly PoolConfig[],
  modelPaths: readonly { name: string }[] = pools.flatMap((p) =>
    p.models.flatMap((m) => [{ name: m.name }, ...m.aliases.map((name) => ({ name }))]),
  ),
): ReadonlySet<string> | null {
  const openEnded = pools.some((pool) => pool.models.length === 0 || pool.discoverModels);
  return openEnded ? null : new Set(modelPaths.map((m) => m.name));
}

/**
 * What a tenant's schema cannot check alone: its classes are known and in order, its
 * models served. Shared by the file's tenants and those the admin API creates.
 */
export function tenantProblems(
  sloClasses: Readonly<Record<string, number>>,
  served: ReadonlySet<string> | null,
  tenant: Pick<TenantConfig, 'default_class' | 'max_class' | 'batch_class' | 'models'>,
): Array<{ path: Path; message: string }> {
  const problems: Array<{ path: Path; message: string }> = [];
  if (served) {
    tenant.models?.forEach((model, j) => {
      if (!served.has(model)) {
        problems.push({
          path: ['models', j],
          message: `unknown model '${model}' (served: ${[...served].join(', ')})`,
        });
      }
    });
  }
  for (const key of ['default_class', 'max_class', 'batch_class'] as const) {
    const name = tenant[key];
    if (name !== undefined && !(name in sloClasses)) {
      problems.push({
        path: [key],
        message: `unknown SLO class '${name}' (known: ${Object.keys(sloClasses).join(', ')})`,
      });
    }
  }
  const max = tenant.max_class ?? tenant.default_class;
  const dflt = sloClasses[tenant.default_class];
  const ceiling = sloClasses[max];
  if (dflt !== undefined && ceiling !== undefined && dflt > ceiling) {
    problems.push({
      path: ['default_class'],
      message: `default class '${tenant.default_class}' is above max class '${max}'`,
    });
  }
  return problems;
}

/** What one key's schema cannot check: names unique, references resolved, pools well formed. */
function checkConfig(config: ParsedConfig, ctx: RefineContext): void {
  checkUnique(
    ctx,
    config.tenants.map((t) => t.id),
    (i) => ['tenants', i, 'id'],
    'tenant id',
  );
  const singlePool = config.pods !== undefined || config.discovery !== undefined;
  if (singlePool === (config.pools !== undefined)) {
    ctx.addIssue({
      code: 'custom',
      path: [singlePool ? 'pools' : 'pods'],
      message: singlePool
        ? 'give either top-level pods/discovery (one pool) or pools:, not both'
        : 'is required (or discovery:, or pools: for several pools)',
    });
    return;
  }
  if (config.pools && config.models) {
    ctx.addIssue({
      code: 'custom',
      path: ['models'],
      message: 'with pools:, each pool lists its own models',
    });
  }
  const pools = poolsOf(config);
  pools.forEach((pool, i) => {
    if (pool.pods.length === 0 && !pool.discovery) {
      ctx.addIssue({
        code: 'custom',
        path: config.pools ? ['pools', i, 'pods'] : ['pods'],
        message: 'a pool needs at least one pod, or discovery:',
      });
    }
  });
  if (config.pools) {
    checkUnique(
      ctx,
      pools.map((p) => p.name),
      (i) => ['pools', i, 'name'],
      'pool name',
    );
  }
  const modelPaths = checkPodAndModelNames(config, ctx, pools);
  checkKeyOwners(config, ctx);
  checkPoolSections(config, ctx, pools);
  checkTenants(config, ctx, pools, modelPaths);
  if (config.batch.retry_max_ms < config.batch.retry_base_ms) {
    ctx.addIssue({
      code: 'custom',
      path: ['batch', 'retry_max_ms'],
      message: `must be at least batch.retry_base_ms (${config.batch.retry_base_ms})`,
    });
  }
}

export const configSchema = configObject.superRefine(checkConfig).transform((config) => {
  const pools = poolsOf(config);
  const first = pools[0] as PoolConfig; // the refinement above guarantees one
  return {
    ...config,
    pool: first.name,
    pools,
    /** Every pod of every pool (names are unique across pools). */
    pods: pools.flatMap((pool) => pool.pods),
  };
});

/** The sections a pool may set for itself; absent ones are the top-level sections. */
type PoolSections = Pick<
  z.output<typeof poolSchema>,
  'scheduler' | 'admission' | 'saturation' | 'controller' | 'tuner' | 'routing'
>;

/** One pool as the gateway runs it: every section resolved (its own, or the top-level one). */
export interface PoolConfig {
  readonly name: string;
  /** Empty: a single-pool config without `models:`, whose pods get every model. */
  readonly models: readonly { name: string; aliases: string[] }[];
  /** Also the models its pods list (config `pools[].discover_models`). */
  readonly discoverModels: boolean;
  /** The pods listed in the config (discovered ones join them at run time). */
  readonly pods: PodConfig[];
  readonly discovery: DiscoveryConfig | undefined;
  readonly scheduler: SchedulerConfig;
  readonly admission: AdmissionSectionConfig;
  readonly saturation: SaturationSectionConfig;
  readonly controller: ControllerSectionConfig;
  readonly tuner: z.output<typeof tunerSchema>;
  readonly routing: RoutingConfig;
}

type ParsedSections = Pick<
  z.output<typeof configObject>,
  'pool' | 'models' | 'pools' | 'pods' | 'discovery' | keyof PoolSections
>;

/** The pools a parsed config describes: `pools:`, or the single pool of top-level `pods`. */
function poolsOf(config: ParsedSections): PoolConfig[] {
  if (config.pools) {
    return config.pools.map((pool) => ({
      name: pool.name,
      models: pool.models,
      discoverModels: pool.discover_models,
      pods: pool.pods,
      discovery: pool.discovery,
      scheduler: pool.scheduler ?? config.scheduler,
      admission: pool.admission ?? config.admission,
      saturation: pool.saturation ?? config.saturation,
      controller: pool.controller ?? config.controller,
      tuner: pool.tuner ?? config.tuner,
      routing: pool.routing ?? config.routing,
    }));
  }
  return [
    {
      name: config.pool,
      models: config.models ?? [],
      discoverModels: false,
      pods: config.pods ?? [],
      discovery: config.discovery,
      scheduler: config.scheduler,
      admission: config.admission,
      saturation: config.saturation,
      controller: config.controller,
      tuner: config.tuner,
      routing: config.routing,
    },
  ];
}

export type FairgateConfig = z.infer<typeof configSchema>;
export type TenantConfig = z.infer<typeof tenantSchema>;
export type PodConfig = z.infer<typeof podSchema>;
export type DiscoveryConfig = z.infer<typeof discoverySchema>;
export type SchedulerConfig = z.infer<typeof schedulerSchema>;
export type AdmissionSectionConfig = z.infer<typeof admissionSchema>;
export type SaturationSectionConfig = z.infer<typeof saturationSchema>;
export type TokenBucketConfig = z.infer<typeof tokenBucketSchema>;
export type UpstreamConfig = z.infer<typeof upstreamSchema>;
export type ControllerSectionConfig = z.infer<typeof controllerSchema>;
export type LeaderConfig = z.infer<typeof leaderSchema>;
export type RedisSectionConfig = z.infer<typeof redisSchema>;
export type ServerSectionConfig = z.infer<typeof serverSchema>;
export type ShutdownSectionConfig = z.infer<typeof shutdownSchema>;
export type RoutingConfig = z.infer<typeof routingSchema>;
export type BatchSectionConfig = z.infer<typeof batchSchema>;
