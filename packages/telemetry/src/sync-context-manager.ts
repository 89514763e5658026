import { type Context, type ContextManager, ROOT_CONTEXT } from '@opentelemetry/api';

/**
 * The OpenTelemetry context manager fairgate registers: `context.with(ctx, fn)` makes `ctx`
 * the active context while `fn` runs synchronously, and nothing carries it across an
 * `await`, a timer or a callback (`bind` wraps a function so that it runs under its context
 * when called later).
 *
 * Why not the SDK's default, `AsyncLocalStorageContextManager`: fairgate passes each
 * request's context explicitly from span to span (`startServerSpan` -> `startChildSpan` ->
 * `traceHeaders`, LinkedContext chains) and never reads `context.active()` after an
 * `await`. The batch span processor calls `context.with` on its first export, and on Node
 * 20 that turns on AsyncLocalStorage's async hooks for the rest of the process: a hook on
 * every promise the gateway makes (`promiseInitHook`), 3-12% of a traced request's CPU
 * (V8's CPU profile of a replica exporting every span).
 */
export class SyncContextManager implements ContextManager {
  #active: Context = ROOT_CONTEXT;

  active(): Context {
    return this.#active;
  }

  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    ctx: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    const previous = this.#active;
    this.#active = ctx;
    try {
      return fn.call(thisArg, ...args);
    } finally {
      this.#active = previous;
    }
  }

  bind<T>(ctx: Context, target: T): T {
    if (typeof target !== 'function') return target;
    const manager = this;
    const fn = target as unknown as (...args: unknown[]) => unknown;
    return function bound(this: unknown, ...args: unknown[]) {
      return manager.with(ctx, fn, this, ...args);
    } as unknown as T;
  }

  enable(): this {
    return this;
  }

  disable(): this {
    this.#active = ROOT_CONTEXT;
    return this;
  }
}
