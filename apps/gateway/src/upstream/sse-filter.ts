import { createSseDecoder, SSE_DONE, SSE_DONE_DATA, type Usage } from '@fairgate/openai';

/**
 * The gateway's whole interest in a pod's SSE stream, done on the raw bytes as they
 * come: the first content token (t5), the usage of the final chunk, hiding that usage
 * from a client that did not ask for it (the gateway forces `include_usage` on), and
 * where `[DONE]` ends the stream. Everything else passes through byte for byte: the
 * bytes handed on are slices of the pod's buffers (no decoding, no re-serialisation)
 * unless an event is changed.
 *
 * How cheap: events are framed on `\n\n` (vLLM's framing). Once the first token was
 * seen, a chunk costs a few native `indexOf` scans: for `data: [DONE]`, for
 * `"usage":{` (only the final chunk has it; that one event is parsed) and, for a client
 * that did not ask for usage, for `,"usage":null}` at an event's end, which is cut (it
 * can only be the top-level object's last member there: inside JSON strings quotes are
 * escaped and newlines are `\n` escapes). Before the first token each event is looked at
 * (one or two events). A stream framed with `\r` (CRLF or CR line ends, allowed by the
 * SSE spec, sent by no known OpenAI-compatible server) is decoded event by event from
 * then on and re-encoded as `data: ...\n\n`.
 */
export class SseFilter {
  /** The usage of the stream, from the chunk that carries a `usage` object. */
  usage: Usage | undefined;
  /** True once `[DONE]` was passed on: nothing after it is. */
  done = false;
  #sawFirstToken = false;
  #carry: Buffer | undefined;
  #generic: ReturnType<typeof createSseDecoder> | undefined;
  #genericOut: string[] = [];

  constructor(
    private readonly clientWantsUsage: boolean,
    private readonly onFirstToken: () => void,
  ) {}

  /** The bytes to send the client for this chunk of the pod's body (possibly none). */
  push(chunk: Buffer): Buffer[] {
    if (this.done) return [];
    if (this.#generic) return this.#pushGeneric(chunk);
    const bytes = this.#carry ? Buffer.concat([this.#carry, chunk]) : chunk;
    this.#carry = undefined;
    if (bytes.includes(CR)) return this.#pushGeneric(bytes, true);
    const last = bytes.lastIndexOf(EVENT_END);
    if (last < 0) {
      this.#carry = bytes;
      return [];
    }
    const end = last + EVENT_END.length;
    if (end < bytes.length) this.#carry = bytes.subarray(end);
    return this.#events(bytes.subarray(0, end));
  }

  /** Complete events (`region` ends with `\n\n`). */
  #events(region: Buffer): Buffer[] {
    const doneAt = indexOfEventStart(region, DONE_EVENT);
    if (doneAt >= 0) {
      region = region.subarray(0, doneAt + DONE_EVENT.length);
      this.done = true;
      this.#carry = undefined;
    }
    if (this.#sawFirstToken && !region.includes(USAGE_OBJECT)) return this.#cutNullUsage(region);
    const out: Buffer[] = [];
    let start = 0;
    while (start < region.length) {
      const end = region.indexOf(EVENT_END, start) + EVENT_END.length;
      const event = region.subarray(start, end);
      start = end;
      const data = eventData(event);
      if (data === undefined) {
        out.push(event); // no data field (a comment, a blank line): as it came
        continue;
      }
      const relayed = this.#relayed(data);
      if (relayed === 'keep') out.push(event);
      else if (relayed === 'cut') out.push(...this.#cutNullUsage(event));
    }
    return out;
  }

  /** `region` with every event-final `,"usage":null}` cut to `}` (clients that did not ask). */
  #cutNullUsage(region: Buffer): Buffer[] {
    if (this.clientWantsUsage) return [region];
    const out: Buffer[] = [];
    let from = 0;
    for (;;) {
      const at = region.indexOf(NULL_USAGE_END, from);
      if (at < 0) break;
      out.push(region.subarray(from, at));
      from = at + NULL_USAGE_CUT; // keeps the closing brace and the event end
    }
    out.push(from === 0 ? region : region.subarray(from));
    return out;
  }

  /**
   * What becomes of an event with this data: sent as it is, dropped (the usage chunk of a
   * client that did not ask), or sent with its `,"usage":null` cut.
   */
  #relayed(data: string): 'keep' | 'drop' | 'cut' {
    if (data.includes('"usage":{')) {
      try {
        const parsed = JSON.parse(data) as { usage?: Usage; choices?: unknown[] };
        if (parsed.usage) this.usage = parsed.usage;
        if (!this.clientWantsUsage && parsed.choices?.length === 0) return 'drop';
      } catch {
        // not JSON: relayed as it is
      }
    }
    if (!this.#sawFirstToken && hasContent(data)) {
      this.#sawFirstToken = true;
      this.onFirstToken();
    }
    return !this.clientWantsUsage && data.endsWith(NULL_USAGE_SUFFIX) ? 'cut' : 'keep';
  }

