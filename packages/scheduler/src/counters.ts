import {
  emptyOutcomes,
  type FlowCounters,
  isOutcome,
  type RejectCode,
  type TenantId,
} from '@fairgate/core';
import { rejectionOf } from './codes.js';

/**
 * Counter fields, the same in Redis (the stats hash) and in LocalScheduler:
 * '<counter>|<tenant>|<class>' where counter is admitted, an outcome, shed, inputTokens or
 * outputTokens, and 'rejected|<tenant>|<class>|<script code>' for rejections.
 *
 * `offered` is not stored: every counted arrival is either admitted or rejected with one
 * code, in the same call, so offered = admitted + the rejections. Deriving it saves the
 * enqueue one HINCRBY. Releases before that change also wrote 'offered|...' fields; they
 * kept the same sum, so those fields are ignored.
 */
export function counterField(counter: string, tenant: TenantId, sloClass: string): string {
  return `${counter}|${tenant}|${sloClass}`;
}

export function rejectionField(tenant: TenantId, sloClass: string, code: number): string {
  return `rejected|${tenant}|${sloClass}|${code}`;
}

export function countersFromFields(fields: Iterable<readonly [string, number]>): FlowCounters[] {
  const rows = new Map<string, FlowCounters>();
  for (const [field, value] of fields) {
    const [counter, tenant, sloClass, code] = field.split('|');
    if (counter === undefined || tenant === undefined || sloClass === undefined) continue;
    const key = `${tenant}|${sloClass}`;
    let row = rows.get(key);
    if (!row) {
      row = {
        tenant,
        sloClass,
        offered: 0,
        admitted: 0,
        rejected: {},
        outcomes: emptyOutcomes(),
        shed: 0,
        inputTokens: 0,
        outputTokens: 0,
      };
      rows.set(key, row);
    }
    if (counter === 'rejected') {
      const reason: RejectCode | undefined = rejectionOf(Number(code));
      if (reason) row.rejected[reason] = (row.rejected[reason] ?? 0) + value;
    } else if (
      counter === 'admitted' ||
      counter === 'shed' ||
      counter === 'inputTokens' ||
      counter === 'outputTokens'
    ) {
      row[counter] += value;
    } else if (isOutcome(counter)) {
      row.outcomes[counter] += value;
    }
  }
  for (const row of rows.values()) {
    row.offered = row.admitted;
    for (const count of Object.values(row.rejected)) row.offered += count ?? 0;
  }
  return [...rows.values()].sort(
    (a, b) => compareBytes(a.tenant, b.tenant) || compareBytes(a.sloClass, b.sloClass),
  );
}

export function compareBytes(a: string, b: string): number {
  if (a === b) return 0;
  return a < b ? -1 : 1;
}
