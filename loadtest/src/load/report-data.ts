import { DEFAULT_TOKEN_WEIGHTS, type TokenWeights } from '@fairgate/core';
import type { AdminSample, UsageRow } from './admin.js';
import type { OutputCheck } from './batch.js';
import type { RequestRecord } from './client.js';
import type { RunResult } from './runner.js';
import { mean, pct, percentileSorted } from './stats.js';

/**
 * What the report shows, computed from a run's records (pure: no I/O, no clock), so the
 * numbers are testable without looking at pixels.
 */
export interface TenantSummary {
  name: string;
  sloClass: string;
  weight: number;
  offered: number;
  /** Answered 200 (the gateway granted it a slot). */
  admitted: number;
  /** Streamed to the end. */
  completed: number;
  /** 429 flow-control drops. */
  dropped: number;
  dropPct: number;
  dropReasons: Record<string, number>;
  /** Other statuses, broken streams, network errors. */
  errors: number;
  /** Still open at the deadline. */
  aborted: number;
  /** Not sent: the client's own bound on open requests. */
  overflow: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  e2eP50Ms: number;
  e2eP99Ms: number;
  itlP50Ms: number;
  itlP99Ms: number;
  queueP99Ms: number;
  outputTokens: number;
  tokensPerS: number;
}

export interface RunSummary {
  label: string;
  scenario: string;
  fromS: number;
  toS: number;
  tenants: TenantSummary[];
  total: TenantSummary;
  /** Output tokens per second generated inside [fromS, toS). */
  tokensPerS: number;
  completedPerS: number;
  targetP99TtftS?: number;
  capacityTokensPerS?: number;
  /** tokensPerS as a percentage of the capacity. */
  capacityPct?: number;
  actions: { increase: number; decrease: number; hold: number };
  budget?: { min: number; max: number; last: number };
  lastCapPerWorker?: number;
  /** The scenario's batch (the `batch:` section), when it had one. */
  batch?: BatchSummary;
  /** The gateway's metered tokens per tenant (GET /admin/usage), when it answered. */
  usage?: UsageRow[];
  /** Weighted tokens served per tenant inside the window. */
  service: ServiceSummary;
}

/**
 * Service in weighted tokens (what `fairness_unit: tokens` shares by weight): input x
 * weights.input + output x weights.output of every answered request, from its usage; the
 * input counts at its first token (the prefill), the output as it streams.
 */
export interface ServiceSummary {
  weights: TokenWeights;
  tenants: Array<{
    name: string;
    weight: number;
    weightedTokens: number;
    /** Of all tenants' weighted tokens in the window. */
    sharePct: number;
    /** Its weight over the sum of the weights: its share when service follows weight. */
    fairSharePct: number;
  }>;
  weightedTokensPerS: number;
  /** The first two tenants' weighted tokens per unit of weight, the first's over the second's (1 = shares by weight). */
  ratio?: { names: [string, string]; value: number };
}

interface Window {
  fromS: number;
  toS: number;
}

const sorted = (values: number[]) => values.sort((a, b) => a - b);

/** Output tokens of a completed request spread evenly from its first token to its end. */
function tokenSpan(r: RequestRecord): { from: number; to: number; tokens: number } | undefined {
  if (r.outcome !== 'ok' || r.outputTokens <= 0) return undefined;
  const from = r.startS + (r.ttftMs ?? r.e2eMs) / 1_000;
  return { from, to: Math.max(from, r.endS), tokens: r.outputTokens };
}

/** Tokens of the record that fall inside [a, b). */
function tokensIn(r: RequestRecord, a: number, b: number): number {
  const span = tokenSpan(r);
  if (!span) return 0;
  if (span.to <= span.from) return span.from >= a && span.from < b ? span.tokens : 0;
  const overlap = Math.min(b, span.to) - Math.max(a, span.from);
  return overlap > 0 ? (span.tokens * overlap) / (span.to - span.from) : 0;
}

/** Weighted tokens of the record inside [a, b): its input at its first token, its output as it streams. */
function weightedIn(r: RequestRecord, a: number, b: number, w: TokenWeights): number {
  const span = tokenSpan(r);
  if (!span) return 0;
  const input = span.from >= a && span.from < b ? (r.inputTokens ?? r.promptTokens) : 0;
  return input * w.input + tokensIn(r, a, b) * w.output;
}

