import { readdirSync, readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { Worker } from 'node:worker_threads';
import {
  type AppHandle,
  startGatewayProcess,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate, percentile, SIM_MODEL, sleep } from './support/pool.js';
import { requireMachine } from './support/required-tools.js';

/**
 * The HTTP edge against slow and idle clients (docs/gateway.md, *The HTTP edge*), one
 * gateway process on the embedded scheduler in front of one sim:
 * - 2,000 connections trickle their headers one byte every 500 ms: the gateway answers each
 *   408 and closes it within server.headers_timeout_ms (2 s here) + 1 s of its first byte,
 *   while normal requests on other connections keep their p99 within 2x of the same
 *   requests on the idle gateway, measured just before;
 * - 5,000 idle keep-alive connections (each served one request): the gateway keeps serving
 *   a new connection and has descriptors to spare; they are all released at the end.
 * The trickling clients run in a worker thread, so their timers do not delay the latency
 * measurement on this thread. Every loop is bounded in count and time.
 */
const HEADERS_TIMEOUT_MS = 2_000;
const TRICKLERS = 2_000;
const IDLE = 5_000;

/** The soft open-files limit of a process (Linux /proc), undefined where unknown. */
function openFilesLimit(pid: number | 'self'): number | undefined {
  try {
    const line = readFileSync(`/proc/${pid}/limits`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const value = Number(line?.split(/\s{2,}/)[1]);
    return Number.isFinite(value) && value > 0 ? value : undefined;
  } catch {
    return undefined;
  }
}

function openFiles(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** One normal request (a 4-token chat completion); ms, or throws on a non-200. */
async function timedChat(url: string): Promise<number> {
  const result = await generate(url, TEST_KEYS.paying, { signal: AbortSignal.timeout(10_000) });
  if (result.status !== 200) throw new Error(`normal request answered ${result.status}`);
  return result.endMs;
}

/** Closed-loop latencies with `workers` clients until `stop()` says so (at most `max` each). */
async function measure(
  url: string,
  workers: number,
  stop: () => boolean,
  max = 2_000,
): Promise<number[]> {
  const samples: number[] = [];
  await Promise.all(
    Array.from({ length: workers }, async () => {
      for (let i = 0; i < max && !stop(); i++) samples.push(await timedChat(url));
    }),
  );
  return samples;
}

/** A chat completion on a fresh connection (no pooled keep-alive socket). */
function chatOnNewConnection(port: number): Promise<number> {
  const body = JSON.stringify({
    model: SIM_MODEL,
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 4,
  });
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/v1/chat/completions',
        agent: false,
        timeout: 10_000,
        headers: {
          authorization: `Bearer ${TEST_KEYS.paying}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          connection: 'close',
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(body);
  });
}

interface TrickleResult {
  /** ms from the socket's first byte to its close. */
  closeMs: number[];
  /** Sockets whose first bytes from the gateway were a 408. */
  answered408: number;
  /** Sockets the gateway ended (FIN) or reset, not closed by the worker's bound. */
  closedByGateway: number;
  connectErrors: number;
  openMs: number;
  /** Up to 5 sockets the gateway had not closed by the worker's bound (for the message). */
  unclosed: { connectedAtMs: number | null; bytesSent: number; head: string }[];
}

/**
 * The trickling clients (a worker thread, CommonJS): opens `count` connections in batches,
 * sends the first header byte at connect and one more every `intervalMs` to each, and
 * reports when all are open and, at the end, how each closed. Bounded by `boundMs`. Each
 * client's next byte comes intervalMs after its previous one, at its own phase.
 */
const TRICKLE_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const net = require('node:net');
const { port, count, batch, intervalMs, boundMs } = workerData;
const line = 'POST /v1/chat/completions HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Trickle: ' + 'a'.repeat(100000);
const clients = [];
let closed = 0;
let finished = false;
const startedAt = performance.now();
function finish() {
  if (finished) return;
  finished = true;
  clearInterval(trickle);
  clearTimeout(bound);
  for (const c of clients) c.socket.destroy();
  parentPort.postMessage({
    kind: 'done',
    closeMs: clients.filter((c) => c.closedAt && c.firstByteAt && !c.destroyedByUs).map((c) => c.closedAt - c.firstByteAt),
    answered408: clients.filter((c) => c.head.startsWith('HTTP/1.1 408')).length,
    closedByGateway: clients.filter((c) => c.closedAt && !c.destroyedByUs).length,
    connectErrors: clients.filter((c) => c.connectError).length,
    openMs: openedAt - startedAt,
    unclosed: clients.filter((c) => c.destroyedByUs).slice(0, 5).map((c) => ({
      connectedAtMs: c.firstByteAt ? Math.round(c.firstByteAt - startedAt) : null,
      bytesSent: c.pos,
      head: c.head.slice(0, 16),
    })),
  });
}
function open() {
  return new Promise((resolve) => {
    const c = { socket: net.connect(port, '127.0.0.1'), firstByteAt: 0, closedAt: 0, head: '', pos: 0, destroyedByUs: false, connectError: false };
    clients.push(c);
    c.socket.setNoDelay(true);
    c.socket.on('connect', () => {
      c.firstByteAt = performance.now();
      c.socket.write(line[c.pos++]);
      resolve();
    });
    c.socket.on('data', (d) => { if (c.head.length < 16) c.head += d.toString('latin1'); });
    c.socket.on('error', () => { if (!c.firstByteAt) { c.connectError = true; resolve(); } });
    c.socket.on('close', () => {
      if (!c.closedAt) c.closedAt = performance.now();
      closed += 1;
      if (closed === count) finish();
    });
  });
}
// Each client writes one byte every intervalMs, at its own phase (independent clients are
// not synchronised): a tick every intervalMs / PHASES serves one phase's clients.
const PHASES = 20;
let tick = 0;
const trickle = setInterval(() => {
  const phase = tick++ % PHASES;
  for (let i = phase; i < clients.length; i += PHASES) {
    const c = clients[i];
    if (!c.closedAt && c.firstByteAt && !c.socket.destroyed && c.socket.writable) c.socket.write(line[c.pos++]);
  }
}, intervalMs / PHASES);
const bound = setTimeout(() => {
  for (const c of clients) if (!c.closedAt) c.destroyedByUs = true;
  finish();
}, boundMs);
let openedAt = 0;
(async () => {
  for (let i = 0; i < count; i += batch) {
    await Promise.all(Array.from({ length: Math.min(batch, count - i) }, open));
  }
  openedAt = performance.now();
  parentPort.postMessage({ kind: 'opened' });
})();
`;

function runTricklers(
  port: number,
  onOpened: () => void,
): { done: Promise<TrickleResult>; worker: Worker } {
  const worker = new Worker(TRICKLE_WORKER, {
    eval: true,
    workerData: { port, count: TRICKLERS, batch: 200, intervalMs: 500, boundMs: 20_000 },
  });
  const done = new Promise<TrickleResult>((resolve, reject) => {
    worker.on('message', (message: { kind: string } & TrickleResult) => {
      if (message.kind === 'opened') onOpened();
      else resolve(message);
    });
    worker.on('error', reject);
  });
  return { done, worker };
}

/** Opens `count` keep-alive connections, each served one GET /healthz, then left idle. */
async function openIdle(port: number, count: number, batch: number): Promise<Socket[]> {
  const sockets: Socket[] = [];
  for (let i = 0; i < count; i += batch) {
    await Promise.all(
      Array.from(
        { length: Math.min(batch, count - i) },
        () =>
          new Promise<void>((resolve, reject) => {
            const socket = connect(port, '127.0.0.1');
            sockets.push(socket);
            let head = '';
            socket.once('error', reject);
            socket.on('connect', () =>
              socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'),
            );
            const onData = (chunk: Buffer) => {
              head += chunk.toString('latin1');
              if (!head.includes('\r\n\r\n')) return;
              socket.off('data', onData);
              if (!head.startsWith('HTTP/1.1 200'))
                reject(new Error(`healthz: ${head.slice(0, 40)}`));
              else resolve();
            };
            socket.on('data', onData);
          }),
      ),
    );
  }
  return sockets;
}

describe('slow and idle clients at the HTTP edge (one gateway process, one sim)', () => {
  let sim: AppHandle;
  let gateway: AppHandle;

  beforeAll(async () => {
    sim = await startSim({
      args: { 'alpha-ms': 5, 'beta-ms': 0, 'gamma-ms': 0, model: SIM_MODEL },
    });
    const config = writeGatewayConfig({
      pods: [{ name: 'pod-a', url: sim.url }],
      budget: 64,
      sections: {
        server: { headers_timeout_ms: HEADERS_TIMEOUT_MS, keep_alive_timeout_ms: 60_000 },
      },
    });
    gateway = await startGatewayProcess({ config, replicaId: 'edge' });
  });
  afterAll(async () => {
    await stopAll();
  });

  it('closes 2,000 header tricklers within the headers timeout + 1 s; normal requests keep their p99', async () => {
    await measure(gateway.url, 3, () => false, 60); // warm
    // The timing criteria (every trickler closed within headers timeout + 1 s, p99 within
    // 2x) compare a few hundred samples on a 2-core machine that other test files share
    // (vitest runs two at once): a burst of theirs can land in one phase, or delay this
    // process's view of the closes. Each attempt measures its own baseline just before; up
    // to ATTEMPTS, the first that meets both passes. A gateway stalled by the tricklers
    // fails every attempt (closing them all in one event-loop turn, before the sliced close,
    // gave 2.1-3.2x over three attempts). Everything else holds on every attempt.
    const ATTEMPTS = 3;
    const verdicts: string[] = [];
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const baseline = await measure(gateway.url, 3, () => false, 150);
      let opened = false;
      const tricklers = runTricklers(gateway.port, () => {
        opened = true;
      });
      let trickleDone = false;
      void tricklers.done.then(() => {
        trickleDone = true;
      });
      const openDeadline = performance.now() + 15_000;
      while (!opened && performance.now() < openDeadline) await sleep(10);
      expect(opened).toBe(true);
      // Under the tricklers, through their 408s and closes.
      const loaded = await measure(gateway.url, 3, () => trickleDone, 2_000);
      const result = await tricklers.done;
      await tricklers.worker.terminate();

      const base99 = percentile(baseline, 99);
      const loaded99 = percentile(loaded, 99);
      const maxClose = Math.max(...result.closeMs);
      console.log(
        `attempt ${attempt}: tricklers: ${TRICKLERS} opened in ${result.openMs.toFixed(0)} ms, ${result.closedByGateway} closed by the gateway (${result.answered408} with 408), ` +
          `first byte -> close p50 ${percentile(result.closeMs, 50).toFixed(0)} ms, p99 ${percentile(result.closeMs, 99).toFixed(0)} ms, max ${maxClose.toFixed(0)} ms (headers timeout ${HEADERS_TIMEOUT_MS} ms); ` +
          `normal requests: idle p50 ${percentile(baseline, 50).toFixed(1)} / p99 ${base99.toFixed(1)} ms (${baseline.length}), ` +
          `under tricklers p50 ${percentile(loaded, 50).toFixed(1)} / p99 ${loaded99.toFixed(1)} ms (${loaded.length}): ratio ${(loaded99 / base99).toFixed(2)}`,
      );
      // CI's JSON report keeps no console output: the counts and the first sockets left open
      // go into the message.
      const counts = `connect errors ${result.connectErrors}, closed by the gateway ${result.closedByGateway}, 408s ${result.answered408}, opened in ${result.openMs.toFixed(0)} ms; not closed by the worker's bound: ${JSON.stringify(result.unclosed)}`;
      expect(result.connectErrors, counts).toBe(0);
      expect(result.closedByGateway, counts).toBe(TRICKLERS);
      expect(result.answered408, counts).toBe(TRICKLERS);
      expect(result.closeMs, counts).toHaveLength(TRICKLERS);
      expect(Math.min(...result.closeMs)).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_MS - 50);
      expect(loaded.length).toBeGreaterThan(50);
      const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
      const counted = Number(
        /fairgate_connections_refused_total\{[^}]*reason="headers_timeout"[^}]*\} (\d+)/.exec(
          metrics,
        )?.[1],
      );
      expect(counted).toBe(TRICKLERS * attempt);
      const closedInTime = maxClose <= HEADERS_TIMEOUT_MS + 1_000;
      const p99Kept = loaded99 <= 2 * base99;
      verdicts.push(
        `attempt ${attempt}: max close ${maxClose.toFixed(0)} ms, p99 ratio ${(loaded99 / base99).toFixed(2)}`,
      );
      if (closedInTime && p99Kept) break;
      if (attempt === ATTEMPTS) {
        throw new Error(`no attempt met both timing criteria: ${verdicts.join('; ')}`);
      }
    }
  }, 120_000);

  it('holds 5,000 idle keep-alive connections, keeps serving, and releases them', async (context) => {
    const ownLimit = openFilesLimit('self');
    const gatewayLimit = openFilesLimit(gateway.pid);
    // Both ends need a descriptor per connection (this process also holds vitest's own).
    const needed = IDLE + 500;
    const low = (ownLimit ?? needed) < needed || (gatewayLimit ?? needed) < needed;
    requireMachine(
      context,
      low
        ? `open-files limit ${ownLimit} (test) / ${gatewayLimit} (gateway) < ${needed}; raise ulimit -n`
        : undefined,
    );
    const before = openFiles(gateway.pid);
    const startedAt = performance.now();
    const sockets = await openIdle(gateway.port, IDLE, 250);
    const openMs = performance.now() - startedAt;
    let closedByGateway = 0;
    for (const socket of sockets) socket.once('close', () => (closedByGateway += 1));
    try {
      const held = openFiles(gateway.pid);
      const status = await chatOnNewConnection(gateway.port);
      const ready = await fetch(`${gateway.url}/readyz`);
      console.log(
        `idle: ${IDLE} keep-alive connections open in ${openMs.toFixed(0)} ms; gateway descriptors ${before} -> ${held} of ${gatewayLimit}; ` +
          `a new connection's request: ${status}; /readyz ${ready.status}`,
      );
      // (A few descriptors of the gateway's own come and go: pod health checks.)
      expect(held - before).toBeGreaterThanOrEqual(IDLE - 20);
      expect(held).toBeLessThan(gatewayLimit ?? Number.POSITIVE_INFINITY);
      expect(status).toBe(200);
      expect(ready.status).toBe(200);
      expect(closedByGateway).toBe(0);
    } finally {
      for (const socket of sockets) socket.destroy();
    }
    // The gateway lets go of them.
    const deadline = performance.now() + 10_000;
    while (openFiles(gateway.pid) > before + 50 && performance.now() < deadline) await sleep(50);
    expect(openFiles(gateway.pid)).toBeLessThanOrEqual(before + 50);
  }, 60_000);
});
