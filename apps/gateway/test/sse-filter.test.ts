import { createSseDecoder, type Usage } from '@fairgate/openai';
import { describe, expect, it, vi } from 'vitest';
import { eventData, SseFilter } from '../src/upstream/sse-filter.js';

/**
 * The SseFilter against a reference: the stream decoded whole by eventsource-parser and
 * each event transformed as the gateway's contract says (docs/gateway.md, step 5): the
 * usage chunk dropped and each chunk's usage member cut for clients that did not ask,
 * a chunk's usage so far nulled for clients that asked for include_usage only, nothing
 * after `[DONE]`, t5 at the first event with content. Every stream is fed whole, split at
 * every byte, and in random pieces, for the three kinds of client; each must see the same
 * events each time.
 */
const usage: Usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
const chunk = (delta: Record<string, unknown>, extra = ',"usage":null') =>
  `{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":${JSON.stringify(delta)},"finish_reason":null}]${extra}}`;
const text = (t: string) =>
  `{"id":"c2","object":"text_completion","choices":[{"index":0,"text":${JSON.stringify(t)},"finish_reason":null}],"usage":null}`;
const usageChunk = `{"id":"c1","object":"chat.completion.chunk","choices":[],"usage":${JSON.stringify(usage)}}`;
const sse = (...datas: string[]) => datas.map((d) => `data: ${d}\n\n`).join('');

interface Case {
  name: string;
  stream: string;
  /** The events' data as the client must see them, with and without include_usage. */
  wantsUsage: string[];
  hidesUsage: string[];
  /** As a client that asked for continuous_usage_stats too sees them (default wantsUsage). */
  continuousUsage?: string[];
  /** Whether any event has content (t5 fires once) or none does. */
  firstToken: number;
  /** The final chunk's usage. */
  usage: Usage | undefined;
  /** The usage the pod reported last (default `usage`). */
  usageSoFar?: Usage | undefined;
  done: boolean;
}

const roleChunk = chunk({ role: 'assistant', content: '' });
const cut = (d: string) => d.replace(',"usage":null}', '}');
const toolCall = chunk({
  tool_calls: [
    { index: 0, id: 't1', type: 'function', function: { name: 'weather', arguments: '' } },
  ],
});
const toolArguments = chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city"' } }] });
const CASES: Case[] = [
  {
    name: 'a chat stream with usage (vLLM)',
    stream: sse(
      roleChunk,
      chunk({ content: 'Hel' }),
      chunk({ content: 'lo é 🚀' }),
      usageChunk,
      '[DONE]',
    ),
    wantsUsage: [
      roleChunk,
      chunk({ content: 'Hel' }),
      chunk({ content: 'lo é 🚀' }),
      usageChunk,
      '[DONE]',
    ],
    hidesUsage: [
      cut(roleChunk),
      cut(chunk({ content: 'Hel' })),
      cut(chunk({ content: 'lo é 🚀' })),
      '[DONE]',
    ],
    firstToken: 1,
    usage,
    done: true,
  },
  {
    name: 'a tool-call stream (vLLM): t5 at the call, which has no content',
    stream: sse(roleChunk, toolCall, toolArguments, usageChunk, '[DONE]'),
    wantsUsage: [roleChunk, toolCall, toolArguments, usageChunk, '[DONE]'],
    hidesUsage: [cut(roleChunk), cut(toolCall), cut(toolArguments), '[DONE]'],
    firstToken: 1,
    usage,
    done: true,
  },
  {
    name: 'a completions stream',
    stream: sse(text('a'), text('b\\n"usage":null}'), usageChunk, '[DONE]'),
    wantsUsage: [text('a'), text('b\\n"usage":null}'), usageChunk, '[DONE]'],
    hidesUsage: [
      cut(text('a')),
      text('b\\n"usage":null}').replace(/,"usage":null}$/, '}'),
      '[DONE]',
    ],
    firstToken: 0,
    usage,
    done: true,
  },
  {
    name: 'nothing after [DONE]',
    stream: `${sse(chunk({ content: 'x' }), '[DONE]')}data: {"late":true}\n\n`,
    wantsUsage: [chunk({ content: 'x' }), '[DONE]'],
    hidesUsage: [cut(chunk({ content: 'x' })), '[DONE]'],
    firstToken: 0,
    usage: undefined,
    done: true,
  },
  {
    name: 'comments, other fields, multi-line data and non-JSON data',
    stream: `: keep-alive\n\nevent: message\ndata: ${chunk({ content: 'a' })}\n\ndata: not json\n\ndata: {"x":\ndata: 1,"usage":null}\n\n${sse('[DONE]')}`,
    wantsUsage: [chunk({ content: 'a' }), 'not json', '{"x":\n1,"usage":null}', '[DONE]'],
    hidesUsage: [cut(chunk({ content: 'a' })), 'not json', '{"x":\n1}', '[DONE]'],
    firstToken: 0,
    usage: undefined,
    done: true,
  },
  {
    name: 'a stream that ends without [DONE] (the last event unterminated)',
    stream: `${sse(chunk({ content: 'a' }))}data: ${chunk({ content: 'b' })}`,
    wantsUsage: [chunk({ content: 'a' })],
    hidesUsage: [cut(chunk({ content: 'a' }))],
    firstToken: 0,
    usage: undefined,
    done: false,
  },
  {
    name: 'usage in a content chunk (continuous usage stats) is read, and shown as asked',
    stream: sse(chunk({ content: 'a' }, `,"usage":${JSON.stringify(usage)}`), '[DONE]'),
    wantsUsage: [chunk({ content: 'a' }), '[DONE]'],
    hidesUsage: [cut(chunk({ content: 'a' })), '[DONE]'],
    continuousUsage: [chunk({ content: 'a' }, `,"usage":${JSON.stringify(usage)}`), '[DONE]'],
    firstToken: 0,
    usage: undefined,
    usageSoFar: usage,
    done: true,
  },
  ...continuousCases(),
  {
    name: 'CRLF framing',
    stream: sse(roleChunk, chunk({ content: 'a' }), usageChunk, '[DONE]').replaceAll('\n', '\r\n'),
    wantsUsage: [roleChunk, chunk({ content: 'a' }), usageChunk, '[DONE]'],
    hidesUsage: [cut(roleChunk), cut(chunk({ content: 'a' })), '[DONE]'],
    firstToken: 1,
    usage,
    done: true,
  },
  {
    name: 'no content at all',
    stream: sse(roleChunk, '[DONE]'),
    wantsUsage: [roleChunk, '[DONE]'],
    hidesUsage: [cut(roleChunk), '[DONE]'],
    firstToken: -1,
    usage: undefined,
    done: true,
  },
];