/** Each tenant's weighted tokens inside the window, its share, and the first two's ratio. */
export function summarizeService(
  result: RunResult,
  window: Window = defaultWindow(result),
): ServiceSummary {
  const weights = result.tokenWeights ?? DEFAULT_TOKEN_WEIGHTS;
  const served = result.tenants.map(() => 0);
  for (const r of result.requests)
    served[r.tenant]! += weightedIn(r, window.fromS, window.toS, weights);
  const total = served.reduce((x, y) => x + y, 0);
  const weightSum = result.tenants.reduce((x, t) => x + t.weight, 0);
  const tenants = result.tenants.map((t, i) => ({
    name: t.name,
    weight: t.weight,
    weightedTokens: Math.round(served[i]!),
    sharePct: pct(served[i]!, total),
    fairSharePct: pct(t.weight, weightSum),
  }));
  const seconds = window.toS - window.fromS;
  const [first, second] = tenants;
  return {
    weights,
    tenants,
    weightedTokensPerS: seconds > 0 ? total / seconds : 0,
    ...(first && second && second.weightedTokens > 0
      ? {
          ratio: {
            names: [first.name, second.name] as [string, string],
            value: first.weightedTokens / first.weight / (second.weightedTokens / second.weight),
          },
        }
      : {}),
  };
}

/** Each tenant's share of the weighted tokens served in every `bucketS` window of the run. */
export interface ServiceSeries {
  weights: TokenWeights;
  bucketS: number;
  /** Start of each window (s). */
  times: number[];
  tenants: Array<{ name: string; weightedTokens: number[]; sharePct: Array<number | null> }>;
  /** Each tenant's share when service follows weight (%). */
  fairSharePct: number[];
}

export function computeServiceSeries(result: RunResult, bucketS = 5): ServiceSeries {
  const weights = result.tokenWeights ?? DEFAULT_TOKEN_WEIGHTS;
  const n = Math.max(1, Math.ceil(result.durationS / bucketS));
  const times = Array.from({ length: n }, (_, i) => i * bucketS);
  const served = result.tenants.map(() => new Array<number>(n).fill(0));
  for (const r of result.requests) {
    const span = tokenSpan(r);
    if (!span) continue;
    const last = Math.min(n - 1, Math.floor(span.to / bucketS));
    for (let i = Math.floor(span.from / bucketS); i <= last; i++) {
      served[r.tenant]![i]! += weightedIn(r, i * bucketS, (i + 1) * bucketS, weights);
    }
  }
  const totals = times.map((_, i) => served.reduce((x, s) => x + s[i]!, 0));
  const weightSum = result.tenants.reduce((x, t) => x + t.weight, 0);
  return {
    weights,
    bucketS,
    times,
    tenants: result.tenants.map((t, k) => ({
      name: t.name,
      weightedTokens: served[k]!,
      sharePct: served[k]!.map((v, i) => (totals[i]! > 0 ? pct(v, totals[i]!) : null)),
    })),
    fairSharePct: result.tenants.map((t) => pct(t.weight, weightSum)),
  };
}

