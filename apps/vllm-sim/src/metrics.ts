import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { SimConfig } from './config.js';
import type { DriverObserver } from './driver.js';
import type { Engine, EngineObserver, Iteration, SequenceView } from './engine.js';
import { LoraRequestsInfo, registerCacheConfigInfo } from './info-metrics.js';

/**
 * /metrics with vLLM's names (v0.10+) and label model_name, plus vLLM's info gauges
 * (info-metrics.ts) and the sim's own `fairgate_sim_*` series. Histogram buckets are vLLM's,
 * so a gateway's PromQL works the same against the sim and a real pod. Gauges are read from
 * the engine at scrape time.
 */
export const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
  160, 640, 2560,
];
export const ITL_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
const REQUEST_LATENCY_BUCKETS = [
  0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680,
];
const LAG_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
];
const ITERATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** vLLM's 1-2-5 buckets up to the context length, for token-count histograms. */
function tokenBuckets(maxModelLen: number): number[] {
  const buckets: number[] = [];
  for (let scale = 1; ; scale *= 10) {
    for (const step of [1, 2, 5]) {
      if (step * scale > maxModelLen) return buckets;
      buckets.push(step * scale);
    }
  }
}

const RESYNC_LOG_INTERVAL_MS = 10_000;

export type FaultKind = 'fail_500' | 'fail_429' | 'stall' | 'reset';

export type MetricsConfig = Pick<
  SimConfig,
  'model' | 'maxModelLen' | 'kvBlocks' | 'blockSize' | 'maxLoras'
>;

export class SimMetrics implements EngineObserver, DriverObserver {
  readonly registry = new Registry();
  private readonly labels: { model_name: string };
  private readonly log: (line: string) => void;

  private readonly ttft;
  private readonly itl;
  private readonly tpot;
  private readonly e2e;
  private readonly queueTime;
  private readonly requestPromptTokens;
  private readonly requestGenerationTokens;
  private readonly promptTokens;
  private readonly generationTokens;
  private readonly success: Counter<'model_name' | 'finished_reason'>;
  private readonly preemptions;
  private readonly prefixQueries;
  private readonly prefixHits;
  private readonly iterations;
  private readonly lag;
  private readonly lagMax: Gauge<'model_name'>;
  private readonly resyncs;
  private readonly faults: Counter<'model_name' | 'fault'>;
  /** vllm:lora_requests_info; null when LoRA is off. */
  private readonly loraInfo: LoraRequestsInfo | null;
  private lagMaxSeconds = 0;
  private lastResyncLogMs = Number.NEGATIVE_INFINITY;
  private resyncsUnlogged = 0;

  constructor(
    config: MetricsConfig,
    /** The engine whose state the gauges report (read at scrape time). */
    engineOf: () => Engine,
    log: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
  ) {
    this.labels = { model_name: config.model };
    this.log = log;
    // Registered in this order, the order /metrics lists them in.
    registerCacheConfigInfo(this.registry, config.kvBlocks, config.blockSize);
    this.loraInfo =
      config.maxLoras > 0 ? new LoraRequestsInfo(this.registry, config.maxLoras) : null;
    const make = metricMakers(this.registry, this.labels);
    registerEngineGauges(make, engineOf);
    const latency = latencyHistograms(make, config.maxModelLen);
    this.ttft = latency.ttft;
    this.itl = latency.itl;
    this.tpot = latency.tpot;
    this.e2e = latency.e2e;
    this.queueTime = latency.queueTime;
    this.requestPromptTokens = latency.requestPromptTokens;
    this.requestGenerationTokens = latency.requestGenerationTokens;
    const tokens = tokenCounters(make);
    this.promptTokens = tokens.promptTokens;
    this.generationTokens = tokens.generationTokens;
    this.success = tokens.success;
    this.preemptions = tokens.preemptions;
    this.prefixQueries = tokens.prefixQueries;
    this.prefixHits = tokens.prefixHits;
    const own = simOwnMetrics(make);
    this.iterations = own.iterations;
    this.lag = own.lag;
    this.lagMax = own.lagMax;
    this.resyncs = own.resyncs;
    this.faults = own.faults;
    const labels = this.labels;
    for (const reason of ['stop', 'length', 'abort'])
      this.success.inc({ ...labels, finished_reason: reason }, 0);
    for (const fault of ['fail_500', 'fail_429', 'stall', 'reset'])
      this.faults.inc({ ...labels, fault }, 0);
    this.lagMax.set(labels, 0);
  }

