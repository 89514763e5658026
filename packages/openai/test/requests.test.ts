import { describe, expect, it } from 'vitest';
import {
  OpenAIHttpError,
  parseChatCompletionRequest,
  parseCompletionRequest,
  parseJsonBody,
  requestedMaxTokens,
} from '../src/index.js';

const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

function rejection(fn: () => unknown): OpenAIHttpError {
  try {
    fn();
  } catch (error) {
    if (error instanceof OpenAIHttpError) return error;
    throw error;
  }
  throw new Error('expected an OpenAIHttpError');
}

describe('chat completion requests', () => {
  it('keeps vLLM extras and unknown fields verbatim', () => {
    const extras = {
      top_k: 40,
      min_p: 0.05,
      repetition_penalty: 1.1,
      guided_json: { type: 'object', properties: { a: { type: 'string' } } },
      guided_regex: '[a-z]+',
      guided_choice: ['yes', 'no'],
      chat_template_kwargs: { enable_thinking: false },
      some_future_field: [1, 2, 3],
    };
    const parsed = parseChatCompletionRequest({ ...chat, ...extras });
    expect(parsed).toMatchObject(extras);
    expect(JSON.parse(JSON.stringify(parsed))).toEqual({ ...chat, ...extras });
  });

  it('keeps unknown fields inside messages and stream_options', () => {
    const body = {
      ...chat,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'a', cache: true }], extra: 1 }],
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: false, x: 1 },
    };
    expect(parseChatCompletionRequest(body)).toEqual(body);
  });

  it.each([
    ['missing model', { messages: chat.messages }, 'model'],
    ['empty model', { ...chat, model: '' }, 'model'],
    ['messages not an array', { ...chat, messages: 'hi' }, 'messages'],
    ['no messages', { ...chat, messages: [] }, 'messages'],
    ['bad role', { ...chat, messages: [{ role: 'robot', content: 'x' }] }, 'messages.0.role'],
    ['max_tokens a string', { ...chat, max_tokens: '10' }, 'max_tokens'],
    ['negative max_tokens', { ...chat, max_tokens: -1 }, 'max_tokens'],
    ['stream not boolean', { ...chat, stream: 'yes' }, 'stream'],
    ['temperature negative', { ...chat, temperature: -0.5 }, 'temperature'],
    ['top_k not an integer', { ...chat, top_k: 1.5 }, 'top_k'],
    [
      'include_usage not boolean',
      { ...chat, stream_options: { include_usage: 1 } },
      'stream_options.include_usage',
    ],
  ])('rejects %s naming %s', (_name, body, param) => {
    const error = rejection(() => parseChatCompletionRequest(body));
    expect(error.status).toBe(400);
    expect(error.param).toBe(param);
    expect(error.toBody().error.type).toBe('invalid_request_error');
    expect(error.message).toContain(param);
  });

  it('rejects a body that is not an object', () => {
    const error = rejection(() => parseChatCompletionRequest([1, 2]));
    expect(error.status).toBe(400);
    expect(error.param).toBeNull();
  });
});

describe('completion requests', () => {
  it.each([
    ['text', 'hello'],
    ['batch of texts', ['a', 'b']],
    ['token ids', [1, 2, 3]],
    ['batch of token ids', [[1, 2], [3]]],
  ])('accepts a %s prompt', (_name, prompt) => {
    expect(parseCompletionRequest({ model: 'm', prompt }).prompt).toEqual(prompt);
  });

  it.each([
    ['missing prompt', { model: 'm' }, 'prompt'],
    ['numeric prompt', { model: 'm', prompt: 5 }, 'prompt'],
    ['empty batch', { model: 'm', prompt: [] }, 'prompt'],
  ])('rejects %s', (_name, body, param) => {
    expect(rejection(() => parseCompletionRequest(body)).param).toBe(param);
  });
});

describe('requestedMaxTokens', () => {
  it.each([
    [{ ...chat }, undefined],
    [{ ...chat, max_tokens: 7 }, 7],
    [{ ...chat, max_tokens: 7, max_completion_tokens: 9 }, 9],
    [{ model: 'm', prompt: 'x' }, 16],
    [{ model: 'm', prompt: 'x', max_tokens: 3 }, 3],
  ])('%j -> %s', (body, expected) => {
    const request =
      'messages' in body ? parseChatCompletionRequest(body) : parseCompletionRequest(body);
    expect(requestedMaxTokens(request)).toBe(expected);
  });
});

describe('parseJsonBody', () => {
  it('parses JSON and rejects garbage with a 400 in the OpenAI shape', () => {
    expect(parseJsonBody('{"a":1}')).toEqual({ a: 1 });
    const error = rejection(() => parseJsonBody('{"a":'));
    expect(error.status).toBe(400);
    expect(error.code).toBe('invalid_json');
  });
});
