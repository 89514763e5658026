import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRng } from '@fairgate/runtime';
import {
  type AppHandle,
  type DnsServerHandle,
  findRedisServer,
  freePort,
  type RedisHandle,
  sha256Hex,
  startDnsServer,
  startGatewayProcess,
  startRedis,
  startSim,
} from '@fairgate/testkit';
import { stringify } from 'yaml';
import { drawLength } from './arrivals.js';
import { createAgent, sendRequest } from './client.js';
import { LocalScaler, podHost } from './scaler.js';
import { DEV_ADMIN_TOKEN, type Scenario, type StackSpec, tenantApiKey } from './scenario.js';

/**
 * A stack on this machine for a run: a private redis-server when one is installed (else the
 * embedded scheduler and a single replica), simulated pods and gateway replicas, all child
 * processes on free 127.0.0.1 ports registered with testkit (stopAll() ends them; they also
 * exit by themselves if this process dies).
 */
export const SIM_MODEL = 'sim-model';

export interface Infra {
  redis: RedisHandle | undefined;
  sims: AppHandle[];
  /** True when no redis-server was found: LocalScheduler, one replica. */
  embedded: boolean;
  spec: StackSpec;
  /** stack.autoscale: the DNS server the gateways discover the pods with, and their port. */
  discovery?: { dns: DnsServerHandle; name: string; port: number };
  stop(): Promise<void>;
}

/** The DNS name an autoscale stack's pods are listed under. */
export const PODS_DNS_NAME = 'pods.fairgate.test';

export type Log = (line: string) => void;

export async function startInfra(spec: StackSpec, log: Log): Promise<Infra> {
  let redis: RedisHandle | undefined;
  if (findRedisServer() || process.env.REDIS_URL) {
    redis = await startRedis();
    log(`redis:    ${redis.url} (${redis.source})`);
  } else {
    log('redis:    redis-server is not installed: ONE gateway replica on the embedded scheduler');
  }
  const sim = spec.sim;
  const simArgs = simFlags(spec);
  let discovery: Infra['discovery'];
  if (spec.autoscale) {
    // One address per pod on one port, listed under one DNS name, as behind a Service.
    const [dns, port] = await Promise.all([startDnsServer(), freePort()]);
    discovery = { dns, name: PODS_DNS_NAME, port };
  }
  const sims = await Promise.all(
    Array.from({ length: spec.pods }, (_, i) =>
      discovery
        ? startSim({ host: podHost(i), port: discovery.port, args: simArgs })
        : startSim({ args: { ...simArgs, seed: i + 1 } }),
    ),
  );
  if (discovery) {
    await discovery.dns.setRecords(
      discovery.name,
      sims.map((_, i) => podHost(i)),
    );
    log(`dns:      ${discovery.name} on ${discovery.dns.server} (dnsmasq)`);
  }
  log(
    `pods:     ${sims.map((s) => s.url).join(', ')} (sim: alpha ${sim.alpha_ms} ms, beta ${sim.beta_ms} ms, gamma ${sim.gamma_ms} ms, max ${sim.max_num_seqs} seqs)`,
  );
  return {
    redis,
    sims,
    embedded: redis === undefined,
    spec,
    ...(discovery ? { discovery } : {}),
    async stop() {
      await Promise.all(sims.map((s) => s.stop()));
      await redis?.stop();
      await discovery?.dns.stop();
    },
  };
}

/** The fairgate-sim flags of the stack's pods. */
export function simFlags(spec: StackSpec) {
  const sim = spec.sim;
  return {
    'alpha-ms': sim.alpha_ms,
    'beta-ms': sim.beta_ms,
    'gamma-ms': sim.gamma_ms,
    'max-num-seqs': sim.max_num_seqs,
    'kv-blocks': sim.kv_blocks,
    'max-waiting': sim.max_waiting,
    model: SIM_MODEL,
  };
}

/**
 * The autoscale stack's scaler for gateways at `gatewayUrl`: it takes over the pods the
 * infra started (it stops the ones it removes; infra.stop() and stopAll() end the rest).
 */
export function createScaler(infra: Infra, gatewayUrl: string, log: Log): LocalScaler | undefined {
  const auto = infra.spec.autoscale;
  const discovery = infra.discovery;
  if (!auto || !discovery) return undefined;
  return new LocalScaler(
    {
      gatewayUrl,
      adminToken: DEV_ADMIN_TOKEN,
      dns: discovery.dns,
      name: discovery.name,
      port: discovery.port,
      simArgs: simFlags(infra.spec),
      minPods: auto.min_pods,
      maxPods: auto.max_pods,
      pollMs: auto.poll_ms,
      drainS: auto.drain_s,
      log,
    },
    infra.sims.map((sim, i) => ({ host: podHost(i), sim })),
  );
}

