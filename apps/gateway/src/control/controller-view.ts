import type { FairgateConfig } from '@fairgate/config';
import { decodeState, decodeWindow, summarizeWindow } from '@fairgate/control';
import type { Scheduler, SchedulerSnapshot } from '@fairgate/scheduler';
import { controllerSettings } from './settings.js';

/** Actions listed on /admin/state, newest first. */
const ACTIONS_SHOWN = 20;

/**
 * The controller as /admin/state shows it on any replica: the stored state (cap, cooldown,
 * last actions with reasons, which leadership wrote it) and the shared window read now.
 */
export async function controllerView(
  scheduler: Scheduler,
  config: FairgateConfig,
  snapshot: SchedulerSnapshot,
) {
  const settings = controllerSettings(config);
  const c = settings.config;
  const window = summarizeWindow(decodeWindow(await scheduler.readLatencyWindow(c.windowS)));
  const decoded = decodeState(snapshot.controllerState, c);
  const stored = snapshot.controllerState !== null && decoded.problem === undefined;
  return {
    enabled: settings.enabled,
    target_p99_ttft_s: Number.isNaN(c.targetP99TtftS) ? null : c.targetP99TtftS,
    band_s: Number.isNaN(c.targetP99TtftS)
      ? null
      : [c.targetP99TtftS * (1 - c.targetBandPct), c.targetP99TtftS * (1 + c.targetBandPct)],
    tick_s: c.tickS,
    queue_aware: c.queueAware ?? false,
    window: {
      seconds: c.windowS,
      samples: window.samples,
      errors: window.errors,
      p99_ttft_s: Number.isFinite(window.p99S) ? window.p99S : null,
      p99_from_errors: window.p99S === Number.POSITIVE_INFINITY,
      /** The pods' own part (grant to first token): what queue_aware compares. */
      p99_service_ttft_s: Number.isFinite(window.serviceP99S) ? window.serviceP99S : null,
    },
    cap_per_worker: stored ? decoded.state.capPerWorker : null,
    budget: snapshot.budget,
    cooldown_ticks_left: stored ? decoded.state.cooldownLeft : null,
    tick: stored ? decoded.state.tick : 0,
    written_by: decoded.writer,
    ...(decoded.problem ? { state_problem: decoded.problem } : {}),
    actions: decoded.state.actions.slice(-ACTIONS_SHOWN).reverse(),
  };
}
