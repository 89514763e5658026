import type { Socket } from 'node:net';
import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Command } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { markUrgent } from '../src/redis/connection.js';
import { gatewayConnection } from './support/connection.js';

let redis: RedisHandle;

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await redis.stop();
});

/**
 * Counts the writes a socket hands to the kernel: Node's stream calls `_write` for a chunk
 * written while nothing is buffered, and `_writev` once for everything a cork buffered
 * (one writev). Counted on the client's socket, not where the bytes land: how many reads a
 * receiver makes of two writes depends on when it gets a core (the kernel joins writes that
 * arrive before a read), which made an earlier version of this test, which counted reads at
 * a relay, fail under a loaded CI machine.
 */
function countWrites(socket: Socket): { writes: number[] } {
  const counted = { writes: [] as number[] };
  const stream = socket as Socket & {
    _write(chunk: unknown, encoding: string, callback: () => void): void;
    _writev(chunks: Array<{ chunk: unknown }>, callback: () => void): void;
  };
  const write = stream._write.bind(stream);
  const writev = stream._writev.bind(stream);
  stream._write = (chunk, encoding, callback) => {
    counted.writes.push(1);
    write(chunk, encoding, callback);
  };
  stream._writev = (chunks, callback) => {
    counted.writes.push(chunks.length);
    writev(chunks, callback);
  };
  return counted;
}

/**
 * createRedisConnection's write coalescing, against a real redis-server: the commands sent
 * in one turn of the event loop while the connection awaits replies leave in one write (one
 * sent on an idle connection leaves at once), and each still gets its own reply, in order.
 */
it('sends the commands of one event-loop turn in one write, each with its own reply', async () => {
  const connection = gatewayConnection(redis.url, 5_000);
  try {
    await connection.ping(); // connected and ready
    const counted = countWrites(connection.stream as Socket);
    const pending: Array<Promise<number>> = [];
    // The first command finds the connection idle (no reply awaited): it leaves at once,
    // the socket is not corked. The next ones, sent while it awaits its reply, are corked
    // until the check phase and leave together.
    pending.push(connection.incrby('coalesce:counter', 1));
    expect(connection.stream.writableCorked).toBe(0);
    for (let i = 1; i < 50; i++) pending.push(connection.incrby('coalesce:counter', i + 1));
    expect(connection.stream.writableCorked).toBe(1);
    const replies = await Promise.all(pending);
    // Each command got the counter after its own increment, in the order sent.
    const expected = Array.from({ length: 50 }, (_, i) => ((i + 1) * (i + 2)) / 2);
    expect(replies).toEqual(expected);
    // 50 commands, two writes: the first alone, then the other 49 in one writev.
    expect(counted.writes).toEqual([1, 49]);

    // Commands of different turns are not held back for one another: one write each.
    counted.writes.length = 0;
    for (let i = 0; i < 3; i++) await connection.get('coalesce:counter');
    expect(counted.writes).toEqual([1, 1, 1]);
  } finally {
    connection.disconnect();
  }
});

/**
 * An urgent command (markUrgent: the gateway's enqueues) is not held for the check phase:
 * it leaves at once with what the turn corked before it, in order, and the commands after
 * it are corked again until the check phase.
 */
it('sends an urgent command at once, with the commands corked before it', async () => {
  const connection = gatewayConnection(redis.url, 5_000);
  try {
    await connection.ping();
    const counted = countWrites(connection.stream as Socket);
    const incr = (by: number, urgent = false) => {
      const command = new Command('INCRBY', ['urgent:counter', by], { replyEncoding: 'utf8' });
      return connection.sendCommand(urgent ? markUrgent(command) : command) as Promise<unknown>;
    };
    const pending = [incr(1)]; // alone: the connection was idle
    pending.push(incr(2), incr(3), incr(4)); // corked
    expect(counted.writes).toEqual([1]);
    pending.push(incr(5, true)); // leaves now, with the three before it
    expect(counted.writes).toEqual([1, 4]);
    expect(connection.stream.writableCorked).toBe(1);
    pending.push(incr(6), incr(7)); // corked again until the check phase
    expect(counted.writes).toEqual([1, 4]);
    const replies = (await Promise.all(pending)).map(Number);
    expect(replies).toEqual([1, 3, 6, 10, 15, 21, 28]);
    expect(counted.writes).toEqual([1, 4, 2]);
  } finally {
    connection.disconnect();
  }
});

/**
 * The reply bound (one deadline queue per connection): a command with no reply after
 * commandTimeoutMs fails with "Command timed out", each exactly once, in send order; one
 * answered while this process could not run its timers (a busy event loop) is not failed,
 * since the decision waits for the I/O phase; answered commands are never failed later.
 */
it('fails unanswered commands after commandTimeoutMs, and only those', async () => {
  const own = await startRedis();
  const connection = gatewayConnection(own.url, 200);
  try {
    // Answered: none fails later.
    const answered = await Promise.all(Array.from({ length: 100 }, () => connection.ping()));
    expect(answered.every((reply) => reply === 'PONG')).toBe(true);

    // Answered while the client's event loop was blocked past the deadline.
    const late = connection.ping();
    const until = performance.now() + 400;
    while (performance.now() < until) {} // busy: Redis answers meanwhile, no timer runs
    await expect(late).resolves.toBe('PONG');

    // A stalled server: two bursts, each failed about commandTimeoutMs after it was sent.
    if (own.source !== 'redis-server') return; // REDIS_URL: a server this test cannot stop
    await own.pause();
    const outcome = (promise: Promise<unknown>, sent: number) =>
      promise.then(
        () => ({ ok: true, after: performance.now() - sent }),
        (error: Error) => ({ ok: false, message: error.message, after: performance.now() - sent }),
      );
    const firstSent = performance.now();
    const first = Array.from({ length: 50 }, (_, i) =>
      outcome(connection.incr(`t:${i}`), firstSent),
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    const secondSent = performance.now();
    const second = Array.from({ length: 20 }, () => outcome(connection.ping(), secondSent));
    const results = await Promise.all([...first, ...second]);
    for (const result of results) {
      expect(result).toMatchObject({ ok: false, message: 'Command timed out' });
      expect(result.after).toBeGreaterThanOrEqual(195);
      expect(result.after).toBeLessThan(2_000);
    }
    await own.resume();
  } finally {
    connection.disconnect();
    await own.stop();
  }
});
