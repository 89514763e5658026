import { setTimeout as sleep } from 'node:timers/promises';
import { isFlowControlDrop, type TokenWeights } from '@fairgate/core';
import type { Agent } from 'undici';
import {
  AdminPoller,
  type AdminSample,
  fetchUsage,
  type SeenAction,
  type UsageRow,
} from './admin.js';
import { type Arrival, buildSchedule } from './arrivals.js';
import { BatchDriver, type BatchResult } from './batch.js';
import { createAgent, type RequestPlan, type RequestRecord, sendRequest } from './client.js';
import { conversationMessages } from './conversations.js';
import { pause } from './pause.js';
import type { ScalerSample } from './scaler.js';
import { reportTarget, type Scenario, tenantApiKey, tokenWeightsOf } from './scenario.js';

/**
 * One run of a scenario against running gateways: the seeded schedule is replayed in real
 * time (open loop: arrivals do not wait for earlier responses), each arrival one streaming
 * request. Bounded: at most limits.max_outstanding open at once (more are recorded as
 * client_overflow, never queued in the client), no arrival after duration_s, and a global
 * deadline duration_s + drain_s after which every open request is aborted.
 */
export interface TenantLive {
  name: string;
  offered: number;
  admitted: number;
  dropped: number;
  errors: number;
  completed: number;
  /** [end second, TTFT ms] of completed requests (for rolling percentiles). */
  ttft: Array<[number, number]>;
}

export interface RunProgress {
  elapsedS: number;
  durationS: number;
  outstanding: number;
  tenants: TenantLive[];
  admin: AdminPoller;
  phase: 'running' | 'draining' | 'done';
  /** The scenario's batch as seen so far (updated by every poll). */
  batch?: BatchResult;
}

export interface RunOptions {
  scenario: Scenario;
  targets: string[];
  adminToken: string;
  model: string;
  label: string;
  /** Seconds of arrivals (default scenario.duration_s). */
  durationS?: number;
  /** External stop (Ctrl-C): aborts everything at once. */
  signal?: AbortSignal;
  /** Called every second while running (the live table). */
  onTick?: (progress: RunProgress) => void;
  capacityTokensPerS?: number;
  /** Extra facts recorded in the result (stack, gateway config). */
  meta?: Record<string, unknown>;
}

export interface RunResult {
  label: string;
  scenario: string;
  startedAt: string;
  durationS: number;
  seed: number;
  targets: string[];
  tenants: Array<{ name: string; sloClass: string; weight: number }>;
  targetP99TtftS?: number;
  capacityTokensPerS?: number;
  /** What the report weighs input and output tokens with (the gateway's scheduler.token_weights). */
  tokenWeights?: TokenWeights;
  requests: RequestRecord[];
  admin: AdminSample[];
  actions: SeenAction[];
  stoppedEarly: boolean;
  /** The scenario's batch: submission, every poll, the output check. */
  batch?: BatchResult;
  /** stack.autoscale: the scaler's reads of desired_pods and the pods it listed. */
  scaler?: ScalerSample[];
  /** The gateway's metered usage per tenant and model (GET /admin/usage) after the run. */
  usage?: UsageRow[];
  meta: Record<string, unknown>;
}

