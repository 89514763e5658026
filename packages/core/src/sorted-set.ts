import { compareOrderKeys } from './order.js';

interface Entry {
  readonly score: number;
  readonly id: string;
}

/**
 * The in-process counterpart of a Redis sorted set: members ordered by (score, member
 * bytewise), as ZRANGE orders them, so LocalScheduler visits entries in the same order as
 * the scripts. Sorted array + index: O(log n) lookups, O(n) inserts, fine for queue sizes.
 */
export class SortedSet {
  private readonly entries: Entry[] = [];
  private readonly scores = new Map<string, number>();

  get size(): number {
    return this.entries.length;
  }

  score(member: string): number | undefined {
    return this.scores.get(member);
  }

  add(member: string, score: number): void {
    this.remove(member);
    const entry = { score, id: member };
    this.entries.splice(this.position(entry), 0, entry);
    this.scores.set(member, score);
  }

  remove(member: string): boolean {
    const score = this.scores.get(member);
    if (score === undefined) return false;
    this.entries.splice(this.position({ score, id: member }), 1);
    this.scores.delete(member);
    return true;
  }

  first(): { member: string; score: number } | undefined {
    const entry = this.entries[0];
    return entry && { member: entry.id, score: entry.score };
  }

  /** The member at rank `index` (ZRANGE index index WITHSCORES). */
  at(index: number): { member: string; score: number } | undefined {
    const entry = this.entries[index];
    return entry && { member: entry.id, score: entry.score };
  }

  /** Members with score <= maxScore, lowest first, at most `limit` (ZRANGEBYSCORE). */
  upTo(maxScore: number, limit: number): string[] {
    const out: string[] = [];
    for (const entry of this.entries) {
      if (entry.score > maxScore || out.length >= limit) break;
      out.push(entry.id);
    }
    return out;
  }

  /** The first `limit` members (ZRANGE 0 limit-1). */
  head(limit: number): string[] {
    return this.entries.slice(0, limit).map((entry) => entry.id);
  }

  entriesInOrder(): { member: string; score: number }[] {
    return this.entries.map((entry) => ({ member: entry.id, score: entry.score }));
  }

  /** Index of the first entry not less than `entry`. */
  private position(entry: Entry): number {
    let low = 0;
    let high = this.entries.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (compareOrderKeys(this.entries[mid] as Entry, entry) < 0) low = mid + 1;
      else high = mid;
    }
    return low;
  }
}
