import type { EnqueueRequest } from '@fairgate/scheduler';
import { Attr } from '@fairgate/telemetry';
import type { GatewayDeps } from '../context.js';
import { noHealthyPod, outcomeError, schedulerUnavailable } from '../errors.js';
import type { PoolRuntime } from '../pool-runtime.js';
import { limitMessage, rateLimitHeaders } from '../rate-limit-headers.js';
import { SchedulerUnavailable } from '../redis-outage.js';
import type { Lane } from '../slot/lane.js';
import { flatUuid } from '../uuid.js';
import type { Call } from './receive.js';

/**
 * Stage 2: the scheduler's answer at enqueue. Granted at once when there is room (the
 * uncontended path: one scheduler call, or none when the request takes a finished one's
 * slot: slot/slot-recycler.ts), queued (stage 3 waits for the grant), or refused
 * (thrown: the rejection's answer from core's outcome table). While Redis is
 * unreachable the request goes to this replica's local share (redis.on_outage:
 * local_share) or is answered 503 scheduler_unavailable at once.
 */
export type Admission =
  | {
      readonly status: 'granted';
      readonly pod: string;
      readonly lane: Lane;
      readonly request: EnqueueRequest;
    }
  | {
      readonly status: 'queued';
      readonly lane: Lane;
      readonly request: EnqueueRequest;
      /** The broker's promise of the pod (registered before the enqueue was sent). */
      readonly grant: Promise<string>;
    };

export async function admit(deps: GatewayDeps, call: Call): Promise<Admission> {
  const { pool } = call;
  if (!pool.pods.hasHealthyPod()) throw noHealthyPod();
  const { tenant, cls } = call;
  const request: EnqueueRequest = {
    id: flatUuid(),
    tenant: tenant.id,
    band: cls.priority,
    replica: deps.replica,
    sloClass: cls.sloClass,
    kvBlocks: cls.kvBlocks,
    inputTokens: cls.inputTokens,
    maxTokens: cls.maxTokens,
    ...(cls.bucketTokens > 0 ? { tokens: cls.bucketTokens } : {}),
    ...(cls.budgetTokens > 0 ? { budgetTokens: cls.budgetTokens } : {}),
    ...(call.prefix && call.prefix.length > 0 ? { prefix: call.prefix } : {}),
    ...(call.adapter !== undefined ? { adapter: call.adapter } : {}),
    ...(cls.deadlineMs !== undefined
      ? { deadlineMs: Math.max(0, cls.deadlineMs - call.nowMs) }
      : {}),
  };
  const shared: Lane = pool; // the pool's shared scheduler and its broker
  const lane = pool.outage?.down ? outageLane(pool) : shared;
  try {
    return await enqueue(lane, request, call);
  } catch (error) {
    if (lane !== shared || !(error instanceof SchedulerUnavailable)) throw error;
    // Redis went away during this enqueue: the outage mode decides, as for the next request.
    return enqueue(outageLane(pool), request, call);
  }
}

/** The lane of a request that arrives during an outage: the local share, or 503 at once. */
function outageLane(pool: PoolRuntime): Lane {
  const local = pool.outage?.localShare();
  if (!local) throw schedulerUnavailable();
  return local;
}

async function enqueue(lane: Lane, request: EnqueueRequest, call: Call): Promise<Admission> {
  // Slot recycling: a finished request's slot of this kind goes to the pod with no Redis
  // call first (the handover registers it in that slot meanwhile).
  const recycled = lane.recycler?.take(request, call.tenant.quotas.max_kv_blocks !== undefined);
  if (recycled !== undefined) {
    call.span.setAttribute(Attr.slotRecycled, true);
    // A limited tenant's headers: its standing at this replica's latest answer for it.
    const standing = request.budgetTokens ? lane.recycler?.standingOf(request.tenant) : undefined;
    if (standing) call.state.rateLimitHeaders = rateLimitHeaders(standing);
    return { status: 'granted', pod: recycled, lane, request };
  }
  const { id } = request;
  // Registered before the enqueue is sent: a poll's notice can arrive before its answer.
  const grant = lane.broker.expect(id);
  let result: Awaited<ReturnType<typeof lane.scheduler.enqueue>>;
  try {
    result = await lane.scheduler.enqueue(request);
  } catch (error) {
    lane.broker.forget(id);
    // A timed-out enqueue may still have run: cancel it (sent again once Redis is back).
    if (error instanceof SchedulerUnavailable && error.sent) {
      void lane.scheduler.cancel(id).catch(() => {});
    }
    throw error;
  }
  lane.recycler?.observe(result, request.tenant);
  // The tenant's budgets and rate: on this answer and every later one (relay, errors).
  if (result.limits) call.state.rateLimitHeaders = rateLimitHeaders(result.limits);
  if (result.status === 'queued') return { status: 'queued', lane, request, grant };
  lane.broker.forget(id);
  if (result.status === 'granted') return { status: 'granted', pod: result.pod, lane, request };
  const { tenant, cls } = call;
  throw outcomeError(result.code, {
    context: { tenant: tenant.id, sloClass: cls.sloClass, cost: cls.bucketTokens },
    refillMs: result.retryAfterMs,
    ...(result.limit
      ? { message: limitMessage(tenant, result.limit, result.retryAfterMs, Date.now()) }
      : {}),
  });
}
