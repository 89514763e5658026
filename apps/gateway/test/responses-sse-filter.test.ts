import { errorBody } from '@fairgate/openai';
import { describe, expect, it } from 'vitest';
import { ResponsesSseFilter } from '../src/upstream/responses-sse-filter.js';

const event = (type: string, data: Record<string, unknown>) =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

const USAGE = {
  input_tokens: 12,
  input_tokens_details: { cached_tokens: 4 },
  output_tokens: 3,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 15,
};

const STREAM = [
  event('response.created', { sequence_number: 0 }),
  event('response.in_progress', { sequence_number: 1 }),
  event('response.output_text.delta', { sequence_number: 2, delta: 'héllo' }),
  event('response.output_text.delta', { sequence_number: 3, delta: ' world' }),
  event('response.completed', {
    sequence_number: 4,
    response: { status: 'completed', usage: USAGE },
  }),
].join('');

/** The stream cut into pieces of `size` bytes (splitting events and characters). */
function pieces(size: number): Buffer[] {
  const bytes = Buffer.from(STREAM);
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(bytes.subarray(at, at + size));
  return out;
}

describe('ResponsesSseFilter', () => {
  it.each([1, 7, 64, 10_000])(
    'reads %i-byte pieces: bytes as sent, one first token, the final usage',
    (size) => {
      let firstTokens = 0;
      const filter = new ResponsesSseFilter(() => {
        firstTokens += 1;
      });
      const out: Buffer[] = [];
      for (const piece of pieces(size)) out.push(...filter.push(piece));
      expect(Buffer.concat(out).toString()).toBe(STREAM);
      expect(firstTokens).toBe(1);
      expect(filter.done).toBe(true);
      expect(filter.usage).toEqual({
        prompt_tokens: 12,
        completion_tokens: 3,
        total_tokens: 15,
        prompt_tokens_details: { cached_tokens: 4 },
      });
    },
  );

  it('is not done, and has no usage, before its terminal event; nothing passes after it', () => {
    const filter = new ResponsesSseFilter(() => {}, 40);
    filter.push(Buffer.from(event('response.created', { sequence_number: 0 })));
    expect([filter.done, filter.usage, filter.usageSoFar]).toEqual([false, undefined, undefined]);
    // Cut short after output: the prompt as estimated, a token per delta.
    for (const delta of ['a', 'b', 'c']) {
      filter.push(Buffer.from(event('response.output_text.delta', { delta })));
    }
    expect(filter.usageSoFar).toEqual({
      prompt_tokens: 40,
      completion_tokens: 3,
      total_tokens: 43,
    });
    filter.push(Buffer.from(event('response.incomplete', { response: { usage: USAGE } })));
    expect(filter.done).toBe(true);
    expect(filter.usageSoFar).toBe(filter.usage);
    expect(filter.push(Buffer.from(event('response.created', {})))).toEqual([]);
  });

  it("frames an error as the Responses API's error event, numbered after the last event read", () => {
    const filter = new ResponsesSseFilter(() => {});
    const body = errorBody(
      'upstream stream failed: reset',
      'upstream_error',
      null,
      'upstream_reset',
    );
    const parse = (text: string) => {
      expect(text.startsWith('event: error\ndata: ')).toBe(true);
      expect(text.endsWith('\n\n')).toBe(true);
      return JSON.parse(text.slice('event: error\ndata: '.length));
    };
    expect(parse(filter.errorEvent(body)).sequence_number).toBe(0);
    filter.push(Buffer.from(event('response.created', { sequence_number: 0 })));
    filter.push(Buffer.from(event('response.in_progress', { sequence_number: 1 })));
    expect(parse(filter.errorEvent(body))).toEqual({
      type: 'error',
      code: 'upstream_reset',
      message: 'upstream stream failed: reset',
      param: null,
      sequence_number: 2,
    });
  });
});
