import { describe, expect, it } from 'vitest';
import { BatchInputError, MAX_CUSTOM_ID_LENGTH, parseBatchInput } from '../src/batch/jsonl.js';

const chatBody = { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }] };
const completionBody = { model: 'sim-model', prompt: 'hello', max_tokens: 4 };

/** One input line (an object, serialized), with any field overridden or removed (undefined). */
function line(customId: string, overrides: Record<string, unknown> = {}): string {
  return JSON.stringify({
    custom_id: customId,
    method: 'POST',
    url: '/v1/chat/completions',
    body: chatBody,
    ...overrides,
  });
}

function failure(text: string, maxLines = 100): BatchInputError {
  try {
    parseBatchInput(text, { maxLines });
  } catch (error) {
    if (error instanceof BatchInputError) return error;
    throw error;
  }
  throw new Error('parseBatchInput accepted the file');
}

describe('parseBatchInput: valid files', () => {
  it('parses every endpoint, keeping custom ids, urls, models and the bodies as JSON', () => {
    const embedding = { model: 'embedder', input: ['a text', 'another'] };
    const text = [
      line('a'),
      line('b', { url: '/v1/completions', body: { ...completionBody, model: 'other' } }),
      line('c', { url: '/v1/embeddings', body: embedding }),
    ].join('\n');
    expect(parseBatchInput(text, { maxLines: 10 })).toEqual([
      {
        line: 1,
        customId: 'a',
        url: '/v1/chat/completions',
        body: JSON.stringify(chatBody),
        model: 'sim-model',
      },
      {
        line: 2,
        customId: 'b',
        url: '/v1/completions',
        body: JSON.stringify({ ...completionBody, model: 'other' }),
        model: 'other',
      },
      {
        line: 3,
        customId: 'c',
        url: '/v1/embeddings',
        body: JSON.stringify(embedding),
        model: 'embedder',
      },
    ]);
  });

  it('keeps the body as written (re-serialized, unknown fields kept, no defaults added)', () => {
    const body = { model: 'm', prompt: 'p', vendor_field: { x: 1 } };
    const text = `{"custom_id":"a","method":"POST","url":"/v1/completions","body":  ${JSON.stringify(body, null, 2).replaceAll('\n', ' ')}}`;
    const [parsed] = parseBatchInput(text, { maxLines: 1 });
    expect(parsed?.body).toBe(JSON.stringify(body));
  });

  it.each([
    ['blank lines between and after', `${line('a')}\n\n   \n${line('b')}\n\n`, [1, 4]],
    ['leading blank lines', `\n\t\n${line('a')}`, [3]],
    ['CRLF endings', `${line('a')}\r\n\r\n${line('b')}\r\n`, [1, 3]],
    ['a trailing newline', `${line('a')}\n`, [1]],
    ['no trailing newline', line('a'), [1]],
    ['a byte order mark', `\uFEFF${line('a')}\n${line('b')}`, [1, 2]],
  ])('counts line numbers with %s', (_name, text, lines) => {
    expect(parseBatchInput(text, { maxLines: 10 }).map((entry) => entry.line)).toEqual(lines);
  });

  it('accepts exactly maxLines requests (blank lines do not count)', () => {
    const text = `${line('a')}\n\n${line('b')}\n\n${line('c')}\n\n`;
    expect(parseBatchInput(text, { maxLines: 3 })).toHaveLength(3);
  });

  it(`accepts a custom_id of ${MAX_CUSTOM_ID_LENGTH} characters`, () => {
    expect(parseBatchInput(line('x'.repeat(MAX_CUSTOM_ID_LENGTH)), { maxLines: 1 })).toHaveLength(
      1,
    );
  });
});

