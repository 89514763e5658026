import type { ReplicaId } from '@fairgate/core';
import type { Notice } from '../contract.js';
import { parseNotice } from '../notices.js';
import type { RedisConnection } from './connection.js';

/** Most notices one BLMPOP (or a release's reply) takes off a replica's list. */
export const MAX_NOTICES_PER_POP = 1_000;

/** One replica's notices that reach this process without a poll. */
interface Inbox {
  /** Popped, not yet handed to a wait: the next wait (or poll) of the replica returns them. */
  readonly carried: Notice[];
  /** The waits attached to the outstanding BLMPOP, woken by what it or a release brings. */
  readonly waits: Set<(error?: unknown) => void>;
  /** Whether a BLMPOP for the replica is outstanding, and until when (performance.now()). */
  popping: boolean;
  popUntil: number;
}

/**
 * How a process receives its replicas' notices without polling (RedisScheduler's
 * waitForNotices): a BLMPOP of the replica's notice list on the blocking connection, which
 * stays outstanding across waits, and the notices a release's reply carries.
 *
 * A release made while a BLMPOP is outstanding names that replica, and lua/release-1.lua pops
 * the replica's list after its dispatch pass: when its pass granted this process's next
 * waiting request (a queue draining on one replica), the grant comes back in the release's
 * own reply, the list is empty again before Redis would serve the BLMPOP, and the BLMPOP stays
 * outstanding. Per grant that is no BLMPOP reply for Redis to write and the gateway to read,
 * and no new BLMPOP to send: ~10% of the gateway's CPU per waiting request in
 * `bench:waiting` on a 2-core VM. Notices made by
 * other replicas' passes still wake the BLMPOP.
 *
 * Every notice is popped off Redis's list once, by one of these or by a poll, and is handed
 * to a caller once: a release's notices and those of a BLMPOP that ends with no wait attached
 * are carried to the replica's next wait or poll (as they would have stayed in Redis's list).
 */
export class BlockingNotices {
  readonly #inboxes = new Map<ReplicaId, Inbox>();

  constructor(
    private readonly connection: () => RedisConnection,
    private readonly listKey: (replica: ReplicaId) => string,
  ) {}

  /** A replica with a BLMPOP outstanding: a release may pop its notices for it. */
  popping(): ReplicaId | undefined {
    for (const [replica, inbox] of this.#inboxes) if (inbox.popping) return replica;
    return undefined;
  }

  /** Whether notices made from now on reach this process without a poll of `replica`. */
  arriveFor(replica: ReplicaId): boolean {
    return this.#inboxes.get(replica)?.popping === true;
  }

  /** The notices popped for `replica` and not yet handed out (a poll returns them first). */
  takeCarried(replica: ReplicaId): Notice[] {
    const inbox = this.#inboxes.get(replica);
    return inbox ? inbox.carried.splice(0) : [];
  }

  /** Notices a release's reply popped off `replica`'s list (wire form): to its waits. */
  carry(replica: ReplicaId, wires: readonly unknown[]): void {
    if (wires.length === 0) return;
    const inbox = this.#inbox(replica);
    for (const wire of wires) inbox.carried.push(parseNotice(String(wire)));
    this.#wake(inbox);
  }

  /**
   * The replica's notices, waiting up to timeoutMs for the first: the carried ones at once,
   * else those of the outstanding BLMPOP (sent now if none is) or of a release, whichever
   * comes first. [] when none came in time.
   */
  wait(replica: ReplicaId, timeoutMs: number): Promise<Notice[]> {
    const inbox = this.#inbox(replica);
    if (inbox.carried.length > 0) return Promise.resolve(inbox.carried.splice(0));
    if (!inbox.popping) this.#pop(replica, inbox, timeoutMs);
    return new Promise<Notice[]>((resolve, reject) => {
      // Only a wait shorter than the outstanding BLMPOP needs its own timer.
      const timer =
        performance.now() + timeoutMs < inbox.popUntil
          ? setTimeout(() => settle(), timeoutMs)
          : undefined;
      const settle = (error?: unknown) => {
        if (timer) clearTimeout(timer);
        inbox.waits.delete(settle);
        if (error === undefined) resolve(inbox.carried.splice(0));
        else reject(error);
      };
      inbox.waits.add(settle);
    });
  }

  #inbox(replica: ReplicaId): Inbox {
    let inbox = this.#inboxes.get(replica);
    if (!inbox) {
      inbox = { carried: [], waits: new Set(), popping: false, popUntil: 0 };
      this.#inboxes.set(replica, inbox);
    }
    return inbox;
  }

  #pop(replica: ReplicaId, inbox: Inbox, timeoutMs: number): void {
    inbox.popping = true;
    inbox.popUntil = performance.now() + timeoutMs;
    // One round trip for the whole list (BLMPOP, Redis 7): the first notice is not held back
    // by a second read on the main connection.
    const popped = this.connection().call(
      'BLMPOP',
      timeoutMs / 1000,
      1,
      this.listKey(replica),
      'LEFT',
      'COUNT',
      MAX_NOTICES_PER_POP,
    ) as Promise<[string, string[]] | null>;
    popped.then(
      (reply) => {
        inbox.popping = false;
        try {
          for (const wire of reply?.[1] ?? []) inbox.carried.push(parseNotice(wire));
        } catch (error) {
          this.#wake(inbox, error);
          return;
        }
        this.#wake(inbox);
      },
      (error: unknown) => {
        inbox.popping = false;
        this.#wake(inbox, error);
      },
    );
  }

  /** Wakes the replica's waits: the first takes the carried notices, the rest get []. */
  #wake(inbox: Inbox, error?: unknown): void {
    for (const settle of [...inbox.waits]) settle(error);
  }
}