function summarizeRecords(
  name: string,
  sloClass: string,
  weight: number,
  records: RequestRecord[],
  all: RequestRecord[],
  w: Window,
): TenantSummary {
  const ok = records.filter((r) => r.outcome === 'ok');
  const dropReasons: Record<string, number> = {};
  for (const r of records) {
    if (r.outcome === 'dropped') {
      const reason = r.dropReason ?? 'unknown';
      dropReasons[reason] = (dropReasons[reason] ?? 0) + 1;
    }
  }
  const ttft = sorted(ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs])));
  const e2e = sorted(ok.map((r) => r.e2eMs));
  const itl = sorted(ok.flatMap((r) => (r.itlMs === undefined ? [] : [r.itlMs])));
  const queue = sorted(records.flatMap((r) => (r.queueMs === undefined ? [] : [r.queueMs])));
  const dropped = records.filter((r) => r.outcome === 'dropped').length;
  let tokens = 0;
  for (const r of all) tokens += tokensIn(r, w.fromS, w.toS);
  return {
    name,
    sloClass,
    weight,
    offered: records.length,
    admitted: records.filter((r) => r.status === 200).length,
    completed: ok.length,
    dropped,
    dropPct: pct(dropped, records.length),
    dropReasons,
    errors: records.filter((r) => r.outcome === 'error').length,
    aborted: records.filter((r) => r.outcome === 'aborted').length,
    overflow: records.filter((r) => r.outcome === 'overflow').length,
    ttftP50Ms: percentileSorted(ttft, 0.5),
    ttftP99Ms: percentileSorted(ttft, 0.99),
    e2eP50Ms: percentileSorted(e2e, 0.5),
    e2eP99Ms: percentileSorted(e2e, 0.99),
    itlP50Ms: percentileSorted(itl, 0.5),
    itlP99Ms: percentileSorted(itl, 0.99),
    queueP99Ms: percentileSorted(queue, 0.99),
    outputTokens: Math.round(tokens),
    tokensPerS: w.toS > w.fromS ? tokens / (w.toS - w.fromS) : 0,
  };
}

/** The default measurement window: the run after a short warm-up (min(5 s, 10%)). */
export function defaultWindow(result: RunResult): Window {
  return { fromS: Math.min(5, result.durationS * 0.1), toS: result.durationS };
}

/**
 * Per tenant and in total. Counts, drops and latencies cover the requests that started in
 * [fromS, toS); throughput counts the tokens generated inside the window, whoever sent them.
 */
export function summarize(result: RunResult, window: Window = defaultWindow(result)): RunSummary {
  const inWindow = result.requests.filter((r) => r.startS >= window.fromS && r.startS < window.toS);
  const tenants = result.tenants.map((t, index) =>
    summarizeRecords(
      t.name,
      t.sloClass,
      t.weight,
      inWindow.filter((r) => r.tenant === index),
      result.requests.filter((r) => r.tenant === index),
      window,
    ),
  );
  const total = summarizeRecords('all', '-', 0, inWindow, result.requests, window);
  const seconds = window.toS - window.fromS;
  const actions = { increase: 0, decrease: 0, hold: 0 };
  for (const a of result.actions) {
    if (a.kind === 'increase' || a.kind === 'decrease' || a.kind === 'hold') actions[a.kind]++;
  }
  const budgets = result.admin.filter((s) => s.t >= window.fromS && s.t < window.toS + 1.5);
  const lastCap = [...result.admin].reverse().find((s) => s.capPerWorker !== null)?.capPerWorker;
  const completedInWindow = result.requests.filter(
    (r) => r.outcome === 'ok' && r.endS >= window.fromS && r.endS < window.toS,
  ).length;
  return {
    label: result.label,
    scenario: result.scenario,
    fromS: window.fromS,
    toS: window.toS,
    tenants,
    total,
    tokensPerS: total.tokensPerS,
    completedPerS: seconds > 0 ? completedInWindow / seconds : 0,
    ...(result.targetP99TtftS !== undefined ? { targetP99TtftS: result.targetP99TtftS } : {}),
    ...(result.capacityTokensPerS !== undefined
      ? {
          capacityTokensPerS: result.capacityTokensPerS,
          capacityPct: pct(total.tokensPerS, result.capacityTokensPerS),
        }
      : {}),
    actions,
    ...(budgets.length > 0
      ? {
          budget: {
            min: Math.min(...budgets.map((s) => s.budget)),
            max: Math.max(...budgets.map((s) => s.budget)),
            last: budgets.at(-1)!.budget,
          },
        }
      : {}),
    ...(lastCap !== undefined && lastCap !== null ? { lastCapPerWorker: lastCap } : {}),
    ...(result.batch ? { batch: summarizeBatch(result, window) } : {}),
    ...(result.usage ? { usage: result.usage } : {}),
    service: summarizeService(result, window),
  };
}

export interface TenantSeries {
  name: string;
  /** Requests per second by the second they were sent. */
  submitted: number[];
  admitted: number[];
  dropped: number[];
  /** p99 TTFT (ms) of first tokens in the trailing window ending at each bucket; null if none. */
  p99TtftMs: Array<number | null>;
}

