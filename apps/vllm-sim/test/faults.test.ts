import { chunkText, type StreamChunk } from '@fairgate/openai';
import { type AppHandle, startSim } from '@fairgate/testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { jsonPost, metricValue, metricValues, readSse } from './http.js';

// Fault flags and disconnects against real sim processes.
const handles: AppHandle[] = [];
async function sim(args: Record<string, number | string>): Promise<AppHandle> {
  const handle = await startSim({ args });
  handles.push(handle);
  return handle;
}

afterAll(async () => {
  await Promise.all(handles.map((handle) => handle.stop()));
});

const chat = (maxTokens: number, stream: boolean, content = 'fault test') => ({
  model: 'fairgate-sim',
  messages: [{ role: 'user' as const, content }],
  max_tokens: maxTokens,
  stream,
});

async function metrics(handle: AppHandle): Promise<string> {
  return (await fetch(`${handle.url}/metrics`)).text();
}

/** Polls until `probe` holds or `timeoutMs` passes; returns the elapsed ms. */
async function eventually(probe: () => Promise<boolean>, timeoutMs: number): Promise<number> {
  const start = performance.now();
  while (performance.now() - start < timeoutMs) {
    if (await probe()) return performance.now() - start;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`condition not met within ${timeoutMs} ms`);
}

describe('--fail-rate / --fail-429-rate', () => {
  it('fail a seeded fraction of requests in the OpenAI shape', async () => {
    const handle = await sim({ 'alpha-ms': 1, 'fail-rate': 0.3, 'fail-429-rate': 0.3, seed: 5 });
    const statuses: number[] = [];
    for (let index = 0; index < 60; index++) {
      const response = await fetch(`${handle.url}/v1/chat/completions`, jsonPost(chat(1, false)));
      statuses.push(response.status);
      const body = (await response.json()) as { error?: { type: string } };
      if (response.status === 500) expect(body.error?.type).toBe('server_error');
      if (response.status === 429) expect(body.error?.type).toBe('rate_limit_error');
    }
    const count = (status: number) => statuses.filter((s) => s === status).length;
    // P(500) = 0.3, P(429) = 0.7 * 0.3 = 0.21, P(200) = 0.49: wide bounds, fixed seed.
    expect(count(500)).toBeGreaterThan(6);
    expect(count(429)).toBeGreaterThan(3);
    expect(count(200)).toBeGreaterThan(15);
    expect(count(500) + count(429) + count(200)).toBe(60);
    const text = await metrics(handle);
    expect(metricValue(text, 'fairgate_sim_faults_total')).toBe(count(500) + count(429));
  });
});

describe('--stall-ms', () => {
  it('delays the first byte (headers included), streaming or not', async () => {
    const handle = await sim({ 'alpha-ms': 1, 'stall-ms': 300 });
    for (const stream of [true, false]) {
      const start = performance.now();
      const response = await fetch(`${handle.url}/v1/chat/completions`, jsonPost(chat(2, stream)));
      const headersAfter = performance.now() - start;
      expect(response.status).toBe(200);
      expect(headersAfter).toBeGreaterThanOrEqual(295);
      await response.arrayBuffer();
    }
    // Only generation is stalled: health checks stay fast.
    const start = performance.now();
    await fetch(`${handle.url}/health`);
    expect(performance.now() - start).toBeLessThan(250);
  });
});

/** A response's body as far as it came, and the error that ended it (null: it ended well). */
async function readUntilDropped(response: Response): Promise<{ text: string; error: unknown }> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text, error: null };
      text += decoder.decode(value, { stream: true });
    }
  } catch (error) {
    return { text, error };
  }
}

