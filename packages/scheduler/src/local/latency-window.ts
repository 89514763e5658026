import { assertInteger } from '@fairgate/core';

/**
 * The in-process twin of `lat:<second>`: TTFT histogram bucket counts added to the current
 * second, kept for the retention, merged over a window of whole seconds.
 */
export class LatencyWindow {
  private readonly seconds = new Map<number, { expiresAt: number; counts: Map<number, number> }>();

  constructor(private readonly retentionMs: number) {}

  flush(counts: ReadonlyMap<number, number>, now: number): void {
    const second = Math.floor(now / 1000);
    let entry = this.seconds.get(second);
    for (const [bucket, count] of counts) {
      assertInteger('latency bucket', bucket, 0);
      assertInteger('latency count', count, 0);
      if (count === 0) continue;
      entry ??= { expiresAt: 0, counts: new Map() };
      entry.counts.set(bucket, (entry.counts.get(bucket) ?? 0) + count);
    }
    if (!entry) return;
    entry.expiresAt = now + this.retentionMs;
    this.seconds.set(second, entry);
    for (const [s, e] of this.seconds) if (e.expiresAt <= now) this.seconds.delete(s);
  }

  read(windowSeconds: number, now: number): Map<number, number> {
    assertInteger('seconds', windowSeconds, 1, 3_600);
    const current = Math.floor(now / 1000);
    const merged = new Map<number, number>();
    for (let second = current - windowSeconds + 1; second <= current; second += 1) {
      const entry = this.seconds.get(second);
      if (!entry || entry.expiresAt <= now) continue;
      for (const [bucket, count] of entry.counts) {
        merged.set(bucket, (merged.get(bucket) ?? 0) + count);
      }
    }
    return merged;
  }
}
