import { existsSync, readFileSync } from 'node:fs';
import { DEFAULT_TOKEN_WEIGHTS, type TokenWeights } from '@fairgate/core';
import { parseDocument } from 'yaml';
import { z } from 'zod';
import { BUILT_IN_NAMES, builtInPath } from './builtins.js';

/**
 * Scenario files (YAML): who sends what, when, through which replica, and what the gateway
 * and the stack look like for the run. One zod schema; a bad file is refused with one line
 * per problem naming the key (`tenants[1].arrival.rate: ...`). docs/load.md documents it.
 */

/** Development API keys of examples/*.yaml (examples/README.md), by `key_ref`. */
export const DEV_KEYS: Record<string, string> = {
  solo: 'fg-dev-solo',
  paying: 'fg-dev-paying',
  free: 'fg-dev-free',
  gold: 'fg-dev-gold',
  silver: 'fg-dev-silver',
  bronze: 'fg-dev-bronze',
};
export const DEV_ADMIN_TOKEN = 'fg-dev-admin';

/** A point in time: seconds, or a percentage of the run's duration ("40%"). */
const instant = z.union([
  z.number().min(0).max(86_400),
  z.string().regex(/^\d+(\.\d+)?%$/, 'must be seconds (a number) or a percentage like "40%"'),
]);
export type Instant = z.infer<typeof instant>;

const rate = z.number().min(0).max(10_000);
const window = { start_s: instant.optional(), end_s: instant.optional() };

export const arrivalSchema = z.discriminatedUnion('kind', [
  /** Poisson arrivals at a constant rate (per second). */
  z.strictObject({ kind: z.literal('poisson'), rate, ...window }),
  /** Poisson at `rate` during on-periods of on_s, silent for off_s, repeating. */
  z.strictObject({
    kind: z.literal('onoff'),
    rate,
    on_s: z.number().positive().max(86_400),
    off_s: z.number().min(0).max(86_400),
    /** Start with the off-period instead. */
    start_off: z.boolean().default(false),
    ...window,
  }),
  /** Poisson whose rate moves linearly from `from` to `to` over the window. */
  z.strictObject({ kind: z.literal('ramp'), from: rate, to: rate, ...window }),
  /** Poisson at base_rate, and at `rate` for duration_s from at_s. */
  z.strictObject({
    kind: z.literal('burst'),
    base_rate: rate.default(0),
    rate,
    at_s: instant,
    duration_s: instant,
    ...window,
  }),
  /**
   * Poisson whose rate follows a day compressed into period_s: base_rate at the window's
   * start, peak_rate half a period later, back to base_rate after a period (a raised cosine,
   * repeating). Its mean over whole periods is (base_rate + peak_rate) / 2.
   */
  z
    .strictObject({
      kind: z.literal('diurnal'),
      base_rate: rate.default(0),
      peak_rate: rate,
      period_s: instant,
      ...window,
    })
    .superRefine((a, ctx) => {
      if (a.peak_rate < a.base_rate) {
        ctx.addIssue({
          code: 'custom',
          path: ['peak_rate'],
          message: `must be >= base_rate (${a.base_rate})`,
        });
      }
      const period = typeof a.period_s === 'number' ? a.period_s : Number.parseFloat(a.period_s);
      if (!(period > 0)) {
        ctx.addIssue({ code: 'custom', path: ['period_s'], message: 'must be > 0' });
      }
    }),
]);
export type ArrivalSpec = z.infer<typeof arrivalSchema>;

export const lengthSchema = z
  .strictObject({
    /** Median tokens (log-normal). */
    median: z.number().positive().max(100_000),
    /** Sigma of the underlying normal (0 = always the median). */
    sigma: z.number().min(0).max(3).default(0.5),
    min: z.number().int().min(1).default(1),
    max: z.number().int().min(1).max(1_000_000),
  })
  .refine((l) => l.min <= l.max, { message: 'min must be <= max', path: ['min'] });
