import { type FairgateConfig, ModelRoutes, type TenantConfig } from '@fairgate/config';
import { OpenAIHttpError } from '@fairgate/openai';
import type { PoolRuntime } from './pool-runtime.js';

/** Where a request's model goes: its pool, and the model's own name (an alias resolved). */
export interface ModelRoute {
  readonly pool: PoolRuntime;
  readonly model: string;
}

/**
 * The replica's pools, and which one serves a model. The set of pools is fixed at start
 * (ConfigWatcher refuses a reload that changes it); the models, aliases and tenants'
 * allow-lists follow reloads.
 */
export class Pools {
  readonly all: readonly PoolRuntime[];
  readonly #byName: ReadonlyMap<string, PoolRuntime>;
  #routesOf: FairgateConfig | undefined;
  #routes: ModelRoutes | undefined;
  /** Per tenant config object: the models it may use, by their own names (undefined: all). */
  #allowed = new WeakMap<TenantConfig, ReadonlySet<string> | null>();

  constructor(
    pools: readonly PoolRuntime[],
    private readonly config: () => FairgateConfig,
  ) {
    if (pools.length === 0) throw new Error('a gateway runs at least one pool');
    this.all = pools;
    this.#byName = new Map(pools.map((pool) => [pool.name, pool]));
  }

  /** The first pool of the config (the only one of a single-pool config). */
  get first(): PoolRuntime {
    return this.all[0] as PoolRuntime;
  }

  get(name: string): PoolRuntime | undefined {
    return this.#byName.get(name);
  }

  /**
   * The pool an admin route's `?pool=` names, or the first pool without one; an unknown
   * name is a 404 naming the pools there are.
   */
  fromQuery(name: string | undefined): PoolRuntime {
    if (name === undefined) return this.first;
    const pool = this.#byName.get(name);
    if (!pool) {
      throw new OpenAIHttpError({
        status: 404,
        type: 'invalid_request_error',
        message: `Unknown pool '${name}' (pools: ${[...this.#byName.keys()].join(', ')})`,
        param: 'pool',
        code: 'unknown_pool',
      });
    }
    return pool;
  }

  /**
   * The pool serving `model` for `tenant`, or undefined: not served, or not allowed to it.
   * A configured name or alias first; then the first pool with `discover_models` whose
   * pods list the model.
   */
  route(model: string, tenant: TenantConfig): ModelRoute | undefined {
    const routes = this.#modelRoutes();
    const found = routes.route(model) ?? this.#discovered(model);
    if (!found) return undefined;
    const allowed = this.#allowedModels(tenant, routes);
    if (allowed && !allowed.has(found.model)) return undefined;
    const pool = this.#byName.get(found.pool);
    return pool ? { pool, model: found.model } : undefined;
  }

  /** Whether `tenant` may use `model` (by its own name): its allow-list, or every model. */
  allows(tenant: TenantConfig, model: string): boolean {
    const allowed = this.#allowedModels(tenant, this.#modelRoutes());
    return !allowed || allowed.has(model);
  }

  #discovered(model: string): { pool: string; model: string } | undefined {
    for (const pool of this.all) {
      if (!pool.discoversModels()) continue;
      // A LoRA adapter the pool can load (routing.lora_paths) is served while no pod lists it.
      if (pool.models.has(model) || Object.hasOwn(pool.config().routing.lora_paths, model)) {
        return { pool: pool.name, model };
      }
    }
    return undefined;
  }

  #modelRoutes(): ModelRoutes {
    const config = this.config();
    if (this.#routesOf !== config || !this.#routes) {
      this.#routes = new ModelRoutes(config.pools);
      this.#routesOf = config;
    }
    return this.#routes;
  }

  #allowedModels(tenant: TenantConfig, routes: ModelRoutes): ReadonlySet<string> | null {
    if (!tenant.models) return null;
    let allowed = this.#allowed.get(tenant);
    if (allowed === undefined) {
      // An allow-list may name aliases: each entry counts as the model it stands for.
      allowed = new Set(tenant.models.map((name) => routes.route(name)?.model ?? name));
      this.#allowed.set(tenant, allowed);
    }
    return allowed;
  }
}
