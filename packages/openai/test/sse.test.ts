import { describe, expect, it } from 'vitest';
import {
  createSseDecoder,
  decodeSseStream,
  encodeSseData,
  encodeSseError,
  errorBody,
  isOpenAIErrorBody,
  SSE_DONE,
} from '../src/index.js';

const events = [
  { id: 'a', choices: [{ delta: { content: 'héllo 🌍' } }] },
  { id: 'b', choices: [{ delta: { content: 'line\nbreak' } }] },
  { id: 'c', choices: [], usage: { prompt_tokens: 3 } },
];
const wire = events.map(encodeSseData).join('') + SSE_DONE;
const expected = [...events.map((e) => JSON.stringify(e)), '[DONE]'];

function decodeAll(chunks: Array<Uint8Array | string>): string[] {
  const out: string[] = [];
  const decoder = createSseDecoder((event) => out.push(event.data));
  for (const chunk of chunks) decoder.feed(chunk);
  decoder.end();
  return out;
}

describe('SSE codec', () => {
  it('round-trips in one chunk', () => {
    expect(decodeAll([wire])).toEqual(expected);
  });

  it('is correct when the bytes are split at every possible point (incl. inside UTF-8)', () => {
    const bytes = new TextEncoder().encode(wire);
    for (let cut = 1; cut < bytes.length; cut++) {
      expect(decodeAll([bytes.subarray(0, cut), bytes.subarray(cut)])).toEqual(expected);
    }
  });

  it('is correct byte by byte and with CRLF line endings', () => {
    const bytes = new TextEncoder().encode(wire.replaceAll('\n\n', '\r\n\r\n'));
    const single = Array.from(bytes, (b) => Uint8Array.of(b));
    expect(decodeAll(single)).toEqual(expected);
  });

  it('ignores comments and keep-alives', () => {
    expect(decodeAll([': ping\n\n', 'data: 1\n\n', ':\n\n', 'data: [DONE]\n\n'])).toEqual([
      '1',
      '[DONE]',
    ]);
  });

  it('decodes an async byte stream', async () => {
    const bytes = new TextEncoder().encode(wire);
    async function* source() {
      for (let at = 0; at < bytes.length; at += 7) yield bytes.subarray(at, at + 7);
    }
    const out: string[] = [];
    for await (const event of decodeSseStream(source())) out.push(event.data);
    expect(out).toEqual(expected);
  });

  it('encodes an in-stream error in the OpenAI shape followed by [DONE]', () => {
    const text = encodeSseError(
      errorBody('pod went away', 'upstream_error', null, 'upstream_reset'),
    );
    const [first, second] = decodeAll([text]);
    expect(isOpenAIErrorBody(JSON.parse(first!))).toBe(true);
    expect(second).toBe('[DONE]');
  });
});

describe('error shape', () => {
  it.each([
    [{ error: { message: 'm', type: 't', param: null, code: null } }, true],
    [{ error: { message: 'm', type: 't', param: 'p', code: 'c' } }, true],
    [{ error: { message: 'm', type: 't' } }, false],
    [{ error: 'm' }, false],
    [{ message: 'm' }, false],
    [null, false],
  ])('%j is OpenAI-shaped: %s', (value, ok) => {
    expect(isOpenAIErrorBody(value)).toBe(ok);
  });
});