/**
 * Streams as vLLM sends them with continuous_usage_stats (the gateway forces it on): every
 * chunk carries the usage so far in vLLM's field order (the role chunk's with no completion
 * tokens), then the final usage chunk; whole, cut short (the client left), with
 * prompt_tokens_details, `\r`-framed, and with a usage-like member that is not the last.
 */
function continuousCases(): Case[] {
  const soFar = (completion: number, details = '') =>
    `,"usage":{"prompt_tokens":7,"total_tokens":${7 + completion},"completion_tokens":${completion}${details}}`;
  const nulled = (d: string) => d.replace(/,"usage":\{[^{}]*(\{[^{}]*\})?\}\}$/, ',"usage":null}');
  const hidden = (d: string) => d.replace(/,"usage":\{[^{}]*(\{[^{}]*\})?\}\}$/, '}');
  const role = chunk({ role: 'assistant', content: '' }, soFar(0));
  const tokens = ['Hel', 'lo é 🚀', '"usage":{"x":1}}'].map((t, i) =>
    chunk({ content: t }, soFar(i + 1)),
  );
  const final = `{"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}`;
  const finalUsage: Usage = { prompt_tokens: 7, total_tokens: 10, completion_tokens: 3 };
  const whole = [role, ...tokens];
  const completions = [1, 2].map(
    (n) =>
      `{"id":"c2","object":"text_completion","choices":[{"index":0,"text":"t${n}","finish_reason":null}]${soFar(n)}}`,
  );
  const details = chunk({ content: 'a' }, soFar(1, ',"prompt_tokens_details":{"cached_tokens":4}'));
  const notLast = `{"id":"c1","choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9},"extra":{"usage":{"a":1}}}`;
  return [
    {
      name: 'a continuous-usage chat stream (vLLM)',
      stream: sse(...whole, final, '[DONE]'),
      wantsUsage: [...whole.map(nulled), final, '[DONE]'],
      hidesUsage: [...whole.map(hidden), '[DONE]'],
      continuousUsage: [...whole, final, '[DONE]'],
      firstToken: 1,
      usage: finalUsage,
      done: true,
    },
    {
      name: 'a continuous-usage stream the client left mid-way (no final chunk)',
      stream: sse(role, tokens[0]!, tokens[1]!),
      wantsUsage: [nulled(role), nulled(tokens[0]!), nulled(tokens[1]!)],
      hidesUsage: [hidden(role), hidden(tokens[0]!), hidden(tokens[1]!)],
      continuousUsage: [role, tokens[0]!, tokens[1]!],
      firstToken: 1,
      usage: undefined,
      usageSoFar: { prompt_tokens: 7, total_tokens: 9, completion_tokens: 2 },
      done: false,
    },
    {
      name: 'only the role chunk came (usage so far: the prompt)',
      stream: sse(role),
      wantsUsage: [nulled(role)],
      hidesUsage: [hidden(role)],
      continuousUsage: [role],
      firstToken: -1,
      usage: undefined,
      usageSoFar: { prompt_tokens: 7, total_tokens: 7, completion_tokens: 0 },
      done: false,
    },
    {
      name: 'a continuous-usage completions stream',
      stream: sse(
        ...completions,
        final.replace('chat.completion.chunk', 'text_completion'),
        '[DONE]',
      ),
      wantsUsage: [
        ...completions.map(nulled),
        final.replace('chat.completion.chunk', 'text_completion'),
        '[DONE]',
      ],
      hidesUsage: [...completions.map(hidden), '[DONE]'],
      continuousUsage: [
        ...completions,
        final.replace('chat.completion.chunk', 'text_completion'),
        '[DONE]',
      ],
      firstToken: 0,
      usage: finalUsage,
      done: true,
    },
    {
      name: 'usage so far with prompt_tokens_details',
      stream: sse(details),
      wantsUsage: [nulled(details)],
      hidesUsage: [hidden(details)],
      continuousUsage: [details],
      firstToken: 0,
      usage: undefined,
      usageSoFar: {
        prompt_tokens: 7,
        total_tokens: 8,
        completion_tokens: 1,
        prompt_tokens_details: { cached_tokens: 4 },
      },
      done: false,
    },
    {
      name: 'a usage object that is not the last member is read and relayed as it is',
      stream: sse(chunk({ content: 'a' }, soFar(1)), notLast),
      wantsUsage: [nulled(chunk({ content: 'a' }, soFar(1))), notLast],
      hidesUsage: [hidden(chunk({ content: 'a' }, soFar(1))), notLast],
      continuousUsage: [chunk({ content: 'a' }, soFar(1)), notLast],
      firstToken: 0,
      usage: undefined,
      usageSoFar: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 },
      done: false,
    },
    {
      // (A CR-framed event is known to have ended once the next byte comes: the comment.)
      name: 'a continuous-usage stream, CR framing',
      stream: `${sse(...whole, final, '[DONE]')}: after\n\n`.replaceAll('\n', '\r'),
      wantsUsage: [...whole.map(nulled), final, '[DONE]'],
      hidesUsage: [...whole.map(hidden), '[DONE]'],
      continuousUsage: [...whole, final, '[DONE]'],
      firstToken: 1,
      usage: finalUsage,
      done: true,
    },
    {
      // (CR-only framing cannot tell the last event ended until another byte comes.)
      name: 'a continuous-usage stream cut short, CRLF framing',
      stream: sse(role, tokens[0]!).replaceAll('\n', '\r\n'),
      wantsUsage: [nulled(role), nulled(tokens[0]!)],
      hidesUsage: [hidden(role), hidden(tokens[0]!)],
      continuousUsage: [role, tokens[0]!],
      firstToken: 1,
      usage: undefined,
      usageSoFar: { prompt_tokens: 7, total_tokens: 8, completion_tokens: 1 },
      done: false,
    },
  ];
}

