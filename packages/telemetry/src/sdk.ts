import {
  context,
  ProxyTracerProvider,
  propagation,
  type TextMapPropagator,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import {
  CompositePropagator,
  W3CBaggagePropagator,
  W3CTraceContextPropagator,
} from '@opentelemetry/core';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { PropagationOnlyTracer } from './spans.js';
import { SyncContextManager } from './sync-context-manager.js';

export interface TelemetryOptions {
  serviceName: string;
  serviceVersion?: string;
  /** Extra processors (tests pass a SimpleSpanProcessor over an InMemorySpanExporter). */
  spanProcessors?: SpanProcessor[];
  env?: NodeJS.ProcessEnv;
  /**
   * false: no span leaves the process whatever the OTEL_* variables say (the config's
   * `telemetry.traces`); trace context is still propagated to the pods. Default true.
   */
  traces?: boolean;
}

export interface Telemetry {
  readonly tracer: Tracer;
  /** True when spans leave the process (an OTLP/other exporter is configured). */
  readonly exporting: boolean;
  /** Exports every ended span now (span export waits for async resource detection). */
  flush(): Promise<void>;
  shutdown(): Promise<void>;
}

/** Standard OTEL_* variables that ask for span export. */
export function exportRequested(env: NodeJS.ProcessEnv): boolean {
  const exporter = env.OTEL_TRACES_EXPORTER?.trim();
  if (exporter === 'none') return false;
  return Boolean(
    exporter || env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
  );
}

/**
 * Spans per OTLP export when OTEL_BSP_MAX_EXPORT_BATCH_SIZE is not set (the SDK's default is
 * 512). An export serialises its whole batch on the event loop, and every request waiting
 * on that loop waits for it: batches of 512 held a traced replica's p99 at c=1 at 6.9-8.5 ms
 * against 1.9-2.5 untraced, batches of 128 at ~4.1, for the same CPU per request
 * (bench:overhead with BENCH_TRACES=1, 2-core VM). An operator's setting wins.
 */
export const EXPORT_BATCH_DEFAULT = 128;

/**
 * Starts tracing. Export is configured only by the standard OTEL_* environment variables
 * (e.g. OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4318, OTEL_EXPORTER_OTLP_PROTOCOL), through
 * the OpenTelemetry NodeSDK. With none set (or `traces: false`), nothing records spans: the
 * tracer only propagates W3C trace context to the pods (PropagationOnlyTracer: no span is
 * built), and the NodeSDK is not loaded unless OTEL_PROPAGATORS names a propagator other
 * than W3C's (`propagationOnly`). No auto-instrumentation: fairgate creates its spans
 * explicitly (t1..t7), and it sets up no OpenTelemetry metrics or logs (its metrics are
 * Prometheus's).
 */
export async function startTelemetry(options: TelemetryOptions): Promise<Telemetry> {
  const env = options.env ?? process.env;
  const exporting = options.traces !== false && exportRequested(env);
  const extra = options.spanProcessors ?? [];
  const recording = exporting || extra.length > 0;
  const propagator = recording ? undefined : propagatorFromEnv(env);
  if (propagator !== undefined) return propagationOnly(propagator);
  // Loaded only from here on: importing the NodeSDK (every exporter, the metrics and logs
  // SDKs) costs a replica ~0.85 s of CPU and ~26 MB of RSS at start (docs/config.md).
  const [{ NodeSDK }, { NoopSpanProcessor }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/sdk-trace-base'),
  ]);
  // Passing spanProcessors disables the SDK's env-driven exporter; only pass
  // them when env export is not requested or tests bring their own.
  const spanProcessors =
    extra.length > 0 ? extra : exporting ? undefined : [new NoopSpanProcessor()];
  // The SDK's batch processor reads its OTEL_BSP_* settings from process.env.
  if (spanProcessors === undefined && process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE === undefined) {
    process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE = String(EXPORT_BATCH_DEFAULT);
  }
  const sdk = new NodeSDK({
    serviceName: options.serviceName,
    instrumentations: [],
    // Contexts are passed explicitly; async propagation would hook every promise.
    contextManager: new SyncContextManager(),
    ...(spanProcessors ? { spanProcessors } : {}),
    // Traces only: fairgate makes no OpenTelemetry metrics or logs, so none are set up
    // whatever OTEL_METRICS_EXPORTER and OTEL_LOGS_EXPORTER say (both default to OTLP).
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  return {
    // Nothing records spans (no exporter, no processor): only propagate trace context.
    tracer: recording
      ? trace.getTracer('fairgate', options.serviceVersion)
      : new PropagationOnlyTracer(),
    exporting: exporting && extra.length === 0,
    flush: async () => {
      const provider = trace.getTracerProvider();
      const delegate = provider instanceof ProxyTracerProvider ? provider.getDelegate() : provider;
      const flushable = delegate as { forceFlush?: () => Promise<void> };
      await flushable.forceFlush?.();
    },
    shutdown: () => sdk.shutdown(),
  };
}

/**
 * Nothing records spans: register what the NodeSDK would (the context manager, and the
 * propagator OTEL_PROPAGATORS names; null for `none`) and hand out a tracer that only
 * propagates. No tracer, meter or logger provider is registered: nothing would use them.
 */
function propagationOnly(propagator: TextMapPropagator | null): Telemetry {
  context.setGlobalContextManager(new SyncContextManager().enable());
  if (propagator) propagation.setGlobalPropagator(propagator);
  return {
    tracer: new PropagationOnlyTracer(),
    exporting: false,
    flush: async () => {},
    shutdown: async () => {},
  };
}

/**
 * The propagator OTEL_PROPAGATORS asks for, as the NodeSDK builds it (default: W3C trace
 * context and baggage; null: `none`, nothing registered), when it names only the W3C ones;
 * undefined when it names others (b3, b3multi, jaeger), which the NodeSDK's dependencies
 * provide: the NodeSDK is then started as before, with a processor that records nothing.
 */
export function propagatorFromEnv(env: NodeJS.ProcessEnv): TextMapPropagator | null | undefined {
  const listed = (env.OTEL_PROPAGATORS ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  const names = listed.length > 0 ? [...new Set(listed)] : ['tracecontext', 'baggage'];
  if (names.includes('none')) return null;
  const w3c: Record<string, () => TextMapPropagator> = {
    tracecontext: () => new W3CTraceContextPropagator(),
    baggage: () => new W3CBaggagePropagator(),
  };
  if (!names.every((name) => name in w3c)) return undefined;
  const propagators = names.map((name) => (w3c[name] as () => TextMapPropagator)());
  return propagators.length === 1
    ? (propagators[0] as TextMapPropagator)
    : new CompositePropagator({ propagators });
}
