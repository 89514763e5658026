/** What the tuner benches read of a gateway: GET /admin/capacity, and waiting for its next period. */
import { TEST_KEYS } from '@fairgate/testkit';
import { sleep } from './stack.js';

/** One pod in the capacity report. */
export interface PodView {
  alpha_ms: number | null;
  beta_ms: number | null;
  gamma_ms: number | null;
  relative_std?: number[] | null;
  updates?: number;
  rejected?: number;
  event: string | null;
  nis?: number | null;
  capacity_rps?: number | null;
  observation?: { rate: number } | null;
}

export interface CapacityReport {
  period?: number;
  desired_pods?: number | null;
  pods: Record<string, PodView>;
}

/** The gateway's capacity report once the tuner's period exceeds `period` (at most `limitS`). */
export async function nextPeriod(
  gatewayUrl: string,
  period: number,
  limitS: number,
): Promise<CapacityReport> {
  const until = performance.now() + limitS * 1_000;
  while (performance.now() < until) {
    const report = await fetch(`${gatewayUrl}/admin/capacity`, {
      headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
      signal: AbortSignal.timeout(5_000),
    })
      .then((r) => r.json() as Promise<CapacityReport>)
      .catch(() => null);
    if (report && (report.period ?? 0) > period) return report;
    await sleep(50);
  }
  throw new Error(`the tuner's period did not pass ${period} within ${limitS} s`);
}
