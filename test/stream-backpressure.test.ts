import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type AppHandle,
  startGatewayProcess,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rssKb } from './support/proc.js';

/**
 * Backpressure through the gateway's stream relay (request/relay.ts), end to end with real
 * processes: a real HTTP upstream that writes a 128 MB event stream only as fast as its
 * socket takes it (it waits for 'drain'), one gateway process (embedded scheduler), and a
 * client that reads nothing for 3 s. The gateway must stop reading the pod when the client
 * stops reading: the upstream gets only as far as the socket buffers on the way allow
 * (a few MB on loopback), not the whole stream, and the gateway's memory does not grow by
 * the stream's size. Then the client reads to the end and gets every event, in order.
 */
const EVENTS = 64_000;
const PAD = 'x'.repeat(2_000);
const event = (i: number) =>
  `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${i} ${PAD}"},"finish_reason":null}]}\n\n`;
let STREAM_BYTES = 0;
for (let i = 0; i < EVENTS; i++) STREAM_BYTES += event(i).length;

let upstream: Server;
let written = 0;
let gateway: AppHandle;

/** Writes the events, each only after the socket took the previous ones (honours 'drain'). */
function writeStream(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let i = 0;
  const more = () => {
    while (i < EVENTS) {
      const frame = event(i++);
      written += frame.length;
      if (!res.write(frame)) {
        res.once('drain', more);
        return;
      }
    }
    res.end('data: [DONE]\n\n');
  };
  more();
}

/** A short completions stream in one write, `[DONE]` included (content-length framed). */
function writeWhole(res: ServerResponse): void {
  const text = (t: string) =>
    `data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":"${t}","finish_reason":null}],"usage":null}\n\n`;
  const usage = `data: {"id":"c","object":"text_completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}\n\n`;
  const body = Buffer.from(`${text('a')}${text('b')}${usage}data: [DONE]\n\n`);
  res.writeHead(200, { 'content-type': 'text/event-stream', 'content-length': body.length });
  res.end(body);
}

beforeAll(async () => {
  upstream = createServer((req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(req.url === '/health' ? 200 : 404).end(); // health checks, metric scrapes
      return;
    }
    req.resume();
    req.once('end', () => (req.url === '/v1/completions' ? writeWhole(res) : writeStream(res)));
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const { port } = upstream.address() as AddressInfo;
  gateway = await startGatewayProcess({
    config: writeGatewayConfig({
      budget: 4,
      pods: [{ name: 'pod-a', url: `http://127.0.0.1:${port}` }],
      upstream: { body_timeout_ms: 60_000, keepalive_connections: 2 },
    }),
    replicaId: 'backpressure',
  });
}, 60_000);

afterAll(async () => {
  await stopAll();
  await new Promise((resolve) => upstream.close(resolve));
});

describe('a client that stops reading a stream', () => {
  it('stops the upstream read (bounded buffering), then gets every event when it reads again', async () => {
    const idleRss = rssKb(gateway.pid!);
    const { port, hostname } = new URL(gateway.url);
    const body = JSON.stringify({
      model: 'sim-model',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest(
        {
          host: hostname,
          port,
          method: 'POST',
          path: '/v1/chat/completions',
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${TEST_KEYS.paying}`,
          },
        },
        resolve,
      );
      req.once('error', reject);
      req.end(body);
    });
    expect(response.statusCode).toBe(200);
    response.pause(); // reads nothing: the kernel buffers fill, then the gateway's socket
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const stalledAt = written;
    const stalledRss = rssKb(gateway.pid!);
    console.log(
      `client paused 3 s: upstream wrote ${(stalledAt / 2 ** 20).toFixed(1)} MB of ${(STREAM_BYTES / 2 ** 20).toFixed(0)} MB; gateway RSS +${((stalledRss - idleRss) / 1024).toFixed(1)} MB`,
    );
    expect(stalledAt).toBeLessThan(STREAM_BYTES / 4);
    expect(stalledRss - idleRss).toBeLessThan(48 * 1024);

    let received = 0;
    let tail = '';
    let next = 0;
    let outOfOrder = 0;
    for await (const piece of response) {
      const text = tail + (piece as Buffer).toString('utf8');
      const events = text.split('\n\n');
      tail = events.pop()!;
      for (const e of events) {
        received += 1;
        if (e === 'data: [DONE]') continue;
        const n = Number(/"content":"(\d+) /.exec(e)?.[1]);
        if (n !== next) outOfOrder += 1;
        next = n + 1;
      }
    }
    expect(outOfOrder).toBe(0);
    expect(received).toBe(EVENTS + 1);
    expect(written).toBe(STREAM_BYTES);
  }, 60_000);

  it('hands every pod connection back when the whole stream, [DONE] included, came in one read', async () => {
    // With 2 pod connections, 60 streams in a row would hang on the third if a stream that
    // ended at [DONE] left its connection paused.
    for (let i = 0; i < 60; i++) {
      const response = await fetch(`${gateway.url}/v1/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${TEST_KEYS.paying}`,
        },
        body: JSON.stringify({ model: 'sim-model', prompt: 'hi', stream: true }),
        signal: AbortSignal.timeout(5_000),
      });
      const text = await response.text();
      expect(text).toContain('data: [DONE]');
      expect(text).not.toContain('usage');
    }
  }, 60_000);
});
