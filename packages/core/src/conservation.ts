import type { TenantId } from './ids.js';
import { OUTCOMES, type Outcome } from './outcomes.js';
import type { RejectCode } from './rejections.js';

/** Outcome counters of one (tenant, SLO class) pair, as kept pool-wide by the scheduler. */
export interface FlowCounters {
  tenant: TenantId;
  sloClass: string;
  offered: number;
  admitted: number;
  rejected: Partial<Record<RejectCode, number>>;
  outcomes: Record<Outcome, number>;
  /**
   * Waiting requests removed by queue shedding. They are also counted in outcomes.evicted,
   * so the conservation identities are unchanged.
   */
  shed: number;
  inputTokens: number;
  outputTokens: number;
}

export function emptyOutcomes(): Record<Outcome, number> {
  return { completed: 0, expired: 0, cancelled: 0, evicted: 0, upstream_error: 0 };
}

export function totalRejected(row: Pick<FlowCounters, 'rejected'>): number {
  let sum = 0;
  for (const count of Object.values(row.rejected)) sum += count ?? 0;
  return sum;
}

export function totalEnded(row: Pick<FlowCounters, 'outcomes'>): number {
  return OUTCOMES.reduce((sum, outcome) => sum + row.outcomes[outcome], 0);
}

/**
 * Checks offered = admitted + rejected (always, per row) and admitted = completed + expired
 * + cancelled + evicted + upstream_error + live (pool-wide; live = requests still waiting or
 * in flight). Returns one message per violated identity, empty when all hold.
 */
export function conservationViolations(rows: readonly FlowCounters[], live: number): string[] {
  const violations: string[] = [];
  let admitted = 0;
  let ended = 0;
  for (const row of rows) {
    const rejected = totalRejected(row);
    if (row.offered !== row.admitted + rejected) {
      violations.push(
        `${row.tenant}/${row.sloClass}: offered ${row.offered} != admitted ${row.admitted} + rejected ${rejected}`,
      );
    }
    admitted += row.admitted;
    ended += totalEnded(row);
  }
  if (admitted !== ended + live) {
    violations.push(`pool: admitted ${admitted} != ended ${ended} + live ${live}`);
  }
  return violations;
}
