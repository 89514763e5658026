import { createSseDecoder, SSE_DONE, SSE_DONE_DATA, type Usage } from '@fairgate/openai';

/**
 * The gateway's whole interest in a pod's SSE stream, done on the raw bytes as they
 * come: the first content token (t5), the usage of the final chunk, hiding that usage
 * from a client that did not ask for it (the gateway forces `include_usage` on), and
 * where `[DONE]` ends the stream. Everything else passes through byte for byte: the
 * bytes handed on are slices of the pod's buffers (no decoding, no re-serialisation)
 * unless an event is changed.
 *
 * How cheap: a read of the pod's body is turned into latin1 text once (a native copy;
 * byte offsets are then string offsets) and events are framed on `\n\n` (vLLM's framing)
 * with plain string searches. Only the events before the first token (one or two) and the
 * one carrying `"usage":{` (the final chunk) are decoded, and that one is parsed; any other
 * event is only checked, for a client that did not ask for usage, for an event-final
 * `,"usage":null}`, which is cut to `}` (it can only be the top-level object's last member
 * there: inside JSON strings quotes are escaped and newlines are `\n` escapes). A read
 * that changes nothing goes on as one slice of the pod's buffer; one with cuts as one new
 * buffer of the kept bytes. A stream framed with `\r` (CRLF or CR line ends, allowed by the
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
    // Scanned as latin1 text: one native copy, then byte offsets are string offsets and
    // every search is a plain string search (no native call, no Buffer per event).
    const text = bytes.toString('latin1');
    if (text.includes('\r')) return this.#pushGeneric(bytes, true);
    const last = text.lastIndexOf(EVENT_END);
    if (last < 0) {
      this.#carry = bytes;
      return [];
    }
    let end = last + EVENT_END.length;
    if (end < bytes.length) this.#carry = bytes.subarray(end);
    const doneAt = indexOfEventStart(text, SSE_DONE);
    if (doneAt >= 0) {
      end = doneAt + SSE_DONE.length;
      this.done = true;
      this.#carry = undefined;
    }
    return this.#events(bytes, text, end);
  }

  /**
   * The complete events of bytes[0, end) (`text` is the same bytes as latin1), as the
   * ranges kept: an unchanged region is one slice of the pod's buffer; cuts and drops make
   * one new buffer of the kept ranges. Only the events before the first token and the one
   * carrying a usage object are decoded; any other is only searched for its null usage.
   */
  #events(bytes: Buffer, text: string, end: number): Buffer[] {
    const kept = new KeptRanges();
    let nextUsage = text.indexOf(USAGE_OBJECT);
    for (let start = 0; start < end; ) {
      const eventEnd = text.indexOf(EVENT_END, start) + EVENT_END.length;
      if (nextUsage >= 0 && nextUsage < start) nextUsage = text.indexOf(USAGE_OBJECT, start);
      const decode = !this.#sawFirstToken || (nextUsage >= 0 && nextUsage < eventEnd);
      const relayed = decode ? this.#relayedEvent(bytes.subarray(start, eventEnd)) : 'cut';
      if (relayed === 'keep') kept.add(start, eventEnd);
      else if (relayed === 'cut') this.#cutNullUsage(text, start, eventEnd, kept);
      start = eventEnd;
    }
    return kept.from(bytes);
  }

  /** What becomes of one event: its data decides; an event with no data field is kept. */
  #relayedEvent(event: Buffer): 'keep' | 'drop' | 'cut' {
    const data = eventData(event);
    return data === undefined ? 'keep' : this.#relayed(data);
  }

  /** Keeps text[start, end) (one event) with an event-final `,"usage":null}` cut to `}`. */
  #cutNullUsage(text: string, start: number, end: number, kept: KeptRanges): void {
    const at = end - NULL_USAGE_END.length;
    if (this.clientWantsUsage || at < start || !text.startsWith(NULL_USAGE_END, at)) {
      kept.add(start, end);
      return;
    }
    kept.add(start, at);
    kept.add(at + NULL_USAGE_CUT, end); // the closing brace and the event end stay
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

const EVENT_END = '\n\n';
const USAGE_OBJECT = '"usage":{';
const NULL_USAGE_SUFFIX = ',"usage":null}';
const NULL_USAGE_END = `${NULL_USAGE_SUFFIX}${EVENT_END}`;
/** Bytes cut from NULL_USAGE_END: `,"usage":null` (the brace and the event end stay). */
const NULL_USAGE_CUT = NULL_USAGE_SUFFIX.length - 1;
const DATA_FIELD = Buffer.from('data:');

/** Where `event` starts an event of `text` (at its start or after a `\n`), or -1. */
function indexOfEventStart(text: string, event: string): number {
  let at = text.indexOf(event);
  while (at > 0 && text.charCodeAt(at - 1) !== 0x0a) at = text.indexOf(event, at + 1);
  return at;
}

/**
 * Byte ranges of one read kept for the client, in order; touching ranges merge, so an
 * unchanged read is one range.
 */
class KeptRanges {
  readonly #bounds: number[] = [];

  add(start: number, end: number): void {
    if (end <= start) return;
    const bounds = this.#bounds;
    if (bounds.length > 0 && bounds[bounds.length - 1] === start) bounds[bounds.length - 1] = end;
    else bounds.push(start, end);
  }

  /** The kept bytes of `bytes`: one slice when one range, else one buffer of them all. */
  from(bytes: Buffer): Buffer[] {
    const bounds = this.#bounds;
    if (bounds.length === 0) return [];
    if (bounds.length === 2) {
      const [start, end] = bounds as [number, number];
      return [start === 0 && end === bytes.length ? bytes : bytes.subarray(start, end)];
    }
    let length = 0;
    for (let i = 0; i < bounds.length; i += 2) length += bounds[i + 1]! - bounds[i]!;
    const out = Buffer.allocUnsafe(length);
    let offset = 0;
    for (let i = 0; i < bounds.length; i += 2) {
      offset += bytes.copy(out, offset, bounds[i]!, bounds[i + 1]!);
    }
    return [out];
  }
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
