import { describe, expect, it } from 'vitest';
import { type ExchangeRequest, upstreamBody } from '../src/upstream/exchange.js';
import { SlotAbort } from '../src/upstream/slot-abort.js';

/**
 * The body sent to the pod: the client's text, with include_usage and continuous_usage_stats
 * forced on for streams.
 */
function sent(text: string): unknown {
  const body = JSON.parse(text) as Record<string, unknown>;
  const request: ExchangeRequest = {
    path: '/v1/chat/completions',
    text,
    stream: body.stream === true,
    hasStreamOptions: 'stream_options' in body,
    headers: {},
    signal: new SlotAbort(),
    clientWantsUsage: false,
    clientWantsContinuousUsage: false,
  };
  return upstreamBody(request);
}

const messages = [{ role: 'user', content: 'hi "there" }' }];

describe('upstreamBody', () => {
  it('forwards a non-stream body as the client sent it, byte for byte', () => {
    const text = `{"model":"m", "messages":${JSON.stringify(messages)},"vllm_extra":{"a":1}}  \n`;
    expect(sent(text)).toBe(text);
  });

  it('appends the forced stream_options to a body without them, the rest byte for byte', () => {
    const text = `{"model":"m", "messages":${JSON.stringify(messages)},"stream":true}\n`;
    expect(sent(text)).toBe(
      `{"model":"m", "messages":${JSON.stringify(messages)},"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
    );
  });

  it.each([
    ['no stream_options', { stream: true }, { include_usage: true, continuous_usage_stats: true }],
    [
      'stream_options: null',
      { stream: true, stream_options: null },
      { include_usage: true, continuous_usage_stats: true },
    ],
    [
      'include_usage false and continuous_usage_stats',
      { stream: true, stream_options: { include_usage: false, continuous_usage_stats: true } },
      { include_usage: true, continuous_usage_stats: true },
    ],
    [
      'continuous_usage_stats false and another option',
      { stream: true, stream_options: { continuous_usage_stats: false, vllm_extra: 1 } },
      { include_usage: true, continuous_usage_stats: true, vllm_extra: 1 },
    ],
  ])(
    'forces include_usage and continuous_usage_stats on a stream (%s), keeping every other field',
    (_name, extra, options) => {
      const client = { model: 'm', messages, ...extra, top_k: 5 };
      const forwarded = JSON.parse(sent(`${JSON.stringify(client, null, 2)}\n`) as string);
      expect(forwarded).toEqual({ ...client, stream_options: options });
    },
  );
});
