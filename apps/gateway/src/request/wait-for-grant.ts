import type { EnqueueRequest } from '@fairgate/scheduler';
import type { Lane } from '../slot/lane.js';
import type { Admission } from './admit.js';
import type { Call } from './receive.js';

/**
 * Stage 3: t2, the grant. A request granted at enqueue passes straight through; a queued
 * one waits for its notice in the GrantBroker (slot/grant-broker.ts: the poll tick and the
 * blocking wake-up), which rejects with a 429 on queue TTL expiry or shedding. The client
 * leaving ends the wait with ClientGone and cancels the request in the scheduler.
 */
export interface Granted {
  readonly pod: string;
  readonly lane: Lane;
  /** How it was admitted (the broker re-registers it in a Redis that lost it). */
  readonly request: EnqueueRequest;
}

/** The client left while its request waited for a grant: the wait ends, nothing is sent. */
export class ClientGone extends Error {
  constructor() {
    super('the client closed the connection while its request waited');
    this.name = 'ClientGone';
  }
}

export async function waitForGrant(call: Call, admission: Admission): Promise<Granted> {
  if (admission.status === 'granted') return admission;
  const { lane, request, grant } = admission;
  const { id } = request;
  const stopCancelOnLeave = call.client.onLeave(() => {
    lane.broker.forget(id, new ClientGone());
    void lane.scheduler
      .cancel(id)
      .catch(() => call.pool.metrics.redisErrors.inc({ operation: 'cancel' }));
  });
  call.pool.metrics.waiting.inc();
  try {
    return { pod: await lane.broker.waitForGrant(id, grant, request), lane, request };
  } finally {
    call.pool.metrics.waiting.dec();
    stopCancelOnLeave();
  }
}