export type LengthSpec = z.infer<typeof lengthSchema>;

const idPattern = /^[A-Za-z0-9._-]+$/;
const identifier = z.string().min(1).max(64).regex(idPattern, "letters, digits, '.', '_', '-'");

export const tenantSchema = z
  .strictObject({
    name: identifier,
    /** The API key sent as Bearer token. */
    api_key: z.string().min(1).optional(),
    /** Or a development key of examples/README.md by name (paying, free, gold, ...). */
    key_ref: z.string().optional(),
    /** Gateway tenant settings, used when the run starts its own stack. */
    weight: z.number().int().min(1).max(1000).default(1),
    slo_class: z.string().default('standard'),
    max_class: z.string().optional(),
    queue_max: z.number().int().min(0).optional(),
    quotas: z.record(z.string(), z.unknown()).optional(),
    token_bucket: z.record(z.string(), z.unknown()).optional(),
    /** Send x-slo-class: slo_class with every request (default true). */
    class_header: z.boolean().default(true),
    /** Send x-slo-ttft-ms (a deadline for slo-deadline order). */
    slo_ttft_ms: z.number().int().positive().optional(),
    /** The SLO class of this tenant's Batch API lines (gateway tenants[].batch_class; default batch). */
    batch_class: z.string().optional(),
    /** Its live requests; only the tenant of the `batch:` section may have none. */
    arrival: arrivalSchema.optional(),
    prompt_tokens: lengthSchema.default({ median: 12, sigma: 0.5, min: 1, max: 256 }),
    output_tokens: lengthSchema.default({ median: 24, sigma: 0.4, min: 1, max: 128 }),
    stream: z.boolean().default(true),
    /** Index into the target list; default: requests go round-robin over all targets. */
    via_replica: z.number().int().min(0).max(63).optional(),
    /**
     * Conversations sharing long system prompts (chat): each request is a turn of one of
     * `users` users, whose conversation opens with system prompt (user mod system_prompts)
     * and carries its earlier turns (user turns of prompt_tokens' median, answers of
     * output_tokens' median), so it grows; after max_turns the user starts afresh.
     */
    shared_prefix: z
      .strictObject({
        system_prompts: z.number().int().min(1).max(1_000).default(8),
        system_tokens: z.number().int().min(1).max(100_000).default(1_000),
        users: z.number().int().min(1).max(1_000_000).default(64),
        max_turns: z.number().int().min(1).max(100).default(4),
      })
      .optional(),
  })
  .superRefine((t, ctx) => {
    if ((t.api_key === undefined) === (t.key_ref === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: ['api_key'],
        message: 'give exactly one of api_key and key_ref',
      });
    }
    if (t.key_ref !== undefined && !(t.key_ref in DEV_KEYS)) {
      ctx.addIssue({
        code: 'custom',
        path: ['key_ref'],
        message: `unknown development key '${t.key_ref}' (known: ${Object.keys(DEV_KEYS).join(', ')})`,
      });
    }
  });
export type TenantSpec = z.infer<typeof tenantSchema>;

const section = z.record(z.string(), z.unknown());

/** Gateway config sections merged over the generated config when the run starts a stack. */
export const gatewayOverridesSchema = z.strictObject({
  scheduler: section.optional(),
  controller: section.optional(),
  admission: section.optional(),
  saturation: section.optional(),
  upstream: section.optional(),
  leader: section.optional(),
  limits: section.optional(),
  routing: section.optional(),
  /** The Batch API's workers: concurrency, retry_base_ms, retry_max_ms, ... (docs/batch.md). */
  batch: section.optional(),
  /** The leader's pod scrape and the capacity tuner (the autoscale scenario sizes with it). */
  scrape: section.optional(),
  tuner: section.optional(),
  slo_classes: z.record(z.string(), z.number().int()).optional(),
});
export type GatewayOverrides = z.infer<typeof gatewayOverridesSchema>;