  fault(kind: FaultKind): void {
    this.faults.inc({ ...this.labels, fault: kind });
  }

  onSubmit(seq: SequenceView): void {
    this.loraInfo?.requestStarted(seq.spec.lora);
  }

  onIteration(iteration: Iteration): void {
    this.iterations.observe(iteration.durationMs / 1000);
  }

  onIterationEnd(): void {
    this.loraInfo?.record();
  }

  onAdmit(seq: SequenceView, now: number, queryTokens: number, hitTokens: number): void {
    this.prefixQueries.inc(queryTokens);
    this.prefixHits.inc(hitTokens);
    if (seq.preemptions === 0) this.queueTime.observe((now - seq.arrivalMs) / 1000);
  }

  onPreempt(): void {
    this.preemptions.inc();
  }

  onToken(seq: SequenceView, now: number, previousTokenMs: number | null): void {
    if (!seq.spec.prefillOnly) this.generationTokens.inc();
    if (previousTokenMs === null) {
      this.promptTokens.inc(seq.spec.promptTokens);
      this.ttft.observe((now - seq.arrivalMs) / 1000);
      return;
    }
    const gapSeconds = (now - previousTokenMs) / 1000;
    this.itl.observe(gapSeconds);
    this.tpot.observe(gapSeconds);
  }

  onFinish(seq: SequenceView, now: number): void {
    this.loraInfo?.requestEnded(seq.spec.lora);
    this.success.inc({ ...this.labels, finished_reason: seq.spec.finishReason });
    this.e2e.observe((now - seq.arrivalMs) / 1000);
    this.requestPromptTokens.observe(seq.spec.promptTokens);
    this.requestGenerationTokens.observe(seq.spec.prefillOnly ? 0 : seq.generated);
  }

  onAbort(seq: SequenceView): void {
    this.loraInfo?.requestEnded(seq.spec.lora);
    this.success.inc({ ...this.labels, finished_reason: 'abort' });
  }

  onLag(lagMs: number): void {
    // Timers may fire up to ~1 ms early (libuv's millisecond clock); early counts as on time.
    const lateSeconds = Math.max(0, lagMs) / 1000;
    this.lag.observe(lateSeconds);
    if (lateSeconds > this.lagMaxSeconds) {
      this.lagMaxSeconds = lateSeconds;
      this.lagMax.set(this.labels, lateSeconds);
    }
  }

  onResync(lagMs: number): void {
    this.resyncs.inc();
    this.resyncsUnlogged++;
    // At most one line per RESYNC_LOG_INTERVAL_MS: a starved sim should not also flood stderr.
    const now = Date.now();
    if (now - this.lastResyncLogMs < RESYNC_LOG_INTERVAL_MS) return;
    this.log(
      `fairgate-sim: engine ${lagMs.toFixed(1)} ms behind real time (CPU-starved?); restarted ` +
        `the model clock (${this.resyncsUnlogged}x since the last report)`,
    );
    this.lastResyncLogMs = now;
    this.resyncsUnlogged = 0;
  }

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}

type MetricMakers = ReturnType<typeof metricMakers>;

/**
 * Constructors of metrics with the label model_name in `registry`. Counters and histograms
 * start exported at 0 and come bound to the label; gauges are set at scrape time.
 */
function metricMakers(registry: Registry, labels: { model_name: string }) {
  const registers = [registry];
  const labelNames = ['model_name'] as const;
  return {
    registers,
    labels,
    labelNames,
    gauge: (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.set(labels, read());
        },
      }),
    counter: (name: string, help: string) => {
      const metric = new Counter({ name, help, labelNames, registers });
      metric.inc(labels, 0); // exported from the start, so rate() sees the first increment
      return metric.labels(labels);
    },
    histogram: (name: string, help: string, buckets: number[]) => {
      const metric = new Histogram({ name, help, labelNames, registers, buckets });
      metric.zero(labels); // vLLM's labelled histograms show their series at zero from the start
      return metric.labels(labels);
    },
  };
}

