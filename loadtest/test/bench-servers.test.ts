import { stopAll } from '@fairgate/testkit';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNodeProxy, startStaticUpstream, type Upstream, workloadBody } from '../bench/wrk.js';

/**
 * bench:overhead's own servers, over real HTTP: the static upstream and the node floor in
 * front of it (bench/node-proxy.ts) must answer the same bytes, or the floor row measures
 * something else than a proxy hop.
 */
describe('bench servers', () => {
  let upstream: Upstream;
  let floor: Upstream;

  beforeAll(async () => {
    upstream = await startStaticUpstream();
    floor = await startNodeProxy(upstream.url);
  }, 30_000);
  afterAll(() => stopAll());

  async function post(base: string, body: string) {
    const res = await request(`${base}/v1/chat/completions`, {
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

  it.each(['plain', 'stream16'])(
    'the node floor relays a %s answer as the upstream sent it',
    async (name) => {
      const body = workloadBody(name);
      const direct = await post(upstream.url, body);
      const proxied = await post(floor.url, body);
      expect(direct.status).toBe(200);
      expect(proxied).toEqual(direct);
      if (name === 'stream16') {
        expect(proxied.type).toContain('text/event-stream');
        // The role chunk, 16 content chunks and [DONE].
        expect(proxied.text.match(/^data: /gm)).toHaveLength(18);
      } else {
        expect(JSON.parse(proxied.text).usage.completion_tokens).toBe(1);
      }
    },
  );

  it('the node floor answers 404 as the upstream does', async () => {
    const res = await request(`${floor.url}/nope`, { method: 'POST', body: '{}' });
    expect(res.statusCode).toBe(404);
    await res.body.dump();
  });
});
