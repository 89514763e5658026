import { createSseDecoder, type Usage } from '@fairgate/openai';
import { describe, expect, it } from 'vitest';
import { eventData, SseFilter } from '../src/upstream/sse-filter.js';

/**
 * The SseFilter against a reference: the stream decoded whole by eventsource-parser and
 * each event transformed as the gateway's contract says (docs/gateway.md, step 5): the
 * usage chunk dropped and `"usage":null` cut for clients that did not ask, nothing after
 * `[DONE]`, t5 at the first event with content. Every stream is fed whole, split at every
 * byte, and in random pieces; the client must see the same events each time.
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
  /** Whether any event has content (t5 fires once) or none does. */
  firstToken: number;
  usage: Usage | undefined;
  done: boolean;
}

const roleChunk = chunk({ role: 'assistant', content: '' });
const cut = (d: string) => d.replace(',"usage":null}', '}');
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
    name: 'usage in a content chunk (continuous usage stats) is read, not hidden',
    stream: sse(chunk({ content: 'a' }, `,"usage":${JSON.stringify(usage)}`), '[DONE]'),
    wantsUsage: [chunk({ content: 'a' }, `,"usage":${JSON.stringify(usage)}`), '[DONE]'],
    hidesUsage: [chunk({ content: 'a' }, `,"usage":${JSON.stringify(usage)}`), '[DONE]'],
    firstToken: 0,
    usage,
    done: true,
  },
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

/** Runs `pieces` through a filter: the client's events, how often t5 fired, usage, done. */
function run(pieces: Buffer[], wantsUsage: boolean) {
  const out: Buffer[] = [];
  let fired = 0;
  const filter = new SseFilter(wantsUsage, () => {
    fired += 1;
  });
  for (const piece of pieces) out.push(...filter.push(piece));
  const events: string[] = [];
  const decoder = createSseDecoder((event) => events.push(event.data));
  decoder.feed(Buffer.concat(out));
  decoder.end();
  return { events, fired, usage: filter.usage, done: filter.done };
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
    for (const wantsUsage of [true, false]) {
      it(`${c.name}, client ${wantsUsage ? 'asked for' : 'did not ask for'} usage, at every split`, () => {
        const expected = wantsUsage ? c.wantsUsage : c.hidesUsage;
        for (const pieces of splits(Buffer.from(c.stream))) {
          const result = run(pieces, wantsUsage);
          expect(result.events).toEqual(expected);
          expect(result.fired).toBe(c.firstToken >= 0 ? 1 : 0);
          expect(result.usage).toEqual(c.usage);
          expect(result.done).toBe(c.done);
        }
      });
    }
  }

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
