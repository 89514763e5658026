import { describe, expect, it } from 'vitest';
import { usageOf } from '../src/upstream/exchange.js';

describe('usageOf: the usage of a JSON answer, as the gateway meters it', () => {
  it.each([
    [
      'a chat completion (usage last)',
      '{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}',
      { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
    ],
    [
      'usage not last',
      '{"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7},"id":"c"}',
      { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
    ],
    [
      'embeddings: no completion_tokens',
      '{"object":"list","data":[],"usage":{"prompt_tokens":9,"total_tokens":9}}',
      { prompt_tokens: 9, completion_tokens: 0, total_tokens: 9 },
    ],
    [
      "vLLM's rerank: total_tokens alone",
      '{"id":"r","results":[],"usage":{"total_tokens":12}}',
      { prompt_tokens: 12, completion_tokens: 0, total_tokens: 12 },
    ],
    [
      'a Responses answer',
      '{"id":"r","usage":{"input_tokens":7,"input_tokens_details":{"cached_tokens":4},"output_tokens":3,"total_tokens":10}}',
      {
        prompt_tokens: 7,
        completion_tokens: 3,
        total_tokens: 10,
        prompt_tokens_details: { cached_tokens: 4 },
      },
    ],
    [
      "a transcription's seconds of audio (50 tokens a second)",
      '{"text":"hi","usage":{"type":"duration","seconds":2.5}}',
      { prompt_tokens: 125, completion_tokens: 0, total_tokens: 125 },
    ],
    ['no usage', '{"id":"c","choices":[]}', undefined],
    ['usage null', '{"id":"c","usage":null}', undefined],
    ['usage without counts', '{"id":"c","usage":{}}', undefined],
    ['usage not an object', '{"id":"c","usage":3}', undefined],
    ['not JSON', 'upstream says no', undefined],
  ])('%s', (_name, text, usage) => {
    expect(usageOf(text)).toEqual(usage);
  });
});
