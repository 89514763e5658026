import type { Notice, Scheduler } from '@fairgate/scheduler';
import { afterEach, describe, expect, it } from 'vitest';
import { GrantBroker } from '../src/slot/grant-broker.js';
import { HeldLeases } from '../src/slot/held-leases.js';

/**
 * The broker against a scripted scheduler: poll() hands out the queued notices, so a test
 * decides which notice is processed before a request's enqueue answer is.
 */
function scripted() {
  const pending: Notice[] = [];
  const released: string[] = [];
  const scheduler = {
    poll: async () => pending.splice(0),
    waitForNotices: () => new Promise<Notice[]>(() => {}), // never wakes: poll drives
    heartbeat: async () => ({ lost: [] }),
    release: async (id: string) => {
      released.push(id);
      return { was: 'granted' as const };
    },
  } as unknown as Scheduler;
  const leases = new HeldLeases({ scheduler, replica: 'r1', heartbeatMs: 60_000 });
  return { scheduler, leases, pending, released };
}

let broker: GrantBroker | undefined;
afterEach(() => broker?.close());

describe('GrantBroker', () => {
  it.each([
    ['grant', { kind: 'grant', id: 'b', pod: 'pod-a' } as Notice, 'pod-a'],
    ['expiry', { kind: 'expired', id: 'b' } as Notice, 'queue_ttl'],
  ])(
    'delivers a %s processed before the enqueue answer to the request registered with expect()',
    async (_kind, notice, outcome) => {
      const { scheduler, leases, pending, released } = scripted();
      broker = new GrantBroker({ scheduler, leases, replica: 'r1', tickMs: 1 });
      // 'a' waits already, so the 1 ms poll runs; 'b' is registered, its enqueue "in flight".
      const a = broker.expect('a');
      void broker.waitForGrant('a', a).catch(() => {});
      const b = broker.expect('b');
      pending.push(notice);
      await new Promise((resolve) => setTimeout(resolve, 20)); // polls deliver b's notice now
      const result = await broker.waitForGrant('b', b).then(
        (pod) => pod,
        (error: { code?: string; headers?: Record<string, string> }) =>
          error.headers?.['x-fairgate-drop-reason'] ?? error.code,
      );
      expect(result).toBe(outcome);
      expect(released).toEqual([]);
      broker.forget('a');
    },
  );

  it('releases a grant nobody waits for (the request was forgotten)', async () => {
    const { scheduler, leases, pending, released } = scripted();
    broker = new GrantBroker({ scheduler, leases, replica: 'r1', tickMs: 1 });
    const a = broker.expect('a');
    void broker.waitForGrant('a', a).catch(() => {});
    void broker.expect('b');
    broker.forget('b');
    pending.push({ kind: 'grant', id: 'b', pod: 'pod-a' });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(released).toEqual(['b']);
    broker.forget('a');
  });
});