export async function runScenario(options: RunOptions): Promise<RunResult> {
  const { scenario, targets } = options;
  if (targets.length === 0) throw new Error('no target gateway');
  const durationS = options.durationS ?? scenario.duration_s;
  const schedule = buildSchedule(scenario, durationS);
  const startedAt = new Date().toISOString();
  const t0 = performance.now();
  const wallAtZeroMs = Date.now();
  const clock = () => performance.now() - t0;
  const agent = createAgent(Math.max(64, scenario.limits.max_outstanding));
  const abort = new AbortController();
  const onExternal = () => abort.abort();
  options.signal?.addEventListener('abort', onExternal, { once: true });
  const admin = new AdminPoller(targets, options.adminToken, clock);
  admin.start(1_000);
  const run: Run = {
    options,
    clock,
    agent,
    abort,
    tenants: scenario.tenants.map((t) => ({
      name: t.name,
      offered: 0,
      admitted: 0,
      dropped: 0,
      errors: 0,
      completed: 0,
      ttft: [],
    })),
    records: [],
    open: new Set(),
    counters: new Array<number>(scenario.tenants.length).fill(0),
  };
  let phase: RunProgress['phase'] = 'running';

  // The batch runs beside the arrivals (it waits for its at_s itself) and is bounded by
  // duration + batch.drain_s; only the external stop ends it earlier.
  const batch = scenario.batch
    ? new BatchDriver({
        scenario,
        targets,
        model: options.model,
        clock,
        wallAtZeroMs,
        durationS,
        ...(options.signal ? { signal: options.signal } : {}),
        dispatcher: agent,
      })
    : undefined;
  const batchTask = batch?.run();
  const progress = (): RunProgress => ({
    elapsedS: clock() / 1_000,
    durationS,
    outstanding: run.open.size,
    tenants: run.tenants,
    admin,
    phase,
    ...(batch ? { batch: batch.result } : {}),
  });
  const ticker = setInterval(() => options.onTick?.(progress()), 1_000);

  await replaySchedule(run, schedule);
  // Arrivals are over: wait out the rest of the duration, then drain, then abort.
  const untilEnd = durationS * 1_000 - clock();
  if (untilEnd > 0 && !abort.signal.aborted) await pause(untilEnd, abort.signal);
  phase = 'draining';
  // The batch ends by itself, at its deadline (cancelled) or at the external stop.
  const [, batchResult] = await Promise.all([drainRequests(run), batchTask]);
  const stoppedEarly = options.signal?.aborted ?? false;
  phase = 'done';
  clearInterval(ticker);
  await admin.stop();
  options.signal?.removeEventListener('abort', onExternal);
  await agent.close().catch(() => {});
  run.records.sort((a, b) => a.startS - b.startS);
  // The gateway's own count of the run's tokens, per tenant (after its last flush).
  await new Promise((r) => setTimeout(r, 300));
  const usage = await fetchUsage(targets[0] as string, options.adminToken, wallAtZeroMs);
  const result = runResult(run, { startedAt, durationS, admin, stoppedEarly, batchResult });
  return usage ? { ...result, usage } : result;
}

/** One run's shared state: what every launched request reads and writes. */
interface Run {
  options: RunOptions;
  clock: () => number;
  agent: Agent;
  abort: AbortController;
  tenants: TenantLive[];
  records: RequestRecord[];
  /** The requests in flight. */
  open: Set<Promise<void>>;
  /** Requests sent per tenant: the round-robin over targets. */
  counters: number[];
}

/** Launches each arrival at its time (open loop) until the schedule ends or the run aborts. */
async function replaySchedule(run: Run, schedule: Arrival[]): Promise<void> {
  const { clock, abort } = run;
  let next = 0;
  while (next < schedule.length && !abort.signal.aborted) {
    const now = clock() / 1_000;
    while (next < schedule.length && schedule[next]!.t <= now) launch(run, schedule[next++]!);
    if (next >= schedule.length) break;
    const wait = Math.min(50, Math.max(0, (schedule[next]!.t - clock() / 1_000) * 1_000));
    await sleep(wait);
  }
}

/** Waits up to drain_s for the open requests, then aborts what is left. */
async function drainRequests(run: Run): Promise<void> {
  const { open, abort } = run;
  if (open.size > 0 && !abort.signal.aborted) {
    const drained = Promise.all(open).then(() => true);
    await Promise.race([drained, pause(run.options.scenario.limits.drain_s * 1_000, abort.signal)]);
  }
  abort.abort();
  await Promise.all(open);
}

