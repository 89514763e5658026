import { draining } from './errors.js';
import type { SlotAbort } from './upstream/slot-abort.js';

/**
 * Abort reason of an in-flight request still running when the drain timeout ends: the
 * client gets 503 `draining` (or, mid-stream, an SSE error event with that code) and the
 * lease is released as cancelled.
 */
export class DrainAborted extends Error {
  constructor(message = 'the gateway replica shut down before the request finished') {
    super(message);
    this.name = 'DrainAborted';
  }
}

/** One generation request from its arrival to its end (see Drain.enter). */
export interface DrainTicket {
  /** Its slot once granted: aborted if it still runs when the drain timeout ends. */
  hold(slot: SlotAbort): void;
  /** It ended (answered, failed or released); idempotent. */
  leave(): void;
}

/** What a Drain and its tickets share. */
interface DrainState {
  cut: boolean;
  readonly active: Set<Ticket>;
  onIdle: Array<() => void>;
}

/**
 * A request's ticket: one small object per request with its methods on the prototype (two
 * closures and their context per request cost more to every waiting request).
 */
class Ticket implements DrainTicket {
  slot: SlotAbort | undefined = undefined;

  constructor(private readonly state: DrainState) {}

  hold(slot: SlotAbort): void {
    this.slot = slot;
    if (this.state.cut) slot.abort(new DrainAborted());
  }

  leave(): void {
    const state = this.state;
    if (!state.active.delete(this) || state.active.size > 0) return;
    const waiting = state.onIdle;
    state.onIdle = [];
    for (const resolve of waiting) resolve();
  }
}

/**
 * The replica's shutdown state and its generation requests in progress. Every request
 * enters on arrival (refused with 503 `draining` once the drain began) and leaves when it
 * ends, so the drain knows exactly when nothing runs any more — including requests still
 * reading their body or waiting for their enqueue's answer, which the grant broker does not
 * see yet.
 */
export class Drain {
  #draining = false;
  readonly #state: DrainState = { cut: false, active: new Set(), onIdle: [] };

  /** True from SIGTERM on: /readyz answers 503 and new requests are refused. */
  get draining(): boolean {
    return this.#draining;
  }

  /** Generation requests in progress on this replica. */
  get active(): number {
    return this.#state.active.size;
  }

  /** Admits a request, or throws 503 `draining` once the drain began. */
  enter(): DrainTicket {
    if (this.#draining) throw draining();
    const ticket = new Ticket(this.#state);
    this.#state.active.add(ticket);
    return ticket;
  }

  /** The drain begins: new requests are refused from now on. */
  begin(): void {
    this.#draining = true;
  }

  /** Resolves once no request is in progress, or after `timeoutMs`; true when idle. */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.#state.active.size === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.#state.onIdle = this.#state.onIdle.filter((fn) => fn !== done);
        resolve(false);
      }, timeoutMs);
      this.#state.onIdle.push(done);
    });
  }

  /**
   * The drain timeout ended: aborts every granted request still running (and any granted
   * later); returns how many were aborted. Their release follows as each one unwinds.
   */
  cut(): number {
    this.#draining = true;
    this.#state.cut = true;
    let aborted = 0;
    for (const entry of this.#state.active) {
      if (entry.slot && !entry.slot.aborted) {
        entry.slot.abort(new DrainAborted());
        aborted += 1;
      }
    }
    return aborted;
  }
}