export interface ReportSeries {
  bucketS: number;
  /** Start of each bucket (s). */
  times: number[];
  tenants: TenantSeries[];
  /** Output tokens per second (spread over each stream's life). */
  tokensPerS: number[];
  /** Completed requests per second. */
  completedPerS: number[];
  budget: Array<[number, number]>;
  inflight: Array<[number, number]>;
  waiting: Array<[number, number]>;
  capPerWorker: Array<[number, number]>;
  actions: Array<{ t: number; tick: number; kind: string; capAfter: number; budget: number }>;
}

/** Time series of a run in buckets of `bucketS` seconds; p99 TTFT over a trailing window. */
export function computeSeries(result: RunResult, bucketS = 1, ttftWindowS = 5): ReportSeries {
  const lastEnd = result.requests.reduce((m, r) => Math.max(m, r.endS), 0);
  const span = Math.max(result.durationS, Math.min(lastEnd, result.durationS * 2));
  const n = Math.max(1, Math.ceil(span / bucketS));
  const times = Array.from({ length: n }, (_, i) => i * bucketS);
  const at = (s: number) => Math.min(n - 1, Math.max(0, Math.floor(s / bucketS)));
  const tenants: TenantSeries[] = result.tenants.map((t) => ({
    name: t.name,
    submitted: new Array(n).fill(0),
    admitted: new Array(n).fill(0),
    dropped: new Array(n).fill(0),
    p99TtftMs: new Array(n).fill(null),
  }));
  const firstTokens: Array<Array<[number, number]>> = result.tenants.map(() => []);
  const tokens = new Array<number>(n).fill(0);
  const completed = new Array<number>(n).fill(0);
  for (const r of result.requests) {
    const series = tenants[r.tenant];
    if (!series) continue;
    const b = at(r.startS);
    series.submitted[b]! += 1 / bucketS;
    if (r.status === 200) series.admitted[b]! += 1 / bucketS;
    if (r.outcome === 'dropped') series.dropped[b]! += 1 / bucketS;
    if (r.outcome === 'ok') {
      completed[at(r.endS)]! += 1 / bucketS;
      if (r.ttftMs !== undefined)
        firstTokens[r.tenant]!.push([r.startS + r.ttftMs / 1_000, r.ttftMs]);
      const span = tokenSpan(r);
      if (span) {
        for (let i = at(span.from); i <= at(span.to); i++) {
          tokens[i]! += tokensIn(r, i * bucketS, (i + 1) * bucketS) / bucketS;
        }
      }
    }
  }
  firstTokens.forEach((list, index) => {
    list.sort((a, b) => a[0] - b[0]);
    let lo = 0;
    let hi = 0;
    for (let i = 0; i < n; i++) {
      const end = (i + 1) * bucketS;
      while (hi < list.length && list[hi]![0] < end) hi++;
      while (lo < hi && list[lo]![0] < end - ttftWindowS) lo++;
      if (hi > lo) {
        const values = list.slice(lo, hi).map((e) => e[1]);
        tenants[index]!.p99TtftMs[i] = percentileSorted(sorted(values), 0.99);
      }
    }
  });
  return {
    bucketS,
    times,
    tenants,
    tokensPerS: tokens,
    completedPerS: completed,
    budget: result.admin.map((s) => [s.t, s.budget]),
    inflight: result.admin.map((s) => [s.t, s.inflight]),
    waiting: result.admin.map((s) => [s.t, s.waiting]),
    capPerWorker: result.admin.flatMap((s) =>
      s.capPerWorker === null ? [] : ([[s.t, s.capPerWorker]] as Array<[number, number]>),
    ),
    actions: result.actions.map((a) => ({
      t: a.t,
      tick: a.tick,
      kind: a.kind,
      capAfter: a.capAfter,
      budget: a.budget,
    })),
  };
}

/** One sweep point: a run with a starting cap, controller off or on, measured at its end. */
export interface SweepPoint {
  cap: number;
  controller: 'off' | 'on';
  summary: RunSummary;
  /** Cap per worker the run ended with (the static cap when off). */
  endCap: number;
}