  /** The `\r`-framed path: decoded event by event, re-encoded as `data: ...\n\n`. */
  #pushGeneric(chunk: Buffer, first = false): Buffer[] {
    if (first) {
      this.#generic = createSseDecoder(({ data }) => {
        if (this.done) return;
        if (data === SSE_DONE_DATA) {
          this.done = true;
          this.#genericOut.push(SSE_DONE);
          return;
        }
        const relayed = this.#relayed(data);
        if (relayed === 'keep') this.#genericOut.push(encodeData(data));
        else if (relayed === 'cut') {
          this.#genericOut.push(encodeData(`${data.slice(0, -NULL_USAGE_SUFFIX.length)}}`));
        }
      });
    }
    this.#generic!.feed(chunk);
    if (this.#genericOut.length === 0) return [];
    const text = this.#genericOut.join('');
    this.#genericOut.length = 0;
    return [Buffer.from(text)];
  }
}

const CR = 0x0d;
const EVENT_END = Buffer.from('\n\n');
const DONE_EVENT = Buffer.from(SSE_DONE);
const USAGE_OBJECT = Buffer.from('"usage":{');
const NULL_USAGE_SUFFIX = ',"usage":null}';
const NULL_USAGE_END = Buffer.from(`${NULL_USAGE_SUFFIX}\n\n`);
/** Bytes cut from NULL_USAGE_END: `,"usage":null` (the brace and the event end stay). */
const NULL_USAGE_CUT = NULL_USAGE_SUFFIX.length - 1;
const DATA_FIELD = Buffer.from('data:');

/** Where `event` starts an event of `region` (at its start or after a `\n`), or -1. */
function indexOfEventStart(region: Buffer, event: Buffer): number {
  let at = region.indexOf(event);
  while (at > 0 && region[at - 1] !== 0x0a) at = region.indexOf(event, at + 1);
  return at;
}

/**
 * The data of one `\n`-framed event (its `data:` lines joined by `\n`, one leading space
 * of each dropped, as the SSE spec reads them), or undefined when it has no data field.
 */
export function eventData(event: Buffer): string | undefined {
  const text = event.toString('utf8', 0, event.length - EVENT_END.length);
  if (!text.includes('\n')) {
    if (!event.subarray(0, DATA_FIELD.length).equals(DATA_FIELD)) return undefined;
    return text.charCodeAt(5) === 0x20 ? text.slice(6) : text.slice(5);
  }
  const lines: string[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('data:')) continue;
    lines.push(line.charCodeAt(5) === 0x20 ? line.slice(6) : line.slice(5));
  }
  return lines.length > 0 ? lines.join('\n') : undefined;
}

/** One SSE event carrying `data` (a line per `data:` field). */
function encodeData(data: string): string {
  return `data: ${data.replaceAll('\n', '\ndata: ')}\n\n`;
}

/**
 * True when a chunk carries generated text: a `"content"` (chat delta) or `"text"`
 * (completion) string member that is not empty. In a chunk those keys hold only the
 * generated text (logprobs' `"content"` is an array), and a quote inside a JSON string is
 * escaped, so the raw text tells without parsing.
 */
function hasContent(data: string): boolean {
  return hasNonEmptyString(data, '"content":"') || hasNonEmptyString(data, '"text":"');
}

function hasNonEmptyString(data: string, key: string): boolean {
  for (let at = data.indexOf(key); at >= 0; at = data.indexOf(key, at + key.length)) {
    if (data.charCodeAt(at + key.length) !== 0x22) return true;
  }
  return false;
}
