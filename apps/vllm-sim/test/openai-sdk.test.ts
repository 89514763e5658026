import { estimatePromptTokens } from '@fairgate/openai';
import { type AppHandle, startSim } from '@fairgate/testkit';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// Real processes (built dist/main.js) spoken to by the official OpenAI SDK.
let sim: AppHandle;
let failing500: AppHandle;
let failing429: AppHandle;

beforeAll(async () => {
  [sim, failing500, failing429] = await Promise.all([
    startSim({ args: { 'alpha-ms': 5, model: 'sdk-model' } }),
    startSim({ args: { 'alpha-ms': 5, 'fail-rate': 1, model: 'sdk-model' } }),
    startSim({ args: { 'alpha-ms': 5, 'fail-429-rate': 1, model: 'sdk-model' } }),
  ]);
});

afterAll(async () => {
  await Promise.all([sim, failing500, failing429].map((handle) => handle?.stop()));
});

const client = (handle: AppHandle) =>
  new OpenAI({ baseURL: `${handle.url}/v1`, apiKey: 'x', maxRetries: 0 });

const request = {
  model: 'sdk-model',
  messages: [
    { role: 'system' as const, content: 'You are terse.' },
    { role: 'user' as const, content: 'Explain continuous batching in one paragraph.' },
  ],
  max_tokens: 12,
};

describe('official openai SDK against the sim', () => {
  it('streams a chat completion with include_usage and gets exact usage', async () => {
    const stream = await client(sim).chat.completions.create({
      ...request,
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = '';
    let role: string | undefined;
    let usage: OpenAI.CompletionUsage | null | undefined;
    let finishReason: string | null | undefined;
    for await (const chunk of stream) {
      role ??= chunk.choices[0]?.delta.role;
      content += chunk.choices[0]?.delta.content ?? '';
      finishReason = chunk.choices[0]?.finish_reason ?? finishReason;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(role).toBe('assistant');
    expect(finishReason).toBe('length');
    expect(content.length).toBe(12 * 4);
    expect(usage).toMatchObject({
      prompt_tokens: estimatePromptTokens(request),
      completion_tokens: 12,
      total_tokens: estimatePromptTokens(request) + 12,
    });
  });

  it('non-streaming chat and completions work', async () => {
    const completion = await client(sim).chat.completions.create(request);
    expect(completion.model).toBe('sdk-model');
    expect(completion.choices[0]?.message.content).toHaveLength(48);
    expect(completion.usage?.prompt_tokens).toBe(estimatePromptTokens(request));
    expect(completion.usage?.completion_tokens).toBe(12);

    const text = await client(sim).completions.create({
      model: 'sdk-model',
      prompt: 'abcd',
      max_tokens: 3,
    });
    expect(text.usage).toMatchObject({ prompt_tokens: 1, completion_tokens: 3 });
  });

  it('lists the model', async () => {
    const models = await client(sim).models.list();
    expect(models.data.map((model) => model.id)).toEqual(['sdk-model']);
  });

  it('--fail-429-rate 1 surfaces as RateLimitError', async () => {
    const error = await client(failing429)
      .chat.completions.create(request)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect((error as InstanceType<typeof OpenAI.RateLimitError>).status).toBe(429);
  });

  it('--fail-rate 1 surfaces as InternalServerError, streaming or not', async () => {
    const plain = await client(failing500)
      .chat.completions.create(request)
      .catch((e: unknown) => e);
    expect(plain).toBeInstanceOf(OpenAI.InternalServerError);
    const streamed = await client(failing500)
      .chat.completions.create({ ...request, stream: true })
      .catch((e: unknown) => e);
    expect(streamed).toBeInstanceOf(OpenAI.InternalServerError);
  });
});
