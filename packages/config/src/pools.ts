import type { FairgateConfig, PoolConfig } from './schema.js';

/**
 * A pool's view of the config: the whole config with `pool`, `pods`, `models` and the
 * per-pool sections (scheduler, admission, saturation, controller, tuner) set to that
 * pool's. Everything that runs once per pool (its scheduler, control plane, pods) reads
 * this view, so it needs no notion of other pools. Views are built once per config object.
 */
export function poolView(config: FairgateConfig, pool: string): FairgateConfig {
  let views = viewCache.get(config);
  if (!views) {
    views = new Map(config.pools.map((p) => [p.name, viewOf(config, p)]));
    viewCache.set(config, views);
  }
  const view = views.get(pool);
  if (!view) throw new Error(`no pool '${pool}' in the config`);
  return view;
}

const viewCache = new WeakMap<FairgateConfig, Map<string, FairgateConfig>>();

function viewOf(config: FairgateConfig, pool: PoolConfig): FairgateConfig {
  return {
    ...config,
    pool: pool.name,
    pods: pool.pods,
    discovery: pool.discovery,
    models: pool.models.length > 0 ? [...pool.models] : undefined,
    scheduler: pool.scheduler,
    admission: pool.admission,
    saturation: pool.saturation,
    controller: pool.controller,
    tuner: pool.tuner,
    routing: pool.routing,
  };
}

/**
 * Which pool serves a model by the config: every name and alias of every pool; a
 * single-pool config without `models:` serves any name (`fallback`). Models discovered
 * from the pods (`pools[].discover_models`) are the gateway's to add (apps/gateway
 * src/pools.ts): they change at run time.
 */
export class ModelRoutes {
  readonly #byName = new Map<string, { pool: string; model: string }>();
  readonly #fallback: string | undefined;

  constructor(pools: readonly PoolConfig[]) {
    for (const pool of pools) {
      for (const model of pool.models) {
        for (const name of [model.name, ...model.aliases]) {
          this.#byName.set(name, { pool: pool.name, model: model.name });
        }
      }
    }
    this.#fallback = pools.find((pool) => pool.models.length === 0 && !pool.discoverModels)?.name;
  }

  /** The pool and the model's own name (an alias resolved), or undefined: not configured. */
  route(model: string): { pool: string; model: string } | undefined {
    return (
      this.#byName.get(model) ?? (this.#fallback ? { pool: this.#fallback, model } : undefined)
    );
  }
}