export interface SweepAnalysis {
  caps: number[];
  off: Array<SweepPoint | undefined>;
  on: Array<SweepPoint | undefined>;
  best?: { cap: number; p99Ms: number; tokensPerS: number };
  /** Static p99 at the lowest and highest cap divided by the best static p99 (the U's arms). */
  uCurve?: { lowRatio: number; highRatio: number; isU: boolean };
  /** Per controller-on point: p99 relative to best static, throughput relative to best static. */
  verdicts: Array<{
    cap: number;
    p99Ms: number;
    p99Ratio: number;
    tokensPerS: number;
    throughputRatio: number;
    withinP99: boolean;
    noLessThroughput: boolean;
  }>;
}

/**
 * The sweep's finding: the best static cap (lowest p99 TTFT), the U (both ends worse than
 * the best by more than `uFactor`), and for each controller-on start whether it ends within
 * ±`tolerance` of the best static p99 at no less throughput (`throughputSlack` allowed for
 * noise, 0 = strictly no less).
 */
export function analyzeSweep(
  points: SweepPoint[],
  options: { tolerance?: number; uFactor?: number; throughputSlack?: number } = {},
): SweepAnalysis {
  const tolerance = options.tolerance ?? 0.2;
  const uFactor = options.uFactor ?? 1.2;
  const slack = options.throughputSlack ?? 0;
  const caps = [...new Set(points.map((p) => p.cap))].sort((a, b) => a - b);
  const off = caps.map((c) => points.find((p) => p.cap === c && p.controller === 'off'));
  const on = caps.map((c) => points.find((p) => p.cap === c && p.controller === 'on'));
  const analysis: SweepAnalysis = { caps, off, on, verdicts: [] };
  const statics = off.filter(
    (p): p is SweepPoint => p !== undefined && Number.isFinite(p.summary.total.ttftP99Ms),
  );
  if (statics.length === 0) return analysis;
  const bestPoint = statics.reduce((b, p) =>
    p.summary.total.ttftP99Ms < b.summary.total.ttftP99Ms ? p : b,
  );
  const best = {
    cap: bestPoint.cap,
    p99Ms: bestPoint.summary.total.ttftP99Ms,
    tokensPerS: bestPoint.summary.tokensPerS,
  };
  analysis.best = best;
  const first = statics[0]!;
  const last = statics.at(-1)!;
  const lowRatio = first.summary.total.ttftP99Ms / best.p99Ms;
  const highRatio = last.summary.total.ttftP99Ms / best.p99Ms;
  analysis.uCurve = {
    lowRatio,
    highRatio,
    isU: lowRatio >= uFactor && highRatio >= uFactor && first !== bestPoint && last !== bestPoint,
  };
  for (const p of on) {
    if (!p) continue;
    const p99Ms = p.summary.total.ttftP99Ms;
    const p99Ratio = p99Ms / best.p99Ms;
    const throughputRatio = best.tokensPerS > 0 ? p.summary.tokensPerS / best.tokensPerS : 1;
    analysis.verdicts.push({
      cap: p.cap,
      p99Ms,
      p99Ratio,
      tokensPerS: p.summary.tokensPerS,
      throughputRatio,
      withinP99: Math.abs(p99Ratio - 1) <= tolerance,
      noLessThroughput: throughputRatio >= 1 - slack,
    });
  }
  return analysis;
}

/** Interactive (live) requests that started in [fromS, toS): how many, and their TTFT. */
export interface TtftWindow {
  fromS: number;
  toS: number;
  requests: number;
  completed: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
}