export const simSchema = z.strictObject({
  alpha_ms: z.number().min(0).default(40),
  beta_ms: z.number().min(0).default(2),
  gamma_ms: z.number().min(0).default(0),
  max_num_seqs: z.number().int().positive().default(256),
  kv_blocks: z.number().int().positive().optional(),
  max_waiting: z.number().int().positive().optional(),
});

/**
 * The autoscale stack: the pods are found through a real DNS server (dnsmasq), and a local
 * scaler (scaler.ts) starts and stops them from the pool's desired_pods, standing in for
 * KEDA. `stack.pods` is the number it starts with.
 */
export const autoscaleSchema = z
  .strictObject({
    min_pods: z.number().int().min(0).max(8).default(1),
    max_pods: z.number().int().min(1).max(8).default(6),
    /** How often the scaler reads desired_pods (KEDA's pollingInterval). */
    poll_ms: z.number().int().min(100).max(60_000).default(1_000),
    /** Most seconds a removed pod gets to finish what it holds before it is stopped. */
    drain_s: z.number().min(0).max(600).default(30),
    /** The gateways' discovery.refresh_ms. */
    refresh_ms: z.number().int().min(100).max(60_000).default(1_000),
  })
  .refine((a) => a.min_pods <= a.max_pods, {
    message: 'min_pods must be at most max_pods',
    path: ['min_pods'],
  });
export type AutoscaleSpec = z.infer<typeof autoscaleSchema>;

export const stackSchema = z.strictObject({
  pods: z.number().int().min(1).max(8).default(2),
  /** Gateway replicas (one when no redis-server is installed: embedded scheduler). */
  replicas: z.number().int().min(1).max(8).default(3),
  /** pods[].cap of every pod. */
  pod_cap: z.number().int().positive().default(64),
  sim: simSchema.default(simSchema.parse({})),
  /** Seconds of a direct closed-loop probe of the pods at pod_cap before the run (0 = off; a cross-check of the modeled capacity). */
  capacity_probe_s: z.number().min(0).max(60).default(0),
  /** Pods discovered by DNS and scaled from desired_pods (needs dnsmasq and redis-server). */
  autoscale: autoscaleSchema.optional(),
});
export type StackSpec = z.infer<typeof stackSchema>;

export const limitsSchema = z.strictObject({
  /** Refuse a schedule with more arrivals than this. */
  max_requests: z.number().int().positive().max(2_000_000).default(200_000),
  /** Most requests open at once; an arrival above it is recorded as client_overflow. */
  max_outstanding: z.number().int().positive().max(50_000).default(4_000),
  /** After the last arrival, how long outstanding requests may finish before being aborted. */
  drain_s: z.number().min(0).max(600).default(20),
  /** Longest single request. */
  request_timeout_s: z.number().positive().max(3_600).default(60),
});

export const sweepSchema = z.strictObject({
  /** Static cap per worker of each run. */
  caps: z.array(z.number().int().positive()).min(1).max(32).default([4, 8, 16, 32, 64, 128, 256]),
  /** Run every cap with the controller off, then on (starting from that cap). */
  controller: z
    .array(z.enum(['off', 'on']))
    .min(1)
    .default(['off', 'on']),
  /** Length of each run (the scenario's duration_s is ignored for sweeps). */
  run_s: z.number().positive().max(3_600).default(40),
  /** Measure the last this many seconds of each run ("where it ends"). */
  measure_last_s: z.number().positive().max(3_600).default(15),
});
export type SweepSpec = z.infer<typeof sweepSchema>;

/**
 * One Batch API batch submitted during the run (needs the gateway's `redis:`): at at_s the
 * runner uploads `lines` chat requests as a JSONL file, creates the batch and polls it
 * every poll_ms until it ends, or until the run's duration plus drain_s (then cancels it).
 */
