import { request as httpRequest } from 'node:http';
import { isOpenAIErrorBody } from '@fairgate/openai';
import { TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningGateway } from '../src/index.js';
import { type GatewayStack, startGatewayStack } from './fixture.js';

/**
 * The generation endpoints are served on the Node request before Hono routes
 * anything (app.ts); a query string sends the same request through Hono. Both
 * must answer alike: status, body shape and the x-request-id /
 * x-fairgate-queue-ms headers, on success and on errors.
 */
const good = { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
const auth = { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' };

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** node:http, so that a header can be sent twice. */
function post(
  url: string,
  headers: Record<string, string | string[]>,
  body: string,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        text += chunk;
      });
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('generation on the direct Node path and through Hono', () => {
  let stack: GatewayStack;
  let gateway: RunningGateway;

  beforeAll(async () => {
    stack = await startGatewayStack({
      replicaId: 'direct-path',
      config: { limits: { max_body_bytes: 1_024 } },
    });
    ({ gateway } = stack);
  });
  afterAll(() => stack?.close());

  it.each([
    ['direct', ''],
    ['hono', '?via=hono'],
  ])('%s: answers with the completion, the request id and the queue time', async (_path, query) => {
    const answer = await post(
      `${gateway.url}/v1/chat/completions${query}`,
      { ...auth, 'x-request-id': 'client-id-1' },
      JSON.stringify(good),
    );
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toMatch(/^application\/json/);
    expect(answer.headers['x-request-id']).toBe('client-id-1');
    expect(Number(answer.headers['x-fairgate-queue-ms'])).toBeGreaterThanOrEqual(0);
    expect(JSON.parse(answer.body).usage.completion_tokens).toBe(2);
  });

  it.each([
    ['direct', ''],
    ['hono', '?via=hono'],
  ])(
    '%s: errors carry the OpenAI shape, a fresh request id and queue time 0',
    async (_path, query) => {
      const url = `${gateway.url}/v1/chat/completions${query}`;
      const cases: Array<[Record<string, string | string[]>, string, number]> = [
        [{ 'content-type': 'application/json' }, JSON.stringify(good), 401],
        [
          { ...auth, authorization: [auth.authorization, auth.authorization] }, // repeated: not one key
          JSON.stringify(good),
          401,
        ],
        [{ ...auth, 'x-request-id': 'bad id with spaces' }, '{not json', 400],
        [
          auth,
          JSON.stringify({ ...good, messages: [{ role: 'user', content: 'x'.repeat(2_000) }] }),
          413,
        ],
      ];
      for (const [headers, body, status] of cases) {
        const answer = await post(url, headers, body);
        expect(answer.status).toBe(status);
        expect(isOpenAIErrorBody(JSON.parse(answer.body))).toBe(true);
        expect(answer.headers['content-type']).toMatch(/^application\/json/);
        expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
        expect(answer.headers['x-fairgate-queue-ms']).toBe('0');
      }
    },
  );

  it('streams on the direct path with both headers', async () => {
    const response = await fetch(`${gateway.url}/v1/completions`, {
      method: 'POST',
      headers: { ...auth, 'x-request-id': 'stream-1' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'hi', max_tokens: 3, stream: true }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(response.headers.get('x-request-id')).toBe('stream-1');
    expect(response.headers.get('x-fairgate-queue-ms')).not.toBeNull();
    const text = await response.text();
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(text).not.toContain('"usage":{'); // not asked for: hidden
  });

  it('leaves other methods and paths to Hono', async () => {
    const get = await fetch(`${gateway.url}/v1/chat/completions`);
    expect(get.status).toBe(404);
    expect(get.headers.get('x-request-id')).not.toBeNull();
    expect(isOpenAIErrorBody(await get.json())).toBe(true);
  });
});
