import { describe, expect, it } from 'vitest';
import { localShareBudget } from '../src/local-share.js';
import { OutageMonitor } from '../src/redis-outage.js';

describe('localShareBudget: floor(budget / live replicas)', () => {
  it.each([
    [30, 3, 10],
    [30, 4, 7],
    [31, 3, 10],
    [5, 1, 5],
    [5, 0, 5], // no live replica in the view (only this one starting): all of it
    [2, 3, 0], // fewer slots than replicas: no share (the replica then queues and expires)
    [0, 2, 0],
  ])('budget %i over %i live replicas -> %i', (budget, liveReplicas, share) => {
    expect(localShareBudget({ budget, liveReplicas })).toBe(share);
  });
});

describe('OutageMonitor', () => {
  it('enters and leaves once per outage and probes until Redis answers', async () => {
    const events: string[] = [];
    let answers = false;
    let probes = 0;
    const monitor = new OutageMonitor({
      mode: 'reject',
      probeEveryMs: 5,
      probe: async () => {
        probes += 1;
        if (!answers) throw new Error('Connection is closed.');
      },
      onEnter: (reason) => events.push(`enter ${reason}`),
      onLeave: () => events.push('leave'),
    });
    monitor.reachable(); // up already: nothing happens
    monitor.unreachable('enqueue: Command timed out');
    monitor.unreachable('poll: Command timed out'); // same outage
    expect(monitor.down).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(monitor.down).toBe(true);
    expect(probes).toBeGreaterThan(1);
    answers = true;
    await expect.poll(() => monitor.down, { timeout: 1_000, interval: 5 }).toBe(false);
    const probesAfter = probes;
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(probes).toBe(probesAfter); // no probing while up
    expect(events).toEqual(['enter enqueue: Command timed out', 'leave']);
    monitor.unreachable('again');
    monitor.reachable();
    expect(events).toHaveLength(4);
    monitor.close();
  });
});