type Client = 'hides usage' | 'wants usage' | 'wants continuous usage';
const CLIENTS: Client[] = ['wants usage', 'hides usage', 'wants continuous usage'];

/** Runs `pieces` through a filter: the client's events, how often t5 fired, usage, done. */
function run(pieces: Buffer[], client: Client | boolean) {
  const kind = typeof client === 'boolean' ? (client ? 'wants usage' : 'hides usage') : client;
  const out: Buffer[] = [];
  let fired = 0;
  const filter = new SseFilter(
    kind !== 'hides usage',
    () => {
      fired += 1;
    },
    kind === 'wants continuous usage',
  );
  for (const piece of pieces) out.push(...filter.push(piece));
  const events: string[] = [];
  const decoder = createSseDecoder((event) => events.push(event.data));
  decoder.feed(Buffer.concat(out));
  decoder.end();
  return { events, fired, usage: filter.usage, usageSoFar: filter.usageSoFar, done: filter.done };
}

function splits(bytes: Buffer): Buffer[][] {
  const all: Buffer[][] = [[bytes]];
  for (let at = 1; at < bytes.length; at++) all.push([bytes.subarray(0, at), bytes.subarray(at)]);
  let seed = 7;
  const random = () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  for (let trial = 0; trial < 50; trial++) {
    const pieces: Buffer[] = [];
    let start = 0;
    while (start < bytes.length) {
      const end = Math.min(bytes.length, start + 1 + Math.floor(random() * 40));
      pieces.push(bytes.subarray(start, end));
      start = end;
    }
    all.push(pieces);
  }
  return all;
}

