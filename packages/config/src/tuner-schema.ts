import { z } from 'zod';

/**
 * The leader's scrape of every pod's vLLM /metrics (docs/tuner.md): load gauges for
 * admission and saturation every interval, and the counters the capacity tuner reads.
 */
export const scrapeSchema = z
  .strictObject({
    interval_ms: z.number().int().min(10).max(600_000).default(100),
    /** One request per pod per scrape; a pod that does not answer in time is left out. */
    timeout_ms: z.number().int().min(10).max(600_000).default(500),
  })
  .superRefine((s, ctx) => {
    if (s.timeout_ms > s.interval_ms * 100) {
      ctx.addIssue({
        code: 'custom',
        path: ['timeout_ms'],
        message: `must be at most 100 x interval_ms (${s.interval_ms * 100})`,
      });
    }
  });

/** Per model (vLLM's model_name): the model's shape and, optionally, explicit SLO targets. */
export const tunerModelSchema = z
  .strictObject({
    /** Explicit TTFT target (ms); with target_itl_ms, else inferred from slo_multiplier. */
    target_ttft_ms: z.number().positive().max(3_600_000).optional(),
    target_itl_ms: z.number().positive().max(3_600_000).optional(),
    /** N: the pods' max batch (vLLM --max-num-seqs). */
    max_batch: z.number().int().min(1).max(65_536).optional(),
    /** K: queue positions beyond the batch in the queueing model (filter and sizing). */
    queue_size: z.number().int().min(0).max(65_536).optional(),
  })
  .superRefine((m, ctx) => {
    if ((m.target_ttft_ms === undefined) !== (m.target_itl_ms === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: [m.target_ttft_ms === undefined ? 'target_ttft_ms' : 'target_itl_ms'],
        message: 'target_ttft_ms and target_itl_ms are set together or not at all',
      });
    }
  });

/** The capacity tuner: an EKF over the queueing model per pod, run by the leader. */
export const tunerSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /** One EKF update per pod per period. */
  period_s: z.number().min(0.1).max(3_600).default(60),
  /** k of the inferred targets: iteration time k x alpha, utilisation 1 - 1/k. */
  slo_multiplier: z.number().gt(1).max(100).default(3),
  /** A period with fewer first tokens on a pod gives that pod no observation. */
  min_requests: z.number().int().min(1).default(10),
  /** Defaults of models without their own max_batch / queue_size. */
  max_batch: z.number().int().min(1).max(65_536).default(256),
  queue_size: z.number().int().min(0).max(65_536).default(100),
  models: z.record(z.string().min(1), tunerModelSchema).default({}),
  /**
   * fairgate_desired_pods (the scaling signal): it rises at once, and falls only after
   * this many periods in a row in which fewer pods would do with scale_tolerance of headroom.
   */
  scale_down_periods: z.number().int().min(1).max(1_000).default(3),
  /** Headroom a smaller pod count must leave before the signal falls to it. */
  scale_tolerance: z.number().min(0).lt(1).default(0.1),
  /** The signal's floor: a pool with no pod has no traffic to size from. */
  min_pods: z.number().int().min(0).max(100_000).default(1),
});

export type ScrapeConfig = z.infer<typeof scrapeSchema>;
export type TunerConfig = z.infer<typeof tunerSchema>;
export type TunerModelConfig = z.infer<typeof tunerModelSchema>;
