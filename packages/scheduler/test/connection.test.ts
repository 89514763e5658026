import { Worker } from 'node:worker_threads';
import { type RedisHandle, startRedis } from '@fairgate/testkit';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createRedisConnection } from '../src/index.js';

/**
 * createRedisConnection's write coalescing, against a real redis-server behind a TCP relay
 * that counts the client's socket writes as they reach it: the relay runs in a worker
 * thread (its own event loop, blocked in epoll, reads each write as it lands; in this
 * thread it would only read once the test yields, after every write). The commands sent in
 * one turn of the event loop while the connection awaits replies leave in one write (one
 * sent on an idle connection leaves at once), and each still gets its own reply, in order.
 */
const RELAY = `
const { parentPort, workerData } = require('node:worker_threads');
const net = require('node:net');
const relay = net.createServer((client) => {
  const server = net.createConnection(workerData.port, workerData.host);
  client.on('data', (chunk) => {
    parentPort.postMessage(chunk.length);
    server.write(chunk);
  });
  server.pipe(client);
  client.on('close', () => server.destroy());
  server.on('close', () => client.destroy());
});
relay.listen(0, '127.0.0.1', () => parentPort.postMessage({ port: relay.address().port }));
`;

let redis: RedisHandle;
let relay: Worker;
let relayUrl: string;
/** Sizes of the reads the relay got from its client, in arrival order. */
const reads: number[] = [];

beforeAll(async () => {
  redis = await startRedis();
  const target = new URL(redis.url);
  relay = new Worker(RELAY, {
    eval: true,
    workerData: { host: target.hostname, port: Number(target.port) },
  });
  relayUrl = await new Promise<string>((resolve) => {
    relay.on('message', (message: number | { port: number }) => {
      if (typeof message === 'number') reads.push(message);
      else resolve(`redis://127.0.0.1:${message.port}`);
    });
  });
});

afterAll(async () => {
  await relay.terminate();
  await redis.stop();
});

/** Lets the relay's messages for what was sent so far arrive. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

it('sends the commands of one event-loop turn in one write, each with its own reply', async () => {
  const connection = createRedisConnection({
    topology: { kind: 'standalone', url: relayUrl },
    commandTimeoutMs: 5_000,
  }) as Redis;
  try {
    await connection.ping(); // connected and ready
    await settle();
    reads.length = 0;
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
    // 50 commands, two writes: the first alone, then 49 in one (at most one read more
    // should the kernel split the second).
    await settle();
    expect(reads.length).toBeGreaterThanOrEqual(2);
    expect(reads.length).toBeLessThanOrEqual(3);

    // Commands of different turns are not held back for one another.
    reads.length = 0;
    for (let i = 0; i < 3; i++) await connection.get('coalesce:counter');
    await settle();
    expect(reads.length).toBe(3);
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
  const connection = createRedisConnection({
    topology: { kind: 'standalone', url: own.url },
    commandTimeoutMs: 200,
  }) as Redis;
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