export interface BatchSummary {
  tenant: string;
  id?: string;
  /** The last status seen (completed, ..., or not_submitted / submit_failed). */
  status: string;
  /** Lines in the input file, and the batch's request_counts at the last poll. */
  lines: number;
  total: number;
  completed: number;
  failed: number;
  /** Run seconds: submitted (the upload began), first seen in_progress, lines ended (finalizing or later), ended. */
  submittedS?: number;
  runningFromS?: number;
  linesEndedS?: number;
  endedS?: number;
  /** Submission to the end (a terminal status seen): what the client waited. */
  durationS?: number;
  /** in_progress to the lines' end: how long lines ran. */
  runningS?: number;
  /** Lines completed per second while it ran. */
  linesPerS?: number;
  /** Mean busy capacity (in flight / the pods' caps, %) while the lines ran, and before. */
  meanBusyPct?: number;
  meanBusyPctBefore?: number;
  /** The interactive (live) requests' share of it while the lines ran. */
  meanInteractiveBusyPct?: number;
  /** Live requests' TTFT before the batch was submitted (after the warm-up), while it ran, after. */
  interactive: { before?: TtftWindow; during?: TtftWindow; after?: TtftWindow };
  output?: OutputCheck;
  timedOut: boolean;
  cancelledByRunner: boolean;
  errors: string[];
}

/** The capacity a sample's in-flight count is measured against: the pods' caps, else the budget. */
function seatsOf(s: AdminSample): number {
  return s.podCap !== undefined && s.podCap > 0 ? s.podCap : s.budget;
}

/** In flight as a percentage of the pods' caps (busy capacity). */
export function busyPct(s: AdminSample): number {
  return pct(s.inflight, seatsOf(s));
}

/** The live tenants' share: in flight of every tenant but the batch's, in % of the caps. */
export function interactiveBusyPct(s: AdminSample, batchTenant: string | undefined): number {
  let inflight = 0;
  for (const [name, t] of Object.entries(s.tenants))
    if (name !== batchTenant) inflight += t.inflight;
  return pct(inflight, seatsOf(s));
}

function ttftWindow(records: RequestRecord[], fromS: number, toS: number): TtftWindow | undefined {
  if (!(toS > fromS)) return undefined;
  const started = records.filter((r) => r.startS >= fromS && r.startS < toS);
  const ok = started.filter((r) => r.outcome === 'ok');
  const ttft = sorted(ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs])));
  return {
    fromS,
    toS,
    requests: started.length,
    completed: ok.length,
    ttftP50Ms: percentileSorted(ttft, 0.5),
    ttftP99Ms: percentileSorted(ttft, 0.99),
  };
}

/**
 * The batch's numbers: counts, when it ran, how busy the pods were meanwhile, and the live
 * requests' TTFT before, during and after it. "Ran" is from the first poll that saw it
 * in_progress to the first that saw its lines ended (finalizing or a terminal status),
 * else to the end of the run.
 */
export function summarizeBatch(
  result: RunResult,
  window: Window = defaultWindow(result),
): BatchSummary | undefined {
  const b = result.batch;
  if (!b) return undefined;
  const runningFromS = b.statusSeenS.in_progress ?? b.statusSeenS.finalizing;
  const lastS = Math.max(result.durationS, ...result.admin.map((s) => s.t));
  const runUntil = b.linesEndedS ?? lastS;
  const during =
    runningFromS !== undefined
      ? result.admin.filter((s) => s.t >= runningFromS && s.t <= runUntil)
      : [];
  const before =
    b.submittedS !== undefined
      ? result.admin.filter((s) => s.t >= window.fromS && s.t < b.submittedS!)
      : [];
  const summary: BatchSummary = {
    tenant: b.tenant,
    ...(b.id ? { id: b.id } : {}),
    status: b.status,
    lines: b.lines,
    ...b.requestCounts,
    ...(b.submittedS !== undefined ? { submittedS: b.submittedS } : {}),
    ...(runningFromS !== undefined ? { runningFromS } : {}),
    ...(b.linesEndedS !== undefined ? { linesEndedS: b.linesEndedS } : {}),
    ...(b.endedS !== undefined ? { endedS: b.endedS } : {}),
    interactive: {},
    ...(b.output ? { output: b.output } : {}),
    timedOut: b.timedOut,
    cancelledByRunner: b.cancelledByRunner,
    errors: b.errors,
  };
  if (b.submittedS !== undefined && b.endedS !== undefined)
    summary.durationS = b.endedS - b.submittedS;
  if (runningFromS !== undefined && b.linesEndedS !== undefined) {
    summary.runningS = b.linesEndedS - runningFromS;
    if (summary.runningS > 0) summary.linesPerS = b.requestCounts.completed / summary.runningS;
  }
  if (during.length > 0) {
    summary.meanBusyPct = mean(during.map(busyPct));
    summary.meanInteractiveBusyPct = mean(during.map((s) => interactiveBusyPct(s, b.tenant)));
  }
  if (before.length > 0) summary.meanBusyPctBefore = mean(before.map(busyPct));
  const records = result.requests;
  if (b.submittedS !== undefined) {
    const w = ttftWindow(records, window.fromS, b.submittedS);
    if (w) summary.interactive.before = w;
  }
  if (runningFromS !== undefined) {
    const w = ttftWindow(records, runningFromS, Math.min(runUntil, result.durationS));
    if (w) summary.interactive.during = w;
  }
  if (b.linesEndedS !== undefined) {
    const w = ttftWindow(records, b.linesEndedS, result.durationS);
    if (w) summary.interactive.after = w;
  }
  return summary;
}