export const batchSchema = z.strictObject({
  /** The tenant submitting it: a tenants[] name (its key, weight, batch_class); it may have no arrival. */
  tenant: identifier,
  /** Request lines in the input file. */
  lines: z.number().int().min(1).max(50_000),
  /** When it is submitted (seconds or a percentage of the duration). */
  at_s: instant.default(0),
  /** Lengths of the lines (log-normal, seeded); default: the tenant's prompt_tokens / output_tokens. */
  prompt_tokens: lengthSchema.optional(),
  /** = max_tokens of each line. */
  output_tokens: lengthSchema.optional(),
  /** `model` of the lines (default: the run's model, --model). */
  model: z.string().min(1).optional(),
  /** How often GET /v1/batches/{id} is polled. */
  poll_ms: z.number().int().min(50).max(60_000).default(500),
  /** After the run's duration, how long the run waits for the batch to end before cancelling it. */
  drain_s: z.number().min(0).max(3_600).default(60),
  /** Index into the targets the batch calls go to (default 0). */
  via_replica: z.number().int().min(0).max(63).default(0),
});
export type BatchSpec = z.infer<typeof batchSchema>;

/**
 * One run of a comparison: the scenario again (same seed, same schedule) with `gateway`
 * merged over the scenario's `gateway:` sections; `label` names the run in the report.
 */
export const compareRunSchema = z.strictObject({
  label: identifier,
  gateway: gatewayOverridesSchema.default({}),
});

export const scenarioSchema = z
  .strictObject({
    name: identifier,
    description: z.string().optional(),
    kind: z.enum(['run', 'sweep']).default('run'),
    duration_s: z.number().positive().max(86_400).default(60),
    seed: z
      .number()
      .int()
      .min(0)
      .max(2 ** 32 - 1)
      .default(1),
    /** p99 TTFT target shown in the report (default: gateway.controller.target_p99_ttft_s). */
    target_p99_ttft_s: z.number().positive().optional(),
    tenants: z.array(tenantSchema).min(1).max(64),
    gateway: gatewayOverridesSchema.default({}),
    stack: stackSchema.default(stackSchema.parse({})),
    /** The fifo configuration of --baseline: static budget (default: scheduler.budget or pods x pod_cap). */
    baseline: z.strictObject({ budget: z.number().int().positive().optional() }).default({}),
    limits: limitsSchema.default(limitsSchema.parse({})),
    sweep: sweepSchema.optional(),
    batch: batchSchema.optional(),
    /** With --stack: one run per entry, in order, reported side by side. */
    compare: z.array(compareRunSchema).min(2).max(8).optional(),
  })
  .superRefine((s, ctx) => {
    const names = new Map<string, number>();
    s.tenants.forEach((t, i) => {
      const first = names.get(t.name);
      if (first !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['tenants', i, 'name'],
          message: `duplicate tenant name '${t.name}' (also at index ${first})`,
        });
      } else names.set(t.name, i);
    });
    if (s.kind === 'sweep' && !s.sweep) {
      ctx.addIssue({ code: 'custom', path: ['sweep'], message: 'is required when kind is sweep' });
    }
    s.tenants.forEach((t, i) => {
      if (t.arrival === undefined && t.name !== s.batch?.tenant) {
        ctx.addIssue({
          code: 'custom',
          path: ['tenants', i, 'arrival'],
          message: 'is required (only the tenant of the batch: section may go without)',
        });
      }
    });
    if (s.batch && !names.has(s.batch.tenant)) {
      ctx.addIssue({
        code: 'custom',
        path: ['batch', 'tenant'],
        message: `unknown tenant '${s.batch.tenant}' (tenants: ${[...names.keys()].join(', ')})`,
      });
    }
    if (s.batch && s.kind === 'sweep') {
      ctx.addIssue({ code: 'custom', path: ['batch'], message: 'is not supported in a sweep' });
    }
    if (s.compare && s.kind === 'sweep') {
      ctx.addIssue({ code: 'custom', path: ['compare'], message: 'is not supported in a sweep' });
    }
    s.compare?.forEach((run, i) => {
      if (s.compare!.findIndex((r) => r.label === run.label) < i) {
        ctx.addIssue({
          code: 'custom',
          path: ['compare', i, 'label'],
          message: `duplicate label '${run.label}'`,
        });
      }
    });
  });