/** Sends one arrival's request, or records a client overflow when the bound is reached. */
function launch(run: Run, arrival: Arrival): void {
  const { scenario, targets } = run.options;
  const limits = scenario.limits;
  const spec = scenario.tenants[arrival.tenant]!;
  const live = run.tenants[arrival.tenant]!;
  const { open } = run;
  live.offered++;
  const target =
    spec.via_replica !== undefined
      ? Math.min(spec.via_replica, targets.length - 1)
      : run.counters[arrival.tenant]!++ % targets.length;
  if (open.size >= limits.max_outstanding) {
    live.errors++;
    run.records.push(overflowRecord(arrival, target, run.clock() / 1_000, limits.max_outstanding));
    return;
  }
  const task = sendRequest(requestPlan(run.options, arrival, target), {
    dispatcher: run.agent,
    signal: run.abort.signal,
    timeoutMs: limits.request_timeout_s * 1_000,
    clock: run.clock,
    onStatus: (status, dropReason) => {
      if (status === 200) live.admitted++;
      else if (isFlowControlDrop(dropReason)) live.dropped++;
    },
  }).then((record) => {
    run.records.push(record);
    if (record.outcome === 'ok') {
      live.completed++;
      if (record.ttftMs !== undefined) live.ttft.push([record.endS, record.ttftMs]);
    } else if (record.outcome === 'error' || record.outcome === 'aborted') live.errors++;
    open.delete(task);
  });
  open.add(task);
}

/** The request of one arrival, sent to `targets[target]`. */
function requestPlan(options: RunOptions, arrival: Arrival, target: number): RequestPlan {
  const spec = options.scenario.tenants[arrival.tenant]!;
  return {
    tenant: arrival.tenant,
    seq: arrival.seq,
    target,
    url: options.targets[target]!,
    apiKey: tenantApiKey(spec),
    model: options.model,
    run: options.label,
    ...(spec.class_header ? { sloClass: spec.slo_class } : {}),
    ...(spec.slo_ttft_ms !== undefined ? { sloTtftMs: spec.slo_ttft_ms } : {}),
    stream: spec.stream,
    promptTokens: arrival.promptTokens,
    outputTokens: arrival.outputTokens,
    scheduledS: arrival.t,
    ...(arrival.conversation && spec.shared_prefix
      ? {
          messages: conversationMessages(
            { ...spec, shared_prefix: spec.shared_prefix },
            arrival.conversation,
            arrival.promptTokens,
          ),
        }
      : {}),
  };
}

/** An arrival not sent: `maxOutstanding` requests were already open. */
function overflowRecord(
  arrival: Arrival,
  target: number,
  nowS: number,
  maxOutstanding: number,
): RequestRecord {
  return {
    tenant: arrival.tenant,
    seq: arrival.seq,
    target,
    scheduledS: arrival.t,
    startS: nowS,
    endS: nowS,
    status: 0,
    outcome: 'overflow',
    e2eMs: 0,
    promptTokens: arrival.promptTokens,
    outputTokens: 0,
    maxTokens: arrival.outputTokens,
    error: `client bound: ${maxOutstanding} requests already open`,
  };
}

function runResult(
  run: Run,
  end: {
    startedAt: string;
    durationS: number;
    admin: AdminPoller;
    stoppedEarly: boolean;
    batchResult: BatchResult | undefined;
  },
): RunResult {
  const { options } = run;
  const { scenario } = options;
  const target = reportTarget(scenario);
  return {
    label: options.label,
    scenario: scenario.name,
    startedAt: end.startedAt,
    durationS: end.durationS,
    seed: scenario.seed,
    targets: options.targets,
    tenants: scenario.tenants.map((t) => ({
      name: t.name,
      sloClass: t.slo_class,
      weight: t.weight,
    })),
    ...(target !== undefined ? { targetP99TtftS: target } : {}),
    ...(options.capacityTokensPerS !== undefined
      ? { capacityTokensPerS: options.capacityTokensPerS }
      : {}),
    tokenWeights: tokenWeightsOf(scenario),
    requests: run.records,
    admin: end.admin.samples,
    actions: end.admin.orderedActions(),
    stoppedEarly: end.stoppedEarly,
    ...(end.batchResult ? { batch: end.batchResult } : {}),
    meta: options.meta ?? {},
  };
}
