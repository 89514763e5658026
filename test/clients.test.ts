import { createOpenAI } from '@ai-sdk/openai';
import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { embed, embedMany, stepCountIs, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  expectConserved,
  metricSum,
  type Pool,
  SIM_MODEL,
  startPool,
  tenantTotal,
} from './support/pool.js';

/**
 * The clients people build agents and RAG with, unchanged, against two replicas on one Redis
 * and two sims: the Vercel AI SDK (a streamed tool call, then the answer after its result;
 * embeddings) and LangChain JS (a streamed chat; embeddings). Every request they send takes
 * a slot and is counted for the tenant.
 */
const TEXTS = ['What is the capital of France?', 'Paris is the capital.', 'Cats purr.'];

/** The embedding of `text` asked as JSON floats, by plain HTTP. */
async function floatEmbedding(url: string, text: string): Promise<number[]> {
  const response = await fetch(`${url}/v1/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: SIM_MODEL, input: text, encoding_format: 'float' }),
  });
  expect(response.status).toBe(200);
  const body = (await response.json()) as { data: Array<{ embedding: number[] }> };
  return body.data[0]?.embedding ?? [];
}

/** TTFT samples the replica took (t5: a stream's first content or tool-call delta). */
function ttftSamples(url: string): Promise<number> {
  return metricSum(url, 'fairgate_ttft_seconds_count');
}

describe('real clients through fairgate', () => {
  let pool: Pool;
  const completed = async () =>
    tenantTotal(await pool.state(), 'paying', (row) => row.outcomes.completed);

  beforeAll(async () => {
    pool = await startPool({
      tenants: [{ id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 100 }],
    });
  }, 60_000);

  afterAll(async () => pool?.stop());

  it('Vercel AI SDK: streamText calls the tool, then answers after its result; embed and embedMany', async () => {
    const before = await completed();
    for (const [i, gateway] of pool.gateways.entries()) {
      const openai = createOpenAI({ baseURL: `${gateway.url}/v1`, apiKey: TEST_KEYS.paying });
      const inputs: Array<{ city: string; days: number }> = [];
      const ttftBefore = await ttftSamples(gateway.url);
      const result = streamText({
        model: openai.chat(SIM_MODEL),
        tools: {
          weather: tool({
            description: 'The forecast for a city',
            inputSchema: z.object({ city: z.string(), days: z.number().int() }),
            execute: async (input) => {
              inputs.push(input);
              return { forecast: 'sunny' };
            },
          }),
        },
        stopWhen: stepCountIs(2),
        maxOutputTokens: 16,
        prompt: 'What is the weather in Paris?',
      });
      const parts: string[] = [];
      for await (const part of result.fullStream) {
        if (part.type === 'error') throw part.error;
        parts.push(part.type);
      }
      // Step 1 is the model's tool call (its input validated by zod, then executed); step 2
      // sends the result back and the model answers in text.
      expect(inputs, `replica ${i}`).toHaveLength(1);
      expect(typeof inputs[0]?.city).toBe('string');
      expect(inputs[0]?.days).toBe(1);
      const steps = await result.steps;
      expect(steps.map((step) => step.finishReason)).toEqual(['tool-calls', 'length']);
      expect(steps[0]?.toolResults.map((r) => r.output)).toEqual([{ forecast: 'sunny' }]);
      expect(parts.indexOf('tool-result')).toBeLessThan(parts.lastIndexOf('text-delta'));
      expect((await result.text).length).toBe(16 * 4);
      expect((await result.totalUsage).outputTokens).toBeGreaterThan(16);
      // Both streams got their TTFT, the tool call's (no content) included.
      expect(await ttftSamples(gateway.url)).toBe(ttftBefore + 2);

      const single = await embed({ model: openai.embedding(SIM_MODEL), value: TEXTS[0] as string });
      expect(single.embedding.length).toBeGreaterThan(0);
      const many = await embedMany({ model: openai.embedding(SIM_MODEL), values: TEXTS });
      expect(many.embeddings).toHaveLength(3);
      expect(many.embeddings.every((vector) => vector.length === single.embedding.length)).toBe(
        true,
      );
    }
    await expectConserved(pool);
    // Per replica: two chat steps and two embeddings requests, each admitted and completed.
    expect((await completed()) - before).toBe(8);
  }, 30_000);

  it('LangChain JS: ChatOpenAI streams content chunks to the end; OpenAIEmbeddings embed', async () => {
    const before = await completed();
    for (const [i, gateway] of pool.gateways.entries()) {
      const configuration = { baseURL: `${gateway.url}/v1` };
      const chat = new ChatOpenAI({
        model: SIM_MODEL,
        apiKey: TEST_KEYS.paying,
        configuration,
        maxTokens: 8,
      });
      let content = '';
      let chunks = 0;
      let outputTokens = 0;
      for await (const chunk of await chat.stream('Name a colour.')) {
        chunks += 1;
        if (typeof chunk.content === 'string') content += chunk.content;
        outputTokens += chunk.usage_metadata?.output_tokens ?? 0;
      }
      expect(content.length, `replica ${i}`).toBe(8 * 4);
      expect(chunks).toBeGreaterThanOrEqual(8);
      expect(outputTokens).toBe(8);

      const embeddings = new OpenAIEmbeddings({
        model: SIM_MODEL,
        apiKey: TEST_KEYS.paying,
        configuration,
      });
      // LangChain asks for base64 (the OpenAI SDK's default): the vector decodes to the one
      // a float request gets, so the field passed through unchanged.
      const query = await embeddings.embedQuery(TEXTS[0] as string);
      const floats = await floatEmbedding(gateway.url, TEXTS[0] as string);
      expect(query).toHaveLength(floats.length);
      const gap = Math.max(
        ...query.map((value, at) => Math.abs(value - (floats[at] ?? Number.NaN))),
      );
      expect(gap).toBeLessThan(1e-6);
      const documents = await embeddings.embedDocuments(TEXTS);
      expect(documents).toHaveLength(3);
      expect(documents.every((vector) => vector.length === query.length)).toBe(true);
    }
    await expectConserved(pool);
    // Per replica: one chat stream and three embeddings requests (one by plain HTTP).
    expect((await completed()) - before).toBe(8);
  }, 30_000);
});