/** Which configuration of the gateway a run uses. */
export type Variant =
  | { kind: 'fairgate' }
  | { kind: 'fifo'; budget?: number }
  | { kind: 'sweep'; capPerWorker: number; controller: boolean };

let pools = 0;

/** The gateway config (as an object) for a scenario on this infra. */
export function gatewayConfig(
  scenario: Scenario,
  infra: Infra,
  variant: Variant,
): Record<string, unknown> {
  const o = scenario.gateway;
  const pods = infra.sims.map((sim, i) => ({
    name: `pod-${i}`,
    url: sim.url,
    cap: infra.spec.pod_cap,
  }));
  const scheduler: Record<string, unknown> = {
    budget: infra.spec.pods * infra.spec.pod_cap,
    heartbeat_ms: 500,
    ...o.scheduler,
  };
  let controller: Record<string, unknown> | undefined = o.controller
    ? { ...o.controller }
    : undefined;
  let admission = o.admission;
  let saturation = o.saturation;
  if (variant.kind === 'fifo') {
    // The baseline of a plain gateway: one FIFO across bands and tenants, a static budget,
    // no controller, no admission policy, no saturation gate, no shedding or eviction.
    scheduler.dispatch_order = 'fifo';
    scheduler.budget = variant.budget ?? scenario.baseline.budget ?? scheduler.budget;
    delete scheduler.queue_shedding;
    delete scheduler.inflight_eviction;
    controller = { enabled: false };
    admission = undefined;
    saturation = undefined;
  } else if (variant.kind === 'sweep') {
    const cap = variant.capPerWorker;
    scheduler.budget = cap * infra.spec.pods;
    if (variant.controller) {
      const min = Math.min(Number(controller?.cap_per_worker_min ?? 4), cap);
      const max = Math.max(Number(controller?.cap_per_worker_max ?? 256), cap);
      controller = {
        ...controller,
        enabled: true,
        cap_per_worker: cap,
        cap_per_worker_min: min,
        cap_per_worker_max: max,
      };
    } else controller = { enabled: false };
  }
  return {
    pool: `load${process.pid}x${++pools}`,
    listen: { host: '127.0.0.1', port: 0 },
    redis: infra.redis ? { url: infra.redis.url } : null,
    admin: { token_sha256: sha256Hex(DEV_ADMIN_TOKEN) },
    ...(o.slo_classes ? { slo_classes: o.slo_classes } : {}),
    tenants: scenario.tenants.map((t) => ({
      id: t.name,
      api_key_sha256: [sha256Hex(tenantApiKey(t))],
      weight: t.weight,
      default_class: t.slo_class,
      ...(t.max_class ? { max_class: t.max_class } : {}),
      ...(t.queue_max !== undefined ? { queue_max: t.queue_max } : {}),
      ...(t.quotas ? { quotas: t.quotas } : {}),
      ...(t.token_bucket ? { token_bucket: t.token_bucket } : {}),
      ...(t.batch_class ? { batch_class: t.batch_class } : {}),
    })),
    ...(infra.discovery
      ? {
          discovery: {
            dns: {
              name: infra.discovery.name,
              port: infra.discovery.port,
              servers: [infra.discovery.dns.server],
            },
            refresh_ms: infra.spec.autoscale?.refresh_ms,
            cap: infra.spec.pod_cap,
          },
        }
      : { pods }),
    scheduler,
    upstream: { health_interval_ms: 500, ...o.upstream },
    ...(controller ? { controller } : {}),
    ...(admission ? { admission } : {}),
    ...(saturation ? { saturation } : {}),
    ...(o.leader ? { leader: o.leader } : {}),
    ...(o.limits ? { limits: o.limits } : {}),
    ...(o.routing ? { routing: o.routing } : {}),
    ...(o.batch ? { batch: o.batch } : {}),
    ...(o.scrape ? { scrape: o.scrape } : {}),
    ...(o.tuner ? { tuner: o.tuner } : {}),
  };
}

export interface Gateways {
  handles: AppHandle[];
  urls: string[];
  configPath: string;
  config: Record<string, unknown>;
  stop(): Promise<void>;
}

