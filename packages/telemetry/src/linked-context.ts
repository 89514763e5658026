import { type Context, ROOT_CONTEXT } from '@opentelemetry/api';

/** The key of the link that only joins a chain to the context it starts from. */
const NO_KEY = Symbol('fairgate.linked-context.start');

/**
 * An OpenTelemetry Context as a chain of links, one key and value each. The API's
 * BaseContext copies its whole Map and builds three closures on every `setValue`; a
 * request makes three or four contexts (extracted trace context, SERVER, queue and CLIENT
 * spans) and keeps one while it waits: ~440 bytes per waiting request and a Map copy per
 * span. A link is one small object with its methods on the prototype. Lookups walk the
 * chain, which stays a few links long: contexts here are built per request from one
 * start, never in a loop.
 *
 * Same contract as BaseContext: `getValue` gives the newest value set for a key (undefined
 * when none, or after `deleteValue`), and every call returns a new context, leaving this
 * one unchanged.
 */
export class LinkedContext implements Context {
  static readonly #root = new LinkedContext(ROOT_CONTEXT, NO_KEY, undefined);

  private constructor(
    private readonly parent: Context,
    private readonly key: symbol,
    private readonly value: unknown,
  ) {}

  /** A chain that starts from `base` (ROOT_CONTEXT's start is shared). */
  static from(base: Context): Context {
    if (base instanceof LinkedContext) return base;
    return base === ROOT_CONTEXT ? LinkedContext.#root : new LinkedContext(base, NO_KEY, undefined);
  }

  getValue(key: symbol): unknown {
    let ctx: Context = this;
    while (ctx instanceof LinkedContext) {
      if (ctx.key === key) return ctx.value;
      ctx = ctx.parent;
    }
    return ctx.getValue(key);
  }

  setValue(key: symbol, value: unknown): Context {
    return new LinkedContext(this, key, value);
  }

  deleteValue(key: symbol): Context {
    return new LinkedContext(this, key, undefined);
  }
}
