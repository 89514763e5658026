import { assertInteger, assertValidName } from '@fairgate/core';
import type { Fence, LeadershipResult } from '../contract.js';

/**
 * The in-process twin of the `leader` PX key and `leader:epoch` counter: one holder until its
 * lease lapses, the epoch incremented on every new leadership, fences checked against both.
 */
export class LeaderLease {
  private holder: { replica: string; expiresAt: number } | null = null;
  private currentEpoch = 0;

  get epoch(): number {
    return this.currentEpoch;
  }

  leaderAt(now: number): string | null {
    return this.live(now)?.replica ?? null;
  }

  acquire(replica: string, ttlMs: number, now: number, epochFloor = 0): LeadershipResult {
    assertValidName('replica', replica);
    assertInteger('ttlMs', ttlMs, 1);
    assertInteger('epochFloor', epochFloor, 0);
    const holder = this.live(now);
    if (holder?.replica === replica) {
      holder.expiresAt = now + ttlMs;
      return { leader: true, epoch: this.currentEpoch };
    }
    if (holder) {
      return {
        leader: false,
        epoch: this.currentEpoch,
        holder: holder.replica,
        expiresInMs: holder.expiresAt - now,
      };
    }
    this.holder = { replica, expiresAt: now + ttlMs };
    this.currentEpoch = Math.max(this.currentEpoch, epochFloor) + 1;
    return { leader: true, epoch: this.currentEpoch };
  }

  renew(fence: Fence, ttlMs: number, now: number): boolean {
    assertInteger('ttlMs', ttlMs, 1);
    const holder = this.fenced(fence, now);
    if (holder) holder.expiresAt = now + ttlMs;
    return holder !== undefined;
  }

  release(fence: Fence, now: number): boolean {
    if (!this.fenced(fence, now)) return false;
    this.holder = null;
    return true;
  }

  /** Whether fence.replica holds the lease in the current epoch (every controller write). */
  holds(fence: Fence, now: number): boolean {
    return this.fenced(fence, now) !== undefined;
  }

  private live(now: number) {
    if (this.holder && this.holder.expiresAt <= now) this.holder = null;
    return this.holder;
  }

  private fenced(fence: Fence, now: number) {
    assertValidName('fence.replica', fence.replica);
    assertInteger('fence.epoch', fence.epoch, 1);
    const holder = this.live(now);
    return holder?.replica === fence.replica && fence.epoch === this.currentEpoch
      ? holder
      : undefined;
  }
}
