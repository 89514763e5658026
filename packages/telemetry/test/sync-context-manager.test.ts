import { type Context, context, createContextKey, ROOT_CONTEXT } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { startTelemetry } from '../src/index.js';
import { SyncContextManager } from '../src/sync-context-manager.js';

const KEY = createContextKey('fairgate.test');
const A = ROOT_CONTEXT.setValue(KEY, 'a');
const B = ROOT_CONTEXT.setValue(KEY, 'b');

function throwsInside(m: SyncContextManager, ctx: Context): void {
  expect(() =>
    m.with(ctx, () => {
      throw new Error('boom');
    }),
  ).toThrow('boom');
}

describe('SyncContextManager', () => {
  it.each<[string, (m: SyncContextManager) => Context, Context]>([
    ['outside any with', (m) => m.active(), ROOT_CONTEXT],
    ['inside with(A)', (m) => m.with(A, () => m.active()), A],
    ['inside with(B) inside with(A)', (m) => m.with(A, () => m.with(B, () => m.active())), B],
    [
      'inside with(A), after a with(B) in it returned',
      (m) =>
        m.with(A, () => {
          m.with(B, () => 0);
          return m.active();
        }),
      A,
    ],
    [
      'after with(A) returned',
      (m) => {
        m.with(A, () => 0);
        return m.active();
      },
      ROOT_CONTEXT,
    ],
    [
      'after with(A) threw',
      (m) => {
        throwsInside(m, A);
        return m.active();
      },
      ROOT_CONTEXT,
    ],
    ['a function bound to A, called outside', (m) => m.bind(A, () => m.active())(), A],
    [
      'a function bound to A, called inside with(B)',
      (m) => m.with(B, () => m.bind(A, () => m.active())()),
      A,
    ],
    ['disable() inside with(A)', (m) => m.with(A, () => m.disable().active()), ROOT_CONTEXT],
  ])('%s: the active context', (_name, run, expected) => {
    expect(run(new SyncContextManager().enable())).toBe(expected);
  });

  it('with passes this and the arguments and returns what fn returns', () => {
    const manager = new SyncContextManager();
    const target = { base: 10 };
    const result = manager.with(
      A,
      function (this: typeof target, x: number, y: number) {
        return this.base + x + y;
      },
      target,
      1,
      2,
    );
    expect(result).toBe(13);
  });

  it('bind keeps this and the arguments; anything but a function comes back as it was', () => {
    const manager = new SyncContextManager();
    const bound = manager.bind(A, function (this: { n: number }, x: number) {
      return [this.n + x, manager.active()] as const;
    });
    expect(bound.call({ n: 1 }, 2)).toEqual([3, A]);
    const emitter = { on: () => undefined };
    expect(manager.bind(A, emitter)).toBe(emitter);
  });

  it('does not carry a context across an await (fairgate passes contexts explicitly)', async () => {
    const manager = new SyncContextManager();
    const after = await manager.with(A, async () => {
      await Promise.resolve();
      return manager.active();
    });
    expect(after).toBe(ROOT_CONTEXT);
  });
});

describe('startTelemetry registers it', () => {
  it('context.with is synchronous only, with a span processor recording', async () => {
    const telemetry = await startTelemetry({
      serviceName: 'fairgate-test',
      spanProcessors: [new SimpleSpanProcessor(new InMemorySpanExporter())],
    });
    try {
      expect(context.with(A, () => context.active())).toBe(A);
      const afterAwait = await context.with(A, async () => {
        await Promise.resolve();
        return context.active();
      });
      expect(afterAwait).toBe(ROOT_CONTEXT);
    } finally {
      await telemetry.shutdown();
    }
  });
});