export type Scenario = z.infer<typeof scenarioSchema>;

export class ScenarioError extends Error {
  constructor(
    readonly source: string,
    readonly problems: string[],
  ) {
    super(`${source}: invalid scenario\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'ScenarioError';
  }
}

/** `tenants[1].arrival.rate` from a zod path. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out || '(root)';
}

/** One line per problem: `path: message` (unknown keys name the key itself). */
export function formatIssues(error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => `${formatPath([...issue.path, key])}: unknown key`).join('\n');
    }
    return `${formatPath(issue.path)}: ${issue.message}`;
  });
}

/** Validates a plain object (already parsed from YAML) as a scenario. */
export function parseScenario(value: unknown, source = 'scenario'): Scenario {
  const result = scenarioSchema.safeParse(value);
  if (!result.success) throw new ScenarioError(source, formatIssues(result.error));
  return result.data;
}

/** Parses YAML text as a scenario; YAML syntax errors name the line. */
export function parseScenarioYaml(text: string, source = 'scenario'): Scenario {
  const doc = parseDocument(text, { prettyErrors: true });
  if (doc.errors.length > 0) {
    throw new ScenarioError(
      source,
      doc.errors.map((e) => `YAML: ${e.message.split('\n')[0]}`),
    );
  }
  return parseScenario(doc.toJS(), source);
}

export function builtInNames(): string[] {
  return [...BUILT_IN_NAMES];
}

/** A built-in by name (examples/scenarios/<name>.yaml), or a YAML file by path. */
export function loadScenario(nameOrPath: string): Scenario {
  const builtIn = builtInPath(nameOrPath);
  if (builtIn) return parseScenarioYaml(readFileSync(builtIn, 'utf8'), `built-in ${nameOrPath}`);
  if (!existsSync(nameOrPath)) {
    throw new ScenarioError(nameOrPath, [
      `no such file, and not a built-in scenario (built-ins: ${builtInNames().join(', ')})`,
    ]);
  }
  return parseScenarioYaml(readFileSync(nameOrPath, 'utf8'), nameOrPath);
}

/** Seconds of an instant within a run of `duration` seconds. */
export function resolveInstant(value: Instant, duration: number): number {
  if (typeof value === 'number') return value;
  return (Number.parseFloat(value) / 100) * duration;
}

export function tenantApiKey(tenant: TenantSpec): string {
  return tenant.api_key ?? DEV_KEYS[tenant.key_ref ?? ''] ?? '';
}

/** The report's target: explicit, else the controller's. */
export function reportTarget(scenario: Scenario): number | undefined {
  if (scenario.target_p99_ttft_s !== undefined) return scenario.target_p99_ttft_s;
  const t = scenario.gateway.controller?.target_p99_ttft_s;
  return typeof t === 'number' ? t : undefined;
}

/** The gateway's scheduler.token_weights for the scenario (the default: input 1, output 2). */
export function tokenWeightsOf(scenario: Scenario): TokenWeights {
  const w = (scenario.gateway.scheduler?.token_weights ?? {}) as Partial<TokenWeights>;
  return { ...DEFAULT_TOKEN_WEIGHTS, ...w };
}

/**
 * The scenario with `gateway` merged over its gateway sections (a compare run): objects key
 * by key, anything else (a number, a list) replaced.
 */
export function withGateway(scenario: Scenario, gateway: GatewayOverrides): Scenario {
  return { ...scenario, gateway: mergeObjects(scenario.gateway, gateway) as GatewayOverrides };
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

function mergeObjects(
  base: Record<string, unknown>,
  over: Record<string, unknown>,
): Record<string, unknown> {
  const out = { ...base };
  for (const [key, value] of Object.entries(over)) {
    const prev = out[key];
    out[key] = isObject(prev) && isObject(value) ? mergeObjects(prev, value) : value;
  }
  return out;
}
