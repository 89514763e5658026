import {
  type ChatCompletion,
  type ChatCompletionChunk,
  estimateTextTokens,
  isUsageChunk,
} from '@fairgate/openai';
import { describe, expect, it } from 'vitest';
import { argumentsFor } from '../src/tools.js';
import { inProcessSims, jsonPost, metricValues, readSse } from './http.js';

const sim = inProcessSims({ alphaMs: 1, betaMs: 0.001, gammaMs: 0 });

const WEATHER = {
  type: 'function',
  function: {
    name: 'weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        days: { type: 'integer' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        note: { type: 'string' },
      },
      required: ['city', 'days', 'unit'],
      additionalProperties: false,
    },
  },
};
const CLOCK = { type: 'function', function: { name: 'clock', parameters: { type: 'object' } } };

const toolRequest = (extra: Record<string, unknown> = {}) => ({
  model: 'fairgate-sim',
  messages: [{ role: 'user', content: 'weather in Oslo?' }],
  tools: [WEATHER, CLOCK],
  max_tokens: 50,
  ...extra,
});

async function complete(body: unknown): Promise<ChatCompletion> {
  const response = await sim().app.request('/v1/chat/completions', jsonPost(body));
  expect(response.status).toBe(200);
  return (await response.json()) as ChatCompletion;
}

describe('arguments synthesized from a JSON schema', () => {
  const cases: Array<[string, unknown, unknown]> = [
    ['string', { type: 'string' }, 'sky'],
    ['number', { type: 'number' }, 1],
    ['integer', { type: 'integer' }, 1],
    ['boolean', { type: 'boolean' }, true],
    ['enum: its first value', { type: 'string', enum: ['b', 'a'] }, 'b'],
    ['const', { const: 7 }, 7],
    ['nullable type list', { type: ['null', 'number'] }, 1],
    ['anyOf: the first variant', { anyOf: [{ type: 'boolean' }, { type: 'string' }] }, true],
    ['array without minItems: empty', { type: 'array', items: { type: 'string' } }, []],
    ['array with minItems', { type: 'array', items: { type: 'integer' }, minItems: 2 }, [1, 1]],
    [
      'object: only the required properties, recursively',
      {
        type: 'object',
        properties: {
          a: { type: 'object', properties: { b: { type: 'boolean' } } },
          c: { type: 'string' },
        },
        required: ['a'],
      },
      { a: { b: true } },
    ],
    [
      'object without required: every property',
      { type: 'object', properties: { x: { type: 'number' }, y: { type: 'string' } } },
      { x: 1, y: 'sky' },
    ],
    ['no schema: an empty object', undefined, {}],
  ];
  for (const [name, schema, expected] of cases) {
    it(name, () => expect(argumentsFor(schema, 'sky')).toEqual(expected));
  }
});

describe('tool calls, as vLLM answers them with a tool parser', () => {
  it('non-streaming: content null, one call to the first tool, finish_reason tool_calls', async () => {
    const answer = await complete(toolRequest());
    const choice = answer.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0]!;
    expect(call).toMatchObject({ type: 'function', function: { name: 'weather' } });
    expect(call.id).toMatch(/^chatcmpl-tool-[0-9a-f]{32}$/);
    const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
    expect(Object.keys(args).sort()).toEqual(['city', 'days', 'unit']);
    expect(args).toMatchObject({ days: 1, unit: 'celsius' });
    expect(typeof args.city).toBe('string');
    // One decode step for the call's header, one per 4-character fragment of the arguments.
    expect(answer.usage.completion_tokens).toBe(1 + estimateTextTokens(call.function.arguments));
  });

  it("tool_choice names the function; 'none' and a tool result as last message get text", async () => {
    const named = await complete(
      toolRequest({ tool_choice: { type: 'function', function: { name: 'clock' } } }),
    );
    expect(named.choices[0]!.message.tool_calls![0]!.function).toEqual({
      name: 'clock',
      arguments: '{}',
    });

    const none = await complete(toolRequest({ tool_choice: 'none', max_tokens: 3 }));
    expect(none.choices[0]).toMatchObject({ finish_reason: 'length' });
    expect(none.choices[0]!.message.content).toHaveLength(12);

    const afterResult = await complete(
      toolRequest({
        max_tokens: 3,
        messages: [
          { role: 'user', content: 'weather in Oslo?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'c1', type: 'function', function: { name: 'clock', arguments: '{}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'c1', content: '12:00' },
        ],
      }),
    );
    expect(afterResult.choices[0]!.message.tool_calls).toBeUndefined();
    expect(afterResult.choices[0]!.message.content).toHaveLength(12);
  });

  it('a named function missing from tools is 400 on tool_choice', async () => {
    const response = await sim().app.request(
      '/v1/chat/completions',
      jsonPost(toolRequest({ tool_choice: { type: 'function', function: { name: 'nope' } } })),
    );
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ error: { param: 'tool_choice' } });
  });

  it('a call that does not fit max_tokens is a text answer cut at the limit', async () => {
    const answer = await complete(toolRequest({ max_tokens: 2 }));
    expect(answer.choices[0]).toMatchObject({ finish_reason: 'length' });
    expect(answer.choices[0]!.message.tool_calls).toBeUndefined();
  });

  it('streaming: role chunk, the named call, argument fragments, tool_calls, usage', async () => {
    const server = sim();
    const response = await server.app.request(
      '/v1/chat/completions',
      jsonPost(toolRequest({ stream: true, stream_options: { include_usage: true } })),
    );
    const { data, chunks } = await readSse(response);
    expect(data.at(-1)).toBe('[DONE]');
    const deltas = chunks.slice(0, -1) as ChatCompletionChunk[];
    expect(deltas[0]!.choices[0]!.delta).toEqual({ role: 'assistant', content: '' });
    const calls = deltas.slice(1).map((chunk) => chunk.choices[0]!.delta.tool_calls![0]!);
    expect(calls[0]).toMatchObject({
      index: 0,
      type: 'function',
      function: { name: 'weather', arguments: '' },
    });
    expect(calls[0]!.id).toMatch(/^chatcmpl-tool-/);
    for (const call of calls.slice(1)) {
      expect(call).toEqual({ index: 0, function: { arguments: expect.any(String) } });
    }
    const args = calls.map((call) => call.function.arguments).join('');
    expect(JSON.parse(args)).toMatchObject({ days: 1, unit: 'celsius' });
    const finishes = deltas.slice(1).map((chunk) => chunk.choices[0]!.finish_reason);
    expect(finishes.at(-1)).toBe('tool_calls');
    expect(finishes.slice(0, -1).every((finish) => finish === null)).toBe(true);

    const usage = chunks.at(-1)!;
    expect(isUsageChunk(usage)).toBe(true);
    expect(usage.usage).toMatchObject({ completion_tokens: calls.length });
    // The engine finished the sequence as vLLM's does: a stop, not the length limit.
    const metrics = await (await server.app.request('/metrics')).text();
    const success = metricValues(metrics, 'vllm:request_success_total');
    const stops = [...success].filter(([labels]) => labels.includes('finished_reason="stop"'));
    expect(stops.map(([, value]) => value)).toEqual([1]);
  });
});