/** The "Batch backfill" panel's series, on one time axis. */
export interface BatchSeries {
  bucketS: number;
  times: number[];
  /** Live requests completed per second (by the second they ended). */
  interactiveCompletedPerS: number[];
  /** Batch lines completed (and failed) per second: the deltas of request_counts between polls. */
  batchCompletedPerS: number[];
  batchFailedPerS: number[];
  /** Per /admin/state sample: in flight over the pods' caps (%), and the live tenants' share. */
  busyPct: Array<[number, number]>;
  interactiveBusyPct: Array<[number, number]>;
  submittedS?: number;
  runningFromS?: number;
  linesEndedS?: number;
}

export function computeBatchSeries(result: RunResult, bucketS = 1): BatchSeries | undefined {
  const b = result.batch;
  if (!b) return undefined;
  const lastEnd = result.requests.reduce((m, r) => Math.max(m, r.endS), 0);
  const lastPoll = b.samples.at(-1)?.t ?? 0;
  const span = Math.max(
    result.durationS,
    Math.min(Math.max(lastEnd, lastPoll), result.durationS * 3),
  );
  const n = Math.max(1, Math.ceil(span / bucketS));
  const at = (s: number) => Math.min(n - 1, Math.max(0, Math.floor(s / bucketS)));
  const interactive = new Array<number>(n).fill(0);
  for (const r of result.requests) if (r.outcome === 'ok') interactive[at(r.endS)]! += 1 / bucketS;
  const completed = new Array<number>(n).fill(0);
  const failed = new Array<number>(n).fill(0);
  // A poll's delta happened somewhere since the previous poll: spread it evenly over that
  // interval (so a poll_ms that does not divide the bucket leaves no comb of zeros).
  const spread = (into: number[], delta: number, from: number, to: number) => {
    if (delta <= 0) return;
    if (!(to > from)) {
      into[at(to)]! += delta / bucketS;
      return;
    }
    for (let i = at(from); i <= at(to); i++) {
      const overlap = Math.min(to, (i + 1) * bucketS) - Math.max(from, i * bucketS);
      if (overlap > 0) into[i]! += (delta * overlap) / (to - from) / bucketS;
    }
  };
  let prev = { t: b.samples[0]?.t ?? 0, completed: 0, failed: 0 };
  for (const sample of b.samples) {
    spread(completed, sample.completed - prev.completed, prev.t, sample.t);
    spread(failed, sample.failed - prev.failed, prev.t, sample.t);
    prev = sample;
  }
  const runningFromS = b.statusSeenS.in_progress ?? b.statusSeenS.finalizing;
  return {
    bucketS,
    times: Array.from({ length: n }, (_, i) => i * bucketS),
    interactiveCompletedPerS: interactive,
    batchCompletedPerS: completed,
    batchFailedPerS: failed,
    busyPct: result.admin.map((s) => [s.t, busyPct(s)]),
    interactiveBusyPct: result.admin.map((s) => [s.t, interactiveBusyPct(s, b.tenant)]),
    ...(b.submittedS !== undefined ? { submittedS: b.submittedS } : {}),
    ...(runningFromS !== undefined ? { runningFromS } : {}),
    ...(b.linesEndedS !== undefined ? { linesEndedS: b.linesEndedS } : {}),
  };
}
