import { chunkText, estimatePromptTokens } from '@fairgate/openai';
import { type AppHandle, startSim } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonPost, median, metricValue, promptText, readSse } from './http.js';

/**
 * Model fidelity against a real sim process, measured by a client over HTTP.
 * alpha is tens of ms so timer jitter (1-2 ms) and HTTP overhead stay well inside the 10%
 * tolerance of the acceptance criteria.
 */
const ALPHA = 50;
const BETA = 0.02;
const GAMMA = 0.04;
const TOLERANCE = 0.1;
const MODEL_ARGS = { 'alpha-ms': ALPHA, 'beta-ms': BETA, 'gamma-ms': GAMMA };

const handles: AppHandle[] = [];
async function sim(args: Record<string, number | string>): Promise<AppHandle> {
  const handle = await startSim({ args });
  handles.push(handle);
  return handle;
}

afterAll(async () => {
  await Promise.all(handles.map((handle) => handle.stop()));
});

interface Measured {
  ttftMs: number;
  /** Gaps between consecutive content tokens. */
  gapsMs: number[];
  tokens: number;
  cachedTokens: number | undefined;
}

/** One streaming chat request; times are client-side, from send to each content chunk. */
async function measure(url: string, body: Record<string, unknown>): Promise<Measured> {
  const init = jsonPost(body);
  const started = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, init);
  const { chunks, times } = await readSse(response);
  const tokenTimes: number[] = [];
  chunks.forEach((chunk, index) => {
    if (chunkText(chunk).length > 0) tokenTimes.push(times[index]!);
  });
  const usage = chunks.at(-1)?.usage;
  return {
    ttftMs: tokenTimes[0]! - started,
    gapsMs: tokenTimes.slice(1).map((time, index) => time - tokenTimes[index]!),
    tokens: tokenTimes.length,
    cachedTokens: usage?.prompt_tokens_details?.cached_tokens,
  };
}

function chatBody(content: string, maxTokens: number) {
  return {
    model: 'fairgate-sim',
    messages: [{ role: 'user' as const, content }],
    max_tokens: maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  };
}

function expectWithin(measured: number, model: number, what: string): void {
  const error = Math.abs(measured - model) / model;
  expect(
    error,
    `${what}: measured ${measured.toFixed(2)} ms, model ${model.toFixed(2)} ms`,
  ).toBeLessThan(TOLERANCE);
}

describe('one request at a time', () => {
  // TTFT is measured by the client, so it includes a few ms of HTTP and request parsing;
  // TTFT >= 170 ms keeps that to a few percent. Noise on a shared 2-core box is one-sided
  // (a starved process is late, never early), so TTFT is judged on the best of 5 runs and
  // no run may beat the model; ITL, drift-corrected, on the median. The first request of a
  // fresh process pays for JIT warm-up, so each size is warmed up once.
  let handle: AppHandle;
  beforeAll(async () => {
    handle = await sim(MODEL_ARGS);
  });

  it.each([2000, 3500])(
    'i≈%i prompt tokens: TTFT and mean ITL follow the model within 10 percent',
    async (size) => {
      const outputTokens = 4;
      await measure(handle.url, chatBody(promptText(size, `warmup-${size}`), outputTokens));
      const ttfts: number[] = [];
      const meanItls: number[] = [];
      let promptTokens = 0;
      for (let run = 0; run < 5; run++) {
        // A distinct first block per run: no prefix-cache hit may shorten the prefill.
        const body = chatBody(promptText(size, `run${run}-${size}`), outputTokens);
        promptTokens = estimatePromptTokens(body);
        const measured = await measure(handle.url, body);
        expect(measured.tokens).toBe(outputTokens);
        expect(measured.cachedTokens).toBe(0);
        ttfts.push(measured.ttftMs);
        meanItls.push(measured.gapsMs.reduce((sum, gap) => sum + gap, 0) / measured.gapsMs.length);
      }
      const modelTtft = ALPHA + (BETA + GAMMA) * promptTokens;
      // Decode step k (k = 1..o-1) takes alpha + beta + gamma*(i+k); its mean is at k = o/2.
      const modelItl = ALPHA + BETA + GAMMA * (promptTokens + outputTokens / 2);
      expectWithin(Math.min(...ttfts), modelTtft, 'client TTFT (best of 5)');
      for (const ttft of ttfts) expect(ttft).toBeGreaterThan(modelTtft * (1 - TOLERANCE));
      expectWithin(median(meanItls), modelItl, 'client mean ITL (median of 5)');
    },
  );
});

