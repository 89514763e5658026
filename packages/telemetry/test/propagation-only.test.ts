import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { SpanKind, TraceFlags, trace } from '@opentelemetry/api';
import { afterAll, describe, expect, it } from 'vitest';
import {
  endSpan,
  startChildSpan,
  startServerSpan,
  startTelemetry,
  traceHeaders,
} from '../src/index.js';
import { propagatorFromEnv } from '../src/sdk.js';
import { PropagationOnlyTracer } from '../src/spans.js';

describe('telemetry.traces: false', () => {
  it('exports nothing even when OTEL_* ask for export, and still propagates', async () => {
    const telemetry = await startTelemetry({
      serviceName: 'fairgate-test',
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1' },
      traces: false,
    });
    try {
      expect(telemetry.exporting).toBe(false);
      expect(telemetry.tracer).toBeInstanceOf(PropagationOnlyTracer);
    } finally {
      await telemetry.shutdown();
    }
  });
});

describe('PropagationOnlyTracer (nothing records spans)', async () => {
  // No OTEL_* export and no processor: only the W3C propagator is registered (no SDK).
  const telemetry = await startTelemetry({ serviceName: 'fairgate-test', env: {} });
  const tracer = telemetry.tracer;
  afterAll(() => telemetry.shutdown());

  it('is what startTelemetry hands out when nothing records', () => {
    expect(tracer).toBeInstanceOf(PropagationOnlyTracer);
  });

  it('continues an incoming trace with a fresh span id per span', () => {
    const { span, ctx } = startServerSpan(tracer, 'POST', '/v1/chat/completions', {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    });
    const client = startChildSpan(tracer, ctx, 'chat m', SpanKind.CLIENT, { a: 1 });
    expect(span.isRecording()).toBe(false);
    expect(span.spanContext().traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    expect(span.spanContext().spanId).not.toBe('b7ad6b7169203331');
    expect(client.span.spanContext().spanId).not.toBe(span.spanContext().spanId);
    expect(traceHeaders(client.ctx).traceparent).toBe(
      `00-0af7651916cd43dd8448eb211c80319c-${client.span.spanContext().spanId}-01`,
    );
    endSpan(client.span, { error: new Error('x'), status: 502 }); // no-ops, no throw
    endSpan(span, { status: 200 });
  });

  it('starts a valid sampled trace without a parent and keeps an unsampled parent unsampled', () => {
    const root = startServerSpan(tracer, 'POST', '/v1/completions', {});
    expect(trace.isSpanContextValid(root.span.spanContext())).toBe(true);
    expect(traceHeaders(root.ctx).traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);

    const unsampled = startServerSpan(tracer, 'POST', '/v1/completions', {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00',
    });
    expect(unsampled.span.spanContext().traceFlags).toBe(TraceFlags.NONE);
    expect(traceHeaders(unsampled.ctx).traceparent).toMatch(/-00$/);
  });

  it('gives distinct ids across many spans', () => {
    const ids = new Set<string>();
    for (let i = 0; i < 2_000; i++) ids.add(tracer.startSpan('s').spanContext().spanId);
    expect(ids.size).toBe(2_000);
  });
});

describe('propagatorFromEnv (OTEL_PROPAGATORS, as the NodeSDK reads it)', () => {
  it.each([
    ['unset', undefined, ['traceparent', 'tracestate', 'baggage']],
    ['empty', '', ['traceparent', 'tracestate', 'baggage']],
    ['tracecontext', 'tracecontext', ['traceparent', 'tracestate']],
    ['baggage', 'baggage', ['baggage']],
    [
      'both, spaced and repeated',
      ' baggage , tracecontext,baggage',
      ['baggage', 'traceparent', 'tracestate'],
    ],
    ['none', 'none', null],
    ['none beside another', 'tracecontext,none', null],
    ['b3 (the SDK builds it)', 'b3', undefined],
    ['jaeger beside W3C', 'tracecontext,jaeger', undefined],
  ])('%s', (_name, value, fields) => {
    const propagator = propagatorFromEnv(value === undefined ? {} : { OTEL_PROPAGATORS: value });
    expect(
      propagator === null || propagator === undefined ? propagator : propagator.fields(),
    ).toEqual(fields);
  });
});

describe('what a process loads', () => {
  /** A fresh Node process with `env` starts the built package: what did it load and register? */
  const startIn = (env: Record<string, string>) => {
    const script = `
      import { createRequire } from 'node:module';
      import { metrics, propagation, trace } from '@opentelemetry/api';
      import { startTelemetry } from '@fairgate/telemetry';
      const telemetry = await startTelemetry({ serviceName: 'check' });
      const loaded = Object.keys(createRequire(import.meta.url).cache);
      console.log(JSON.stringify({
        sdk: loaded.some((file) => file.includes('/@opentelemetry/sdk-node/')),
        tracer: telemetry.tracer.constructor.name,
        fields: propagation.fields(),
        meterProvider: metrics.getMeterProvider().constructor.name,
        tracerProvider: trace.getTracerProvider().getDelegate().constructor.name,
      }));
      await telemetry.shutdown();`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      env: { PATH: process.env.PATH ?? '', ...env },
      encoding: 'utf8',
    });
    return JSON.parse(out);
  };

  const W3C = ['traceparent', 'tracestate', 'baggage'];
  // [case, the process's environment, NodeSDK loaded, tracer, propagator fields, meter
  // provider, tracer provider]
  it.each([
    [
      'untraced: no NodeSDK, no provider',
      {},
      false,
      'PropagationOnlyTracer',
      W3C,
      'NoopMeterProvider',
      'NoopTracerProvider',
    ],
    [
      'traced: no meter provider even when OTEL_METRICS_EXPORTER asks',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1', OTEL_METRICS_EXPORTER: 'otlp' },
      true,
      'Tracer',
      W3C,
      'NoopMeterProvider',
      'TracerProvider',
    ],
    [
      'a propagator only the SDK has: the NodeSDK, recording nothing',
      { OTEL_PROPAGATORS: 'b3' },
      true,
      'PropagationOnlyTracer',
      ['b3'],
      'NoopMeterProvider',
      'TracerProvider',
    ],
  ])('%s', (_case, env, sdk, tracer, fields, meterProvider, tracerProvider) => {
    expect(startIn(env)).toEqual({ sdk, tracer, fields, meterProvider, tracerProvider });
  });
});
