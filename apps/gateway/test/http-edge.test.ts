import { connect, type Socket } from 'node:net';
import { type AppHandle, startSim, TEST_KEYS, writeGatewayConfig } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionsCheckingIntervalMs } from '../src/http-edge.js';
import { type RunningGateway, startGateway } from '../src/index.js';

/**
 * The HTTP edge's timeouts and connection limit (config `server`, docs/gateway.md, *The HTTP
 * edge*) on raw sockets against an in-process replica. Thousands of slow and idle clients:
 * test/slow-clients.test.ts.
 */

interface RawClient {
  socket: Socket;
  /** Everything the gateway sent. */
  received(): string;
  /** Resolves with ms from connect to the socket closing. */
  closed: Promise<number>;
}

function rawClient(port: number): Promise<RawClient> {
  return new Promise((resolve, reject) => {
    let text = '';
    let openedAt = 0;
    let markClosed: (ms: number) => void = () => {};
    const closed = new Promise<number>((done) => {
      markClosed = done;
    });
    const socket = connect(port, '127.0.0.1', () => {
      openedAt = performance.now();
      resolve({ socket, received: () => text, closed });
    });
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      text += chunk;
    });
    socket.on('error', () => {});
    socket.on('close', () => markClosed(performance.now() - openedAt));
    socket.once('error', reject);
  });
}

async function metric(gateway: RunningGateway, reason: string): Promise<number> {
  const text = await gateway.deps.metrics.registry.metrics();
  const match = new RegExp(
    `fairgate_connections_refused_total\\{[^}]*reason="${reason}"[^}]*\\} (\\d+)`,
  ).exec(text);
  return Number(match?.[1] ?? 0);
}

describe('HTTP edge: timeouts', () => {
  let sim: AppHandle;
  let gateway: RunningGateway;
  const HEADERS_MS = 500;
  const slack = connectionsCheckingIntervalMs(HEADERS_MS) + 400;

  beforeAll(async () => {
    sim = await startSim({
      args: { 'alpha-ms': 15, 'beta-ms': 0, 'gamma-ms': 0, model: 'sim-model' },
    });
    gateway = await startGateway({
      configPath: writeGatewayConfig({
        pods: [{ name: 'pod-a', url: sim.url }],
        sections: {
          server: {
            headers_timeout_ms: HEADERS_MS,
            request_timeout_ms: 1_000,
            keep_alive_timeout_ms: 700,
          },
        },
      }),
      port: 0,
      replicaId: 'edge-timeouts',
      log: () => {},
    });
  });
  afterAll(async () => {
    await gateway?.close(500);
    await sim?.stop();
  });

  it('closes a client that trickles its headers with 408 in the OpenAI shape, and counts it', async () => {
    const before = await metric(gateway, 'headers_timeout');
    const client = await rawClient(gateway.port);
    const line = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ';
    let i = 0;
    const trickle = setInterval(() => {
      if (!client.socket.destroyed) client.socket.write(line[i++ % line.length] ?? 'a');
    }, 100);
    const closedMs = await client.closed;
    clearInterval(trickle);
    expect(closedMs).toBeGreaterThanOrEqual(HEADERS_MS - 50);
    expect(closedMs).toBeLessThan(HEADERS_MS + slack);
    expect(client.received()).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(client.received()).toContain('"code":"request_timeout"');
    expect(await metric(gateway, 'headers_timeout')).toBe(before + 1);
  });

  it('closes a connection that sends nothing within the headers timeout', async () => {
    const client = await rawClient(gateway.port);
    const closedMs = await client.closed;
    expect(closedMs).toBeLessThan(HEADERS_MS + slack);
    expect(client.received()).toMatch(/^HTTP\/1\.1 408/);
  });

  it('closes a request whose body does not arrive within the request timeout', async () => {
    const before = await metric(gateway, 'request_timeout');
    const client = await rawClient(gateway.port);
    client.socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TEST_KEYS.paying}\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{"model":`,
    );
    const closedMs = await client.closed;
    expect(closedMs).toBeGreaterThanOrEqual(1_000 - 50);
    expect(closedMs).toBeLessThan(1_000 + slack);
    expect(await metric(gateway, 'request_timeout')).toBe(before + 1);
    // Nothing stays in progress (the aborted body read unwinds just after the close).
    const deadline = performance.now() + 1_000;
    while (gateway.deps.drain.active > 0 && performance.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(gateway.deps.drain.active).toBe(0);
  });

  it('never bounds the response: a stream runs past the request timeout', async () => {
    const startedAt = performance.now();
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 120,
        stream: true,
      }),
    });
    const body = await response.text();
    const tookMs = performance.now() - startedAt;
    expect(response.status).toBe(200);
    expect(tookMs).toBeGreaterThan(1_000 + slack);
    expect(body).toContain('data: [DONE]');
  });

  it('advertises the keep-alive timeout and closes an idle keep-alive connection after it (+1 s Node slack)', async () => {
    const client = await rawClient(gateway.port);
    client.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    const closedMs = await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 200/);
    expect(client.received().toLowerCase()).toContain('keep-alive: timeout=0');
    expect(closedMs).toBeGreaterThanOrEqual(700);
    expect(closedMs).toBeLessThan(700 + 1_000 + 500);
  });
});

describe('HTTP edge: connection limit', () => {
  let gateway: RunningGateway;
  afterAll(async () => {
    await gateway?.close(500);
  });

  it('closes connections over server.max_connections at accept and counts them', async () => {
    gateway = await startGateway({
      configPath: writeGatewayConfig({
        pods: [{ name: 'pod-a', url: 'http://127.0.0.1:9' }],
        sections: { server: { max_connections: 3 } },
      }),
      port: 0,
      replicaId: 'edge-limit',
      log: () => {},
    });
    const held = await Promise.all([0, 1, 2].map(() => rawClient(gateway.port)));
    const over = await rawClient(gateway.port);
    const closedMs = await over.closed;
    expect(closedMs).toBeLessThan(500);
    expect(over.received()).toBe('');
    expect(await metric(gateway, 'max_connections')).toBe(1);
    // The held ones are served.
    const first = held[0] as RawClient;
    first.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    await first.closed;
    expect(first.received()).toMatch(/^HTTP\/1\.1 200/);
    for (const client of held) client.socket.destroy();
  });
});