describe('prefix cache', () => {
  it('a repeated prompt hits the prefix cache and has a lower TTFT', async () => {
    const handle = await sim(MODEL_ARGS);
    const body = chatBody(promptText(3000, 'repeat'), 2);
    const promptTokens = estimatePromptTokens(body);
    const cold = await measure(handle.url, body);
    // Best of three warm runs: load spikes on a shared box only ever add time.
    const warm: Measured[] = [];
    for (let run = 0; run < 3; run++) warm.push(await measure(handle.url, body));

    const cachedTokens = Math.floor((promptTokens - 1) / 16) * 16;
    expect(cold.cachedTokens).toBe(0);
    expect(warm.map((result) => result.cachedTokens)).toEqual(Array(3).fill(cachedTokens));
    // Model: 50 + 0.06 * 12 ms warm against 50 + 0.06 * 3000 ms cold.
    expect(Math.min(...warm.map((result) => result.ttftMs))).toBeLessThan(cold.ttftMs * 0.5);

    const metrics = await (await fetch(`${handle.url}/metrics`)).text();
    expect(metricValue(metrics, 'vllm:prefix_cache_queries_total')).toBe(4 * promptTokens);
    expect(metricValue(metrics, 'vllm:prefix_cache_hits_total')).toBe(3 * cachedTokens);
  });
});

describe('under concurrency', () => {
  it('never runs more than --max-num-seqs; the rest wait', async () => {
    const handle = await sim({ 'alpha-ms': 5, 'max-num-seqs': 4 });
    let maxRunning = 0;
    let maxWaiting = 0;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const text = await (await fetch(`${handle.url}/metrics`)).text();
        maxRunning = Math.max(maxRunning, metricValue(text, 'vllm:num_requests_running'));
        maxWaiting = Math.max(maxWaiting, metricValue(text, 'vllm:num_requests_waiting'));
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, index) =>
        measure(handle.url, chatBody(`concurrent ${index}`, 20)),
      ),
    );
    polling = false;
    await poller;

    expect(results.map((result) => result.tokens)).toEqual(Array(16).fill(20));
    expect(maxRunning).toBeGreaterThan(0);
    expect(maxRunning).toBeLessThanOrEqual(4);
    expect(maxWaiting).toBeGreaterThan(0);
    const metrics = await (await fetch(`${handle.url}/metrics`)).text();
    // The engine's own high-water mark sees every iteration, not just the samples above.
    expect(metricValue(metrics, 'fairgate_sim_num_requests_running_max')).toBe(4);
  });

  it('a KV-starved pod preempts, yet every stream gets each token exactly once', async () => {
    // 24 blocks of 16 tokens; 6 requests that each grow to 14 blocks cannot all fit.
    const handle = await sim({
      'alpha-ms': 2,
      'kv-blocks': 24,
      'max-model-len': 384,
      'max-num-seqs': 8,
    });
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, index) =>
        measure(handle.url, chatBody(promptText(60, `kv${index}`), 150)),
      ),
    );
    expect(results.map((result) => result.tokens)).toEqual(Array(6).fill(150));
    const metrics = await (await fetch(`${handle.url}/metrics`)).text();
    expect(metricValue(metrics, 'vllm:num_preemptions_total')).toBeGreaterThan(0);
    expect(metricValue(metrics, 'vllm:generation_tokens_total')).toBe(6 * 150);
    expect(metricValue(metrics, 'vllm:kv_cache_usage_perc')).toBe(0);
  });
});