/** vLLM's scheduler and KV-cache gauges, read from the engine at scrape time. */
function registerEngineGauges(make: MetricMakers, engineOf: () => Engine): void {
  const { gauge } = make;
  gauge('vllm:num_requests_running', 'Requests in the running batch.', () => engineOf().numRunning);
  gauge(
    'vllm:num_requests_waiting',
    'Requests waiting to be scheduled.',
    () => engineOf().numWaiting,
  );
  gauge('vllm:kv_cache_usage_perc', 'KV-cache usage, 1 = 100%.', () => engineOf().kvUsage);
  gauge(
    'fairgate_sim_num_requests_running_max',
    'Most requests ever running at once (never above --max-num-seqs).',
    () => engineOf().maxRunningSeen,
  );
}

/** vLLM's per-request histograms: latencies and token counts. */
function latencyHistograms(make: MetricMakers, maxModelLen: number) {
  const { histogram } = make;
  const countBuckets = tokenBuckets(maxModelLen);
  return {
    ttft: histogram('vllm:time_to_first_token_seconds', 'Time to first token.', TTFT_BUCKETS),
    itl: histogram('vllm:inter_token_latency_seconds', 'Inter-token latency.', ITL_BUCKETS),
    tpot: histogram(
      'vllm:time_per_output_token_seconds',
      'Inter-token latency (name before vLLM 0.10).',
      ITL_BUCKETS,
    ),
    e2e: histogram(
      'vllm:e2e_request_latency_seconds',
      'End-to-end latency of finished requests.',
      REQUEST_LATENCY_BUCKETS,
    ),
    queueTime: histogram(
      'vllm:request_queue_time_seconds',
      'Time from arrival to first scheduling.',
      REQUEST_LATENCY_BUCKETS,
    ),
    requestPromptTokens: histogram(
      'vllm:request_prompt_tokens',
      'Prompt tokens per finished request.',
      countBuckets,
    ),
    requestGenerationTokens: histogram(
      'vllm:request_generation_tokens',
      'Generated tokens per finished request.',
      countBuckets,
    ),
  };
}

/** vLLM's token, request, preemption and prefix-cache counters. */
function tokenCounters(make: MetricMakers) {
  const { counter } = make;
  return {
    promptTokens: counter('vllm:prompt_tokens_total', 'Prefilled prompt tokens.'),
    generationTokens: counter('vllm:generation_tokens_total', 'Generated tokens.'),
    success: new Counter({
      name: 'vllm:request_success_total',
      help: 'Finished requests by finish reason.',
      labelNames: ['model_name', 'finished_reason'],
      registers: make.registers,
    }),
    preemptions: counter('vllm:num_preemptions_total', 'Preemptions (KV cache exhausted).'),
    prefixQueries: counter(
      'vllm:prefix_cache_queries_total',
      'Prompt tokens looked up in the prefix cache.',
    ),
    prefixHits: counter('vllm:prefix_cache_hits_total', 'Prompt tokens found in the prefix cache.'),
  };
}

/** The sim's own series: its engine loop's timing, its CPU and the faults it injected. */
function simOwnMetrics(make: MetricMakers) {
  const { counter, histogram, labelNames, registers } = make;
  const iterations = histogram(
    'fairgate_sim_iteration_duration_seconds',
    'Model duration of engine iterations (alpha + work of the batch).',
    ITERATION_BUCKETS,
  );
  const lag = histogram(
    'fairgate_sim_iteration_lag_seconds',
    'How late iterations completed against the model schedule.',
    LAG_BUCKETS,
  );
  const lagMax: Gauge<'model_name'> = new Gauge({
    name: 'fairgate_sim_iteration_lag_max_seconds',
    help: 'Largest iteration lateness seen.',
    labelNames,
    registers,
  });
  const resyncs = counter(
    'fairgate_sim_engine_resyncs_total',
    'Times the engine fell too far behind real time and restarted its model clock.',
  );
  // CPU of the sim process itself (as prom-client's default metric of the same name), so a
  // benchmark can tell whether the sim had CPU to spare. Read at scrape time: no timers.
  new Counter({
    name: 'process_cpu_seconds_total',
    help: 'User and system CPU time spent by the sim process.',
    registers,
    collect() {
      const { user, system } = process.cpuUsage();
      this.reset();
      this.inc((user + system) / 1e6);
    },
  });
  const faults: Counter<'model_name' | 'fault'> = new Counter({
    name: 'fairgate_sim_faults_total',
    help: 'Injected faults by kind.',
    labelNames: ['model_name', 'fault'],
    registers,
  });
  return { iterations, lag, lagMax, resyncs, faults };
}
