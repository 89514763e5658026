import {
  type Context,
  context,
  createContextKey,
  propagation,
  ROOT_CONTEXT,
  trace,
} from '@opentelemetry/api';
import { afterAll, describe, expect, it } from 'vitest';
import { startChildSpan, startServerSpan, startTelemetry, traceHeaders } from '../src/index.js';
import { LinkedContext } from '../src/linked-context.js';

const A = createContextKey('a');
const B = createContextKey('b');
const C = createContextKey('c');
const KEYS = [A, B, C];

type Step = ['set', symbol, unknown] | ['delete', symbol];

/** Operation sequences; after each step both kinds of context must read the same values. */
const SEQUENCES: Array<{ name: string; steps: Step[] }> = [
  { name: 'nothing set', steps: [] },
  { name: 'one key', steps: [['set', A, 1]] },
  {
    name: 'a key set twice: the newest wins',
    steps: [
      ['set', A, 1],
      ['set', A, 2],
    ],
  },
  {
    name: 'three keys',
    steps: [
      ['set', A, 'a'],
      ['set', B, 'b'],
      ['set', C, 'c'],
    ],
  },
  {
    name: 'delete after set',
    steps: [
      ['set', A, 1],
      ['delete', A],
    ],
  },
  {
    name: 'set after delete',
    steps: [
      ['set', A, 1],
      ['delete', A],
      ['set', A, 3],
    ],
  },
  { name: 'delete a key never set', steps: [['delete', B]] },
  {
    name: 'delete one of two',
    steps: [
      ['set', A, 1],
      ['set', B, 2],
      ['delete', A],
    ],
  },
  {
    name: 'falsy values',
    steps: [
      ['set', A, 0],
      ['set', B, ''],
      ['set', C, null],
    ],
  },
  {
    name: 'undefined as a value',
    steps: [
      ['set', A, 1],
      ['set', A, undefined],
    ],
  },
];

function apply(ctx: Context, step: Step): Context {
  return step[0] === 'set' ? ctx.setValue(step[1], step[2]) : ctx.deleteValue(step[1]);
}

function read(ctx: Context): unknown[] {
  return KEYS.map((key) => ctx.getValue(key));
}

describe('LinkedContext', () => {
  it.each(SEQUENCES)('reads as BaseContext does: $name', ({ steps }) => {
    let base: Context = ROOT_CONTEXT;
    let linked = LinkedContext.from(ROOT_CONTEXT);
    const history: Array<{ linked: Context; values: unknown[] }> = [];
    for (const step of steps) {
      base = apply(base, step);
      linked = apply(linked, step);
      expect(read(linked)).toEqual(read(base));
      history.push({ linked, values: read(base) });
    }
    // Every call returned a new context: the earlier ones still read what they did.
    for (const { linked: earlier, values } of history) expect(read(earlier)).toEqual(values);
    expect(read(LinkedContext.from(ROOT_CONTEXT))).toEqual([undefined, undefined, undefined]);
  });

  it('starts from any context and reads through to it', () => {
    const base = ROOT_CONTEXT.setValue(A, 'from base').setValue(B, 'b');
    const linked = LinkedContext.from(base).setValue(B, 'shadowed').deleteValue(C);
    expect(read(linked)).toEqual(['from base', 'shadowed', undefined]);
    expect(read(base)).toEqual(['from base', 'b', undefined]);
  });

  it('a chain is not wrapped again', () => {
    const linked = LinkedContext.from(ROOT_CONTEXT).setValue(A, 1);
    expect(LinkedContext.from(linked)).toBe(linked);
    expect(LinkedContext.from(ROOT_CONTEXT)).toBe(LinkedContext.from(ROOT_CONTEXT));
  });

  it('carries spans and W3C trace context like BaseContext', () => {
    const incoming = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
    const span = trace.wrapSpanContext({
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: '00f067aa0ba902b7',
      traceFlags: 1,
    });
    for (const start of [ROOT_CONTEXT, LinkedContext.from(ROOT_CONTEXT)]) {
      const extracted = propagation.extract(start, incoming);
      const ctx = trace.setSpan(extracted, span);
      expect(trace.getSpan(ctx)).toBe(span);
      expect(trace.getSpanContext(trace.deleteSpan(ctx))).toBeUndefined();
    }
  });
});

describe('the request spans use it', async () => {
  // Nothing records: the W3C propagator only (as the gateway runs without OTEL_*).
  const telemetry = await startTelemetry({ serviceName: 'fairgate-test', env: {} });
  afterAll(() => telemetry.shutdown());

  it('SERVER and child contexts are chains, and the trace id reaches the pod headers', () => {
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    const server = startServerSpan(telemetry.tracer, 'POST', '/v1/chat/completions', {
      traceparent: `00-${traceId}-b7ad6b7169203331-01`,
    });
    const child = startChildSpan(telemetry.tracer, server.ctx, 'chat m', 2);
    expect(server.ctx).toBeInstanceOf(LinkedContext);
    expect(child.ctx).toBeInstanceOf(LinkedContext);
    expect(trace.getSpan(child.ctx)).toBe(child.span);
    expect(traceHeaders(child.ctx).traceparent).toBe(
      `00-${traceId}-${child.span.spanContext().spanId}-01`,
    );
  });

  it('an active context set by the caller is kept under the chain', () => {
    const outer = ROOT_CONTEXT.setValue(A, 'outer');
    context.with(outer, () => {
      const server = startServerSpan(telemetry.tracer, 'POST', '/v1/completions', {});
      expect(server.ctx.getValue(A)).toBe('outer');
    });
  });
});