describe('--reset-after-tokens', () => {
  it('drops a stream after N tokens (no [DONE]) and frees the sequence', async () => {
    const handle = await sim({ 'alpha-ms': 5, 'reset-after-tokens': 3 });
    const response = await fetch(`${handle.url}/v1/chat/completions`, jsonPost(chat(50, true)));
    expect(response.status).toBe(200);
    const { text, error } = await readUntilDropped(response);
    expect(error).not.toBeNull(); // the connection ended without the chunked terminator
    expect(text).not.toContain('[DONE]');
    const received = text
      .split('\n')
      .filter((line) => line.startsWith('data: '))
      .map((line) => JSON.parse(line.slice(6)) as StreamChunk);
    // Exactly the N tokens before the drop made it to the client.
    expect(received.filter((chunk) => chunkText(chunk).length > 0)).toHaveLength(3);

    const after = await metrics(handle);
    expect(metricValue(after, 'vllm:num_requests_running')).toBe(0);
    expect(metricValue(after, 'vllm:kv_cache_usage_perc')).toBe(0);
    expect(metricValue(after, 'vllm:generation_tokens_total')).toBe(3);
    expect(
      metricValues(after, 'fairgate_sim_faults_total').get(
        '{model_name="fairgate-sim",fault="reset"}',
      ),
    ).toBe(1);
  });

  it('drops a Responses stream after N deltas, before its closing events', async () => {
    const handle = await sim({ 'alpha-ms': 5, 'reset-after-tokens': 3 });
    const body = { model: 'fairgate-sim', input: 'hi', max_output_tokens: 50, stream: true };
    const response = await fetch(`${handle.url}/v1/responses`, jsonPost(body));
    expect(response.status).toBe(200);
    const { text, error } = await readUntilDropped(response);
    expect(error).not.toBeNull();
    expect(text.match(/^event: response\.output_text\.delta$/gm)).toHaveLength(3);
    expect(text).not.toContain('response.completed');
    const after = await metrics(handle);
    expect(
      metricValues(after, 'fairgate_sim_faults_total').get(
        '{model_name="fairgate-sim",fault="reset"}',
      ),
    ).toBe(1);
  });

  it('drops a non-streaming request before any response byte', async () => {
    const handle = await sim({ 'alpha-ms': 5, 'reset-after-tokens': 2 });
    const outcome = await fetch(
      `${handle.url}/v1/chat/completions`,
      jsonPost(chat(10, false)),
    ).then(
      (response) => `status ${response.status}`,
      (error: unknown) => error,
    );
    expect(outcome).toBeInstanceOf(TypeError); // fetch failed: socket closed
    // The sim itself is fine.
    expect((await fetch(`${handle.url}/health`)).status).toBe(200);
  });

  it('lets requests shorter than N finish normally', async () => {
    const handle = await sim({ 'alpha-ms': 2, 'reset-after-tokens': 5 });
    const { data } = await readSse(
      await fetch(`${handle.url}/v1/chat/completions`, jsonPost(chat(4, true))),
    );
    expect(data.at(-1)).toBe('[DONE]');
  });
});

describe('client disconnect', () => {
  it('frees the running sequence and its KV blocks at once, not at the iteration end', async () => {
    // Each iteration takes >= 1 s, so "at once" is clearly before the next boundary.
    const handle = await sim({ 'alpha-ms': 1000 });
    const controller = new AbortController();
    const response = await fetch(`${handle.url}/v1/chat/completions`, {
      ...jsonPost(chat(100, true, 'x'.repeat(2000))),
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    await reader.read(); // the first token arrived: the sequence is running and holds blocks
    const before = await metrics(handle);
    expect(metricValue(before, 'vllm:num_requests_running')).toBe(1);
    expect(metricValue(before, 'vllm:kv_cache_usage_perc')).toBeGreaterThan(0);

    controller.abort();
    const elapsed = await eventually(async () => {
      const text = await metrics(handle);
      return (
        metricValue(text, 'vllm:num_requests_running') === 0 &&
        metricValue(text, 'vllm:kv_cache_usage_perc') === 0
      );
    }, 600);
    expect(elapsed).toBeLessThan(600);
    const after = await metrics(handle);
    expect(metricValue(after, 'vllm:request_success_total')).toBe(1); // finished_reason abort
    expect(metricValue(after, 'vllm:generation_tokens_total')).toBe(1);
  });

  it('a client leaving while queued is removed from the waiting queue', async () => {
    // The running request holds the only seat for >= 3 s; the queued one must leave at once.
    const handle = await sim({ 'alpha-ms': 300, 'max-num-seqs': 1 });
    const running = new AbortController();
    const first = fetch(`${handle.url}/v1/chat/completions`, {
      ...jsonPost(chat(10, false)),
      signal: running.signal,
    }).catch(() => null);
    const queued = new AbortController();
    const second = fetch(`${handle.url}/v1/chat/completions`, {
      ...jsonPost(chat(10, false)),
      signal: queued.signal,
    }).catch(() => null);
    const isWaiting = async (count: number) =>
      metricValue(await metrics(handle), 'vllm:num_requests_waiting') === count;
    await eventually(() => isWaiting(1), 2000);
    queued.abort();
    await eventually(() => isWaiting(0), 1000);
    expect(metricValue(await metrics(handle), 'vllm:num_requests_running')).toBe(1);
    running.abort();
    await Promise.all([first, second]);
  });
});