describe('parseBatchInput: the first bad line', () => {
  it.each<[string, string, number, string, RegExp]>([
    ['not JSON', `${line('a')}\n{"custom_id": `, 2, 'invalid_json', /not valid JSON/],
    ['a JSON array', '[1, 2]', 1, 'invalid_json', /JSON object/],
    ['a JSON string', '"text"', 1, 'invalid_json', /JSON object/],
    ['JSON null', 'null', 1, 'invalid_json', /JSON object/],
    ['two requests split by a lone CR', `${line('a')}\r${line('b')}`, 1, 'invalid_json', /JSON/],
    ['no custom_id', line('a', { custom_id: undefined }), 1, 'missing_custom_id', /custom_id/],
    ['a numeric custom_id', line('a', { custom_id: 7 }), 1, 'missing_custom_id', /custom_id/],
    ['an empty custom_id', line(''), 1, 'missing_custom_id', /non-empty/],
    [
      'a custom_id too long',
      line('x'.repeat(MAX_CUSTOM_ID_LENGTH + 1)),
      1,
      'missing_custom_id',
      /at most 512/,
    ],
    [
      'a duplicate custom_id',
      `${line('a')}\n\n${line('b')}\n${line('a')}`,
      4,
      'duplicate_custom_id',
      /'a' is already used on line 1/,
    ],
    ['no method', line('a', { method: undefined }), 1, 'invalid_method', /"POST"/],
    ['method GET', line('a', { method: 'GET' }), 1, 'invalid_method', /"POST"/],
    ['method post (case)', line('a', { method: 'post' }), 1, 'invalid_method', /"POST"/],
    [
      'an unknown url',
      line('a', { url: '/v1/rerank' }),
      1,
      'invalid_url',
      /one of: \/v1\/chat\/completions, \/v1\/completions, \/v1\/embeddings/,
    ],
    [
      'an embeddings line without input',
      line('a', { url: '/v1/embeddings', body: { model: 'm' } }),
      1,
      'invalid_body',
      /input/,
    ],
    ['no url', line('a', { url: undefined }), 1, 'invalid_url', /one of/],
    ['a url with a query', line('a', { url: '/v1/completions?x=1' }), 1, 'invalid_url', /one of/],
    ['no body', line('a', { body: undefined }), 1, 'invalid_body', /body is missing/],
    ['a body not an object', line('a', { body: 'text' }), 1, 'invalid_body', /invalid body/],
    [
      'a chat body without messages',
      line('a', { body: { model: 'm' } }),
      1,
      'invalid_body',
      /messages/,
    ],
    ['a body without model', line('a', { body: { messages: [] } }), 1, 'invalid_body', /model/],
    [
      'a streaming body',
      line('a', { body: { ...chatBody, stream: true } }),
      1,
      'invalid_body',
      /stream: true is not supported/,
    ],
    [
      'a chat body sent to completions',
      line('a', { url: '/v1/completions' }),
      1,
      'invalid_body',
      /prompt/,
    ],
    [
      'a bad sampling field',
      line('a', { body: { ...chatBody, temperature: -1 } }),
      1,
      'invalid_body',
      /temperature/,
    ],
  ])('%s', (_name, text, lineNumber, code, message) => {
    const error = failure(text);
    expect(error).toMatchObject({ line: lineNumber, code });
    expect(error.message.startsWith(`Line ${lineNumber}: `)).toBe(true);
    expect(error.message).toMatch(message);
  });

  it('stops at the first bad line, counting blank and CRLF lines', () => {
    const text = `${line('a')}\r\n\r\n  \r\n${line('b', { method: 'PUT' })}\r\nnot json\r\n`;
    expect(failure(text)).toMatchObject({ line: 4, code: 'invalid_method' });
  });

  it('refuses more than maxLines requests at the first request past the limit', () => {
    const text = `${line('a')}\n\n${line('b')}\n${line('c')}\nnot json`;
    const error = failure(text, 2);
    expect(error).toMatchObject({ line: 4, code: 'too_many_lines' });
    expect(error.message).toBe('Line 4: the file has more than 2 requests');
  });

  it.each([
    ['an empty file', ''],
    ['only blank lines', '\n  \r\n\t\n'],
    ['only a byte order mark', '\uFEFF'],
  ])('refuses %s as empty_file (line 0)', (_name, text) => {
    expect(failure(text)).toMatchObject({
      line: 0,
      code: 'empty_file',
      message: 'The file has no request line',
    });
  });
});