export async function startGateways(
  scenario: Scenario,
  infra: Infra,
  variant: Variant,
  log: Log,
  label = 'gw',
): Promise<Gateways> {
  const config = gatewayConfig(scenario, infra, variant);
  const dir = mkdtempSync(join(tmpdir(), 'fairgate-load-'));
  const configPath = join(dir, 'gateway.yaml');
  writeFileSync(configPath, stringify(config));
  const replicas = infra.embedded ? 1 : infra.spec.replicas;
  const handles: AppHandle[] = [];
  try {
    for (let n = 1; n <= replicas; n++) {
      handles.push(await startGatewayProcess({ config: configPath, replicaId: `${label}-${n}` }));
    }
  } catch (error) {
    await Promise.all(handles.map((h) => h.stop()));
    throw error;
  }
  log(`gateways: ${handles.map((g) => g.url).join(', ')} (${label}; config ${configPath})`);
  return {
    handles,
    urls: handles.map((h) => h.url),
    configPath,
    config,
    async stop() {
      await Promise.all(handles.map((h) => h.stop()));
    },
  };
}

/**
 * The pods' modeled capacity in output tokens per second: every pod kept full with
 * N = min(pod_cap, max_num_seqs) requests of the schedule's mean lengths (docs/sim.md; the
 * formula of loadtest/bench/sim-capacity.ts): a seat's cycle is o iterations, each
 * iteration alpha plus the batch's work, a request's work W = (beta+gamma) i +
 * sum_{k=1}^{o-1} (beta + gamma (i + k)); tokens/s = pods x N o / (o alpha + N W).
 */
export function modelCapacity(spec: StackSpec, meanPrompt: number, meanOutput: number): number {
  const { alpha_ms: alpha, beta_ms: beta, gamma_ms: gamma } = spec.sim;
  const n = Math.min(spec.pod_cap, spec.sim.max_num_seqs);
  const i = meanPrompt;
  const o = Math.max(1, meanOutput);
  const work = (beta + gamma) * i + (o - 1) * beta + gamma * ((o - 1) * i + (o * (o - 1)) / 2);
  const cycleMs = o * alpha + n * work;
  return cycleMs > 0 ? (spec.pods * n * o * 1_000) / cycleMs : Number.POSITIVE_INFINITY;
}

/**
 * The pods' measured capacity: output tokens per second when each pod is kept full at
 * min(pod_cap, max_num_seqs) requests, measured directly against the pods (no gateway) with
 * the scenario's length mix, over `seconds` after a 1 s warm-up.
 */
export async function probeCapacity(
  scenario: Scenario,
  infra: Infra,
  seconds: number,
): Promise<number> {
  const perPod = Math.min(infra.spec.pod_cap, infra.spec.sim.max_num_seqs, 512);
  const rng = createRng(scenario.seed, 'capacity');
  const agent = createAgent(perPod * infra.sims.length + 8);
  const abort = new AbortController();
  const t0 = performance.now();
  const clock = () => performance.now() - t0;
  // Staggered starts and a 3 s warm-up: clients that all start together finish together,
  // and a window with fewer prefills than the steady state would overstate the capacity.
  const fromMs = 3_000;
  const toMs = fromMs + seconds * 1_000;
  let tokens = 0;
  let seq = 0;
  const worker = async (url: string, index: number) => {
    await new Promise((r) => setTimeout(r, (index / perPod) * 2_000));
    while (clock() < toMs && !abort.signal.aborted) {
      const tenant = scenario.tenants[Math.floor(rng.next() * scenario.tenants.length)]!;
      const record = await sendRequest(
        {
          tenant: 0,
          seq: seq++,
          target: 0,
          url,
          apiKey: 'probe',
          model: SIM_MODEL,
          stream: true,
          promptTokens: drawLength(tenant.prompt_tokens, rng),
          outputTokens: drawLength(tenant.output_tokens, rng),
          scheduledS: 0,
        },
        { dispatcher: agent, signal: abort.signal, timeoutMs: 30_000, clock },
      );
      if (record.outcome !== 'ok' || record.outputTokens === 0) continue;
      // Tokens spread from the first token to the end; count the part inside the window.
      const from = record.startS * 1_000 + (record.ttftMs ?? 0);
      const to = record.endS * 1_000;
      const overlap = Math.min(to, toMs) - Math.max(from, fromMs);
      if (to <= from) tokens += from >= fromMs && from < toMs ? record.outputTokens : 0;
      else if (overlap > 0) tokens += (record.outputTokens * overlap) / (to - from);
    }
  };
  const stopAt = setTimeout(() => abort.abort(), toMs + 30_000);
  await Promise.all(
    infra.sims.flatMap((sim) => Array.from({ length: perPod }, (_, i) => worker(sim.url, i))),
  );
  clearTimeout(stopAt);
  await agent.close().catch(() => {});
  return tokens / seconds;
}
