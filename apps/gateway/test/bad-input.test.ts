import { connect } from 'node:net';
import { isOpenAIErrorBody } from '@fairgate/openai';
import { type AppHandle, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningGateway } from '../src/index.js';
import { type GatewayStack, startGatewayStack } from './fixture.js';

const LIMIT = 1_024;

async function simRequests(sim: AppHandle): Promise<number> {
  const body = (await (await fetch(`${sim.url}/debug/stats`)).json()) as {
    requests_received?: number;
  };
  if (typeof body.requests_received !== 'number')
    throw new Error('sim does not report requests_received');
  return body.requests_received;
}

/** Sends raw bytes and returns the status code and body of the answer. */
function rawRequest(port: number, text: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' });
    let data = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => {
      data += chunk;
    });
    socket.on('error', reject);
    socket.on('close', () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(data)?.[1] ?? 0);
      resolve({ status, body: data.slice(data.indexOf('\r\n\r\n') + 4) });
    });
    socket.write(text);
    setTimeout(() => socket.end(), 300);
  });
}

const good = { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
const auth = { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' };

interface Row {
  name: string;
  send: (url: string) => Promise<Response>;
  status: number;
  code?: string;
  param?: string;
}

const post =
  (path: string, body: string, headers: Record<string, string> = auth) =>
  (url: string) =>
    fetch(`${url}${path}`, { method: 'POST', headers, body });

const rows: Row[] = [
  {
    name: 'invalid JSON',
    send: post('/v1/chat/completions', '{"model":'),
    status: 400,
    code: 'invalid_json',
  },
  {
    name: 'missing model',
    send: post('/v1/chat/completions', JSON.stringify({ messages: good.messages })),
    status: 400,
    param: 'model',
  },
  {
    name: 'messages of the wrong type',
    send: post('/v1/chat/completions', JSON.stringify({ ...good, messages: 'hi' })),
    status: 400,
    param: 'messages',
  },
  {
    name: 'max_tokens of the wrong type',
    send: post('/v1/chat/completions', JSON.stringify({ ...good, max_tokens: '2' })),
    status: 400,
    param: 'max_tokens',
  },
  {
    name: 'completions without prompt',
    send: post('/v1/completions', JSON.stringify({ model: 'sim-model' })),
    status: 400,
    param: 'prompt',
  },
  {
    name: 'a body that is not an object',
    send: post('/v1/chat/completions', '[1,2,3]'),
    status: 400,
  },
  {
    name: 'body over the limit with Content-Length',
    send: post('/v1/chat/completions', JSON.stringify({ ...good, pad: 'x'.repeat(LIMIT) })),
    status: 413,
    code: 'payload_too_large',
  },
  {
    name: 'body over the limit, chunked (no Content-Length)',
    send: (url) => {
      const bytes = new TextEncoder().encode(JSON.stringify({ ...good, pad: 'x'.repeat(LIMIT) }));
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          for (let at = 0; at < bytes.length; at += 100)
            controller.enqueue(bytes.subarray(at, at + 100));
          controller.close();
        },
      });
      return fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: auth,
        body,
        duplex: 'half',
      } as RequestInit);
    },
    status: 413,
    code: 'payload_too_large',
  },
  {
    name: 'an unknown API key',
    send: post('/v1/chat/completions', JSON.stringify(good), {
      authorization: 'Bearer not-a-key',
      'content-type': 'application/json',
    }),
    status: 401,
    code: 'invalid_api_key',
  },
  {
    name: 'no Authorization header',
    send: post('/v1/chat/completions', JSON.stringify(good), {
      'content-type': 'application/json',
    }),
    status: 401,
  },
  {
    name: 'an unknown SLO class header',
    send: post('/v1/chat/completions', JSON.stringify(good), {
      ...auth,
      'x-slo-class': 'platinum',
    }),
    status: 400,
    param: 'x-slo-class',
  },
  {
    name: 'embeddings without input',
    send: post('/v1/embeddings', JSON.stringify({ model: 'sim-model' }), auth),
    status: 400,
    param: 'input',
  },
  {
    name: 'a rerank without documents',
    send: post('/v1/rerank', JSON.stringify({ model: 'sim-model', query: 'q' }), auth),
    status: 400,
    param: 'documents',
  },
  {
    name: 'a detokenize of text',
    send: post('/detokenize', JSON.stringify({ model: 'sim-model', tokens: ['a'] }), auth),
    status: 400,
    param: 'tokens.0',
  },
  {
    name: 'an unknown route',
    send: post('/v1/fine_tuning/jobs', JSON.stringify(good)),
    status: 404,
    code: 'unknown_url',
  },
  { name: 'a wrong method', send: (url) => fetch(`${url}/v1/chat/completions`), status: 404 },
];

describe('bad input is refused precisely and never reaches a pod', () => {
  let stack: GatewayStack;
  let sim: AppHandle;
  let gateway: RunningGateway;

  beforeAll(async () => {
    stack = await startGatewayStack({
      replicaId: 'bad-input',
      simArgs: { 'alpha-ms': 1 },
      config: { limits: { max_body_bytes: LIMIT } },
    });
    ({ sim, gateway } = stack);
  });
  afterAll(() => stack?.close());

  it.each(rows)('$name -> $status', async (row) => {
    const before = await simRequests(sim);
    const response = await row.send(gateway.url);
    expect(response.status).toBe(row.status);
    const body = (await response.json()) as {
      error: { code: string | null; param: string | null };
    };
    expect(isOpenAIErrorBody(body)).toBe(true);
    if (row.code) expect(body.error.code).toBe(row.code);
    if (row.param) expect(body.error.param).toBe(row.param);
    expect(response.headers.get('x-request-id')).toBeTruthy();
    expect(await simRequests(sim)).toBe(before);
  });

  it('a header value with CR/LF -> 400 in the OpenAI shape', async () => {
    const before = await simRequests(sim);
    const payload = JSON.stringify(good);
    const { status, body } = await rawRequest(
      gateway.port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TEST_KEYS.paying}\r\n` +
        `X-Evil: a\rb\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\n\r\n${payload}`,
    );
    expect(status).toBe(400);
    expect(isOpenAIErrorBody(JSON.parse(body))).toBe(true);
    expect(await simRequests(sim)).toBe(before);
  });

  it('the same good request still works (the table is not vacuous)', async () => {
    const before = await simRequests(sim);
    const response = await post('/v1/chat/completions', JSON.stringify(good))(gateway.url);
    expect(response.status).toBe(200);
    expect(await simRequests(sim)).toBe(before + 1);
  });
});