describe('SseFilter', () => {
  for (const c of CASES) {
    for (const client of CLIENTS) {
      it(`${c.name}, client ${client}, at every split`, () => {
        const expected =
          client === 'wants usage'
            ? c.wantsUsage
            : client === 'hides usage'
              ? c.hidesUsage
              : (c.continuousUsage ?? c.wantsUsage);
        const usageSoFar = 'usageSoFar' in c ? c.usageSoFar : c.usage;
        for (const pieces of splits(Buffer.from(c.stream))) {
          const result = run(pieces, client);
          expect(result.events).toEqual(expected);
          expect(result.fired).toBe(c.firstToken >= 0 ? 1 : 0);
          expect(result.usage).toEqual(c.usage);
          expect(result.usageSoFar).toEqual(usageSoFar);
          expect(result.done).toBe(c.done);
        }
      });
    }
  }

  it('keeps the usage so far as text, parsed only when read', () => {
    const filter = new SseFilter(false, () => {});
    const parse = vi.spyOn(JSON, 'parse');
    try {
      const chunks = Array.from({ length: 64 }, (_, i) =>
        chunk(
          { content: `t${i}` },
          `,"usage":{"prompt_tokens":7,"total_tokens":${8 + i},"completion_tokens":${i + 1}}`,
        ),
      );
      const out = filter.push(Buffer.from(sse(...chunks)));
      // The first chunk (before t5) is decoded, not parsed; none of the others is either.
      expect(parse).not.toHaveBeenCalled();
      expect(Buffer.concat(out).toString()).not.toContain('usage');
      expect(filter.usageSoFar).toEqual({
        prompt_tokens: 7,
        total_tokens: 71,
        completion_tokens: 64,
      });
      expect(parse).toHaveBeenCalledTimes(1);
    } finally {
      parse.mockRestore();
    }
  });

  it('passes a continuous-usage stream through unchanged for a client that asked, in slices', () => {
    const usageOf = (n: number) =>
      `,"usage":{"prompt_tokens":7,"total_tokens":${7 + n},"completion_tokens":${n}}`;
    const filter = new SseFilter(true, () => {}, true);
    const head = Buffer.from(
      sse(
        chunk({ role: 'assistant', content: '' }, usageOf(0)),
        chunk({ content: 'a' }, usageOf(1)),
      ),
    );
    expect(Buffer.concat(filter.push(head)).equals(head)).toBe(true);
    const later = Buffer.from(
      sse(chunk({ content: 'b' }, usageOf(2)), chunk({ content: 'c' }, usageOf(3))),
    );
    const [slice] = filter.push(later);
    expect(slice!.buffer).toBe(later.buffer);
    expect(filter.usageSoFar?.completion_tokens).toBe(3);
  });

  it('passes an unchanged stream through byte for byte, in slices of the pod buffers', () => {
    const stream = Buffer.from(sse(roleChunk, chunk({ content: 'a' }), usageChunk));
    const filter = new SseFilter(true, () => {});
    expect(Buffer.concat(filter.push(stream)).equals(stream)).toBe(true);
    // Events after the first token are not copied: the output shares the input's memory.
    const later = Buffer.from(sse(chunk({ content: 'b' }), chunk({ content: 'c' })));
    const [slice] = filter.push(later);
    expect(slice!.buffer).toBe(later.buffer);
  });

  it('fires t5 as the first content event is handed on, not before', () => {
    const order: string[] = [];
    const filter = new SseFilter(false, () => order.push('t5'));
    for (const event of [roleChunk, chunk({ content: 'a' })]) {
      if (filter.push(Buffer.from(sse(event))).length > 0) order.push('bytes');
    }
    expect(order).toEqual(['bytes', 't5', 'bytes']);
  });

  it('reads the data of an event as the SSE spec does', () => {
    expect(eventData(Buffer.from('data: x\n\n'))).toBe('x');
    expect(eventData(Buffer.from('data:x\n\n'))).toBe('x');
    expect(eventData(Buffer.from('data:  x\n\n'))).toBe(' x');
    expect(eventData(Buffer.from(': comment\n\n'))).toBeUndefined();
    expect(eventData(Buffer.from('id: 1\ndata: a\ndata: b\n\n'))).toBe('a\nb');
  });
});
