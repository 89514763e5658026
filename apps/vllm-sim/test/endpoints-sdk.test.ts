import { readFileSync } from 'node:fs';
import { type AppHandle, startSim } from '@fairgate/testkit';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// A real sim process (built dist/main.js) spoken to by the official OpenAI SDK: JSON bodies,
// SSE parsing and a real multipart upload over HTTP.
let sim: AppHandle;

beforeAll(async () => {
  sim = await startSim({ args: { 'alpha-ms': 2, model: 'sdk-model', 'embedding-dim': 32 } });
});

afterAll(async () => {
  await sim?.stop();
});

const client = () => new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'x', maxRetries: 0 });

/** Peak and current resident memory of a Linux process, in bytes (null elsewhere). */
function memoryOf(pid: number): { peak: number; current: number } | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]);
    return { peak: kb('VmHWM') * 1024, current: kb('VmRSS') * 1024 };
  } catch {
    return null;
  }
}

describe('official openai SDK against the sim: the other endpoints', () => {
  it('embeddings.create: base64 (the SDK default) and float give the same unit vectors', async () => {
    const input = ['first text', 'second text'];
    const asBase64 = await client().embeddings.create({ model: 'sdk-model', input });
    const asFloat = await client().embeddings.create({
      model: 'sdk-model',
      input,
      encoding_format: 'float',
    });
    expect(asBase64.data).toHaveLength(2);
    expect(asBase64.data[0]!.embedding).toHaveLength(32);
    for (const [index, item] of asFloat.data.entries()) {
      const decoded = asBase64.data[index]!.embedding;
      for (const [at, value] of item.embedding.entries()) expect(decoded[at]).toBeCloseTo(value, 6);
    }
    expect(asFloat.usage).toMatchObject({ prompt_tokens: 6, total_tokens: 6 });
  });

  it('responses.create, not streaming: output_text and usage', async () => {
    const response = await client().responses.create({
      model: 'sdk-model',
      input: 'Say something.',
      max_output_tokens: 5,
    });
    expect(response.output_text).toHaveLength(5 * 4);
    expect(response.usage).toMatchObject({ output_tokens: 5 });
    expect(response.usage!.total_tokens).toBe(response.usage!.input_tokens + 5);
  });

  it('responses.create, streaming: typed events end in response.completed', async () => {
    const stream = await client().responses.create({
      model: 'sdk-model',
      input: [{ role: 'user', content: 'Stream something.' }],
      max_output_tokens: 3,
      stream: true,
    });
    const types: string[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(types[0]).toBe('response.created');
    expect(types.filter((type) => type === 'response.output_text.delta')).toHaveLength(3);
    expect(completed?.output[0]).toMatchObject({ content: [{ type: 'output_text', text }] });
    expect(completed?.usage?.output_tokens).toBe(3);
  });

  it('audio.transcriptions.create: a 20 MB upload, its duration from its size', async () => {
    const file = await toFile(Buffer.alloc(20 * 1024 * 1024, 7), 'speech.wav');
    const transcription = await client().audio.transcriptions.create({
      model: 'sdk-model',
      file,
      language: 'en',
    });
    // 20 MiB at 640 bytes per token is 32,768 audio tokens: 655.36 s in 22 windows.
    expect(transcription.text).toHaveLength(4 * (21 * Math.ceil(1500 / 16) + Math.ceil(1268 / 16)));
    expect((transcription as unknown as { usage: unknown }).usage).toEqual({
      type: 'duration',
      seconds: 656,
    });
  });

  it('an upload is streamed, not held: 200 MB raise the peak RSS by far less', async () => {
    const before = memoryOf(sim.pid);
    const form = new FormData();
    form.set('model', 'sdk-model');
    form.set('file', new Blob([new Uint8Array(200 * 1024 * 1024)]), 'long.wav');
    const response = await fetch(`${sim.url}/v1/audio/transcriptions`, {
      method: 'POST',
      body: form,
    });
    // Read to the end, then refused over vLLM's 25 MB limit, as vLLM does.
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
      'Maximum file size exceeded.',
    );
    const after = memoryOf(sim.pid);
    // Garbage collection lets the sim grow by ~50 MB whatever the size; held, it would be 200.
    if (before && after) expect(after.peak - before.current).toBeLessThan(100 * 1024 * 1024);
  });

  it('audio.translations.create answers the text; an unknown model is NotFoundError', async () => {
    const file = await toFile(Buffer.alloc(6400, 1), 'speech.wav');
    const translation = await client().audio.translations.create({ model: 'sdk-model', file });
    expect(translation.text).toHaveLength(4);
    await expect(client().embeddings.create({ model: 'nope', input: 'x' })).rejects.toBeInstanceOf(
      OpenAI.NotFoundError,
    );
  });
});
