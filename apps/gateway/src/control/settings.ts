import type { FairgateConfig } from '@fairgate/config';
import type { ControllerConfig } from '@fairgate/control';

export interface ControllerSettings {
  enabled: boolean;
  /** The step's config; targetP99TtftS is NaN while no target is set (disabled). */
  config: ControllerConfig;
}

/** The `controller:` section of the gateway config as the pure step reads it. */
export function controllerSettings(config: FairgateConfig): ControllerSettings {
  const c = config.controller;
  return {
    enabled: c.enabled,
    config: {
      targetP99TtftS: c.target_p99_ttft_s ?? Number.NaN,
      tickS: c.tick_s,
      windowS: c.window_s,
      capPerWorker: c.cap_per_worker,
      capPerWorkerMin: c.cap_per_worker_min,
      capPerWorkerMax: c.cap_per_worker_max,
      targetBandPct: c.target_band_pct,
      cooldownTicks: c.cooldown_ticks,
      decrease: c.decrease,
      increaseStep: c.increase_step,
      minSamples: c.min_samples,
      queueAware: c.queue_aware,
    },
  };
}
