import { decodeSseStream, estimatePromptTokens } from '@fairgate/openai';
import { describe, expect, it } from 'vitest';
import { inProcessSims, jsonPost } from './http.js';

// POST /v1/responses in-process; the SDK's view is in endpoints-sdk.test.ts.
const sim = inProcessSims({ alphaMs: 1, betaMs: 0.001, gammaMs: 0 });

/** The chat request a Responses request is planned as (same prompt, same estimate). */
const asChat = (content: string, instructions?: string) => ({
  model: 'fairgate-sim',
  messages: [
    ...(instructions ? [{ role: 'system' as const, content: instructions }] : []),
    { role: 'user' as const, content },
  ],
});

interface ResponseEvent {
  type: string;
  sequence_number: number;
  [field: string]: any;
}

async function events(response: Response): Promise<{ names: string[]; events: ResponseEvent[] }> {
  const names: string[] = [];
  const parsed: ResponseEvent[] = [];
  for await (const event of decodeSseStream(response.body as AsyncIterable<Uint8Array>)) {
    names.push(event.event ?? '');
    parsed.push(JSON.parse(event.data) as ResponseEvent);
  }
  return { names, events: parsed };
}

describe('POST /v1/responses', () => {
  it('non-streaming: vLLM ResponsesResponse with one output message and usage', async () => {
    const server = sim();
    const request = { input: 'Tell me a story.', instructions: 'Be brief.', max_output_tokens: 6 };
    const response = await server.app.request('/v1/responses', jsonPost(request));
    expect(response.status).toBe(200);
    const body = (await response.json()) as Record<string, any>;
    expect(body.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(body).toMatchObject({
      object: 'response',
      model: 'fairgate-sim',
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      instructions: 'Be brief.',
      max_output_tokens: 6,
      temperature: 1,
      top_p: 1,
      tools: [],
      tool_choice: 'auto',
    });
    expect(body.output).toHaveLength(1);
    const [message] = body.output;
    expect(message).toMatchObject({ type: 'message', role: 'assistant', status: 'completed' });
    expect(message.id).toMatch(/^msg_/);
    expect(message.content).toHaveLength(1);
    expect(message.content[0]).toMatchObject({ type: 'output_text', annotations: [] });
    expect(message.content[0].text).toHaveLength(6 * 4);
    const input = estimatePromptTokens(asChat('Tell me a story.', 'Be brief.'));
    expect(body.usage).toEqual({
      input_tokens: input,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 6,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: input + 6,
    });
  });

  it('a response that stops before its limit is completed', async () => {
    const server = sim({ eosAfter: 2 });
    const response = await server.app.request(
      '/v1/responses',
      jsonPost({ input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }] }),
    );
    const body = (await response.json()) as Record<string, any>;
    expect(body).toMatchObject({ status: 'completed', incomplete_details: null });
    expect(body.usage.output_tokens).toBe(2);
    // input_text parts count as the chat text they are.
    expect(body.usage.input_tokens).toBe(estimatePromptTokens(asChat('hi')));
  });

  it('streaming: vLLM event names in order, sequence numbers from 0, deltas make the text', async () => {
    const response = await sim().app.request(
      '/v1/responses',
      jsonPost({ input: 'Stream please.', max_output_tokens: 4, stream: true }),
    );
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const { names, events: stream } = await events(response);
    expect(names).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(stream.map((event) => event.type)).toEqual(names);
    expect(stream.map((event) => event.sequence_number)).toEqual(names.map((_, index) => index));
    const [created, , added] = stream;
    expect(created!.response).toMatchObject({ status: 'in_progress', output: [], usage: null });
    expect(added!.item).toMatchObject({ type: 'message', status: 'in_progress', content: [] });
    const text = stream
      .filter((event) => event.type === 'response.output_text.delta')
      .map((event) => event.delta)
      .join('');
    expect(stream[8]!.text).toBe(text);
    const completed = stream.at(-1)!.response;
    expect(completed.id).toBe(created!.response.id);
    expect(completed.output[0].content[0].text).toBe(text);
    expect(completed.usage).toMatchObject({ output_tokens: 4 });
    for (const event of stream.slice(2, 11)) expect(event.output_index).toBe(0);
  });

  it('bad bodies are 400 naming the field; too long a request is a context error', async () => {
    const server = sim({ maxModelLen: 64 });
    const cases: Array<[unknown, string]> = [
      [{}, 'body.input'],
      [{ input: 42 }, 'body.input'],
      [{ input: [{ content: 'no role' }] }, 'body.input.0'],
      [{ input: 'hi', max_output_tokens: 'x' }, 'body.max_output_tokens'],
      [{ input: 'hi', stream: 'yes' }, 'body.stream'],
      [{ input: 'hi', max_output_tokens: 100 }, 'max_output_tokens'],
      [{ input: 'x'.repeat(400) }, 'input'],
    ];
    for (const [request, param] of cases) {
      const response = await server.app.request('/v1/responses', jsonPost(request));
      expect(response.status, JSON.stringify(request)).toBe(400);
      expect(((await response.json()) as any).error, JSON.stringify(request)).toMatchObject({
        param,
        code: 400,
      });
    }
    const previous = await server.app.request(
      '/v1/responses',
      jsonPost({ input: 'hi', previous_response_id: 'resp_x' }),
    );
    expect(previous.status).toBe(404);
  });
});
