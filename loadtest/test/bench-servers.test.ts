import { stopAll } from '@fairgate/testkit';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workloadBody } from '../bench/harness/load.js';
import { startStaticUpstream, type Upstream } from '../bench/harness/stack.js';

/**
 * bench:overhead's baseline upstream over real HTTP: each workload's answer has the tokens
 * the bench checks every path for, in the shape vLLM sends.
 */
describe('static upstream', () => {
  let upstream: Upstream;

  beforeAll(async () => {
    upstream = await startStaticUpstream();
  }, 30_000);
  afterAll(() => stopAll());

  async function post(body: string) {
    const res = await request(`${upstream.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    return {
      status: res.statusCode,
      type: String(res.headers['content-type']),
      text: await res.body.text(),
    };
  }

  it('answers a plain request with one completion token', async () => {
    const answer = await post(workloadBody('plain'));
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text).usage.completion_tokens).toBe(1);
  });

  it('streams the role chunk, 16 content chunks and [DONE]', async () => {
    const answer = await post(workloadBody('stream16'));
    expect(answer.type).toContain('text/event-stream');
    expect(answer.text.match(/^data: /gm)).toHaveLength(18);
    expect(answer.text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('answers 404 off its routes', async () => {
    const res = await request(`${upstream.url}/nope`, { method: 'POST', body: '{}' });
    expect(res.statusCode).toBe(404);
    await res.body.dump();
  });
});
