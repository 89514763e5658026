import type { Scheduler } from '@fairgate/scheduler';
import type { GrantBroker } from './grant-broker.js';
import type { HeldLeases } from './held-leases.js';
import type { SlotRecycler } from './slot-recycler.js';

/**
 * Where a request's slot lives, from queued to released: the shared scheduler (the pool,
 * PoolRuntime), or the local share's during a Redis outage. Its queued requests wait in the
 * broker (queued → granted), its granted ones are held in the leases (granted → held), and
 * a finished one's slot may pass to the next request through the recycler (held → recycled).
 */
export interface Lane {
  scheduler: Scheduler;
  broker: GrantBroker;
  leases: HeldLeases;
  /** Slot recycling (the shared Redis lane only; scheduler.recycle_ms). */
  recycler?: SlotRecycler;
}
