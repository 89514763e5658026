import {
  createSseDecoder,
  encodeSseError,
  type OpenAIErrorBody,
  SSE_DONE,
  SSE_DONE_DATA,
  type Usage,
} from '@fairgate/openai';

/**
 * The gateway's whole interest in a pod's SSE stream, done on the raw bytes as they
 * come: the first content token (t5), the usage of the final chunk, the usage so far of
 * every chunk (the gateway forces `include_usage` and `continuous_usage_stats` on: a stream
 * that ends early is still metered), hiding that usage from a client that did not ask for
 * it, and where `[DONE]` ends the stream. Everything else passes through byte for byte: the
 * bytes handed on are slices of the pod's buffers (no decoding, no re-serialisation)
 * unless an event is changed.
 *
 * What a client sees of the usage is what vLLM would send it: with `continuous_usage_stats`
 * (and `include_usage`) every chunk as the pod sent it; with `include_usage` only, each
 * chunk's usage object replaced by `null` and the final usage chunk kept; without, each
 * chunk's `,"usage":{...}` or `,"usage":null` member cut and the final usage chunk dropped.
 *
 * How cheap: a read of the pod's body is turned into latin1 text once (a native copy;
 * byte offsets are then string offsets) and events are framed on `\n\n` (vLLM's framing)
 * with plain string searches. Only the events before the first token (one or two) and the
 * final chunk (`"choices":[]`, parsed) are decoded. Any other event is only searched for an
 * event-final usage member: `,"usage":null}`, or `,"usage":{...}}` whose object is checked
 * by a scan of its few bytes (balanced, on one line). Either can only be the top-level
 * object's last member there: inside JSON strings quotes are escaped and newlines are `\n`
 * escapes. The read's last usage object is kept as text (copied out of the read) and
 * parsed only when `usageSoFar` is read. A read that changes nothing goes on as one slice
 * of the pod's buffer; one with cuts as one new buffer of the kept bytes. A stream framed
 * with `\r` (CRLF or CR line ends, allowed by the SSE spec, sent by no known
 * OpenAI-compatible server) is decoded event by event from then on and re-encoded as
 * `data: ...\n\n`.
 */
/** What the gateway reads of a pod's stream, whatever its dialect (chat or Responses). */
export interface StreamFilter {
  /** The stream's final usage, once its last event passed. */
  readonly usage: Usage | undefined;
  /** True once the stream's last event was passed on: nothing after it is. */
  readonly done: boolean;
  /** The usage the pod reported last (for a stream that ended early). */
  readonly usageSoFar: Usage | undefined;
  /** The bytes to send the client for this chunk of the pod's body (possibly none). */
  push(chunk: Buffer): Buffer[];
  /** The event that tells the client the stream failed after it started, and ends it. */
  errorEvent(body: OpenAIErrorBody): string;
}

export class SseFilter implements StreamFilter {
  /** The usage of the stream, from the final chunk (`choices: []`) carrying a `usage` object. */
  usage: Usage | undefined;
  /** True once `[DONE]` was passed on: nothing after it is. */
  done = false;
  #sawFirstToken = false;
  #carry: Buffer | undefined;
  #generic: ReturnType<typeof createSseDecoder> | undefined;
  #genericOut: string[] = [];
  /** The latest chunk's usage object: its text until `usageSoFar` parses it. */
  #soFar: Usage | string | undefined;

  constructor(
    private readonly clientWantsUsage: boolean,
    private readonly onFirstToken: () => void,
    /** The client asked for `continuous_usage_stats` too: it sees every chunk's usage. */
    private readonly clientWantsContinuousUsage = false,
  ) {}

  /**
   * The usage the pod reported last: of the final chunk, or, for a stream that ended
   * before it (the client left, the pod reset), of the last chunk that came through.
   */
  get usageSoFar(): Usage | undefined {
    if (typeof this.#soFar === 'string') this.#soFar = parseUsage(this.#soFar);
    return this.#soFar;
  }

  /** The bytes to send the client for this chunk of the pod's body (possibly none). */
  /** The error object as a data event, then `[DONE]`, as vLLM and OpenAI end such a stream. */
  errorEvent(body: OpenAIErrorBody): string {
    return encodeSseError(body);
  }

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
   * ranges kept: an unchanged region is one slice of the pod's buffer; cuts, drops and
   * nulled usage make one new buffer of the kept ranges. Only the events before the first
   * token, the final chunk and an event whose usage object is not its last member are
   * decoded; any other is only searched for its usage member.
   */
  #events(bytes: Buffer, text: string, end: number): Buffer[] {
    const kept = new KeptRanges();
    let nextUsage = text.indexOf(USAGE_OBJECT);
    let nextFinal = NOT_SEARCHED; // searched for once an event has a usage object
    // Where the read's last usage object (so far) is: only that one is kept.
    let soFarStart = -1;
    let soFarEnd = -1;
    for (let start = 0; start < end; ) {
      const eventEnd = text.indexOf(EVENT_END, start) + EVENT_END.length;
      const jsonEnd = eventEnd - EVENT_END.length;
      if (nextUsage >= 0 && nextUsage < start) nextUsage = text.indexOf(USAGE_OBJECT, start);
      const hasObject = nextUsage >= 0 && nextUsage < eventEnd;
      let member: UsageMember = 'none';
      let final = false;
      if (hasObject) {
        if (nextFinal === NOT_SEARCHED || (nextFinal >= 0 && nextFinal < start)) {
          nextFinal = text.indexOf(EMPTY_CHOICES, start);
        }
        final = nextFinal >= 0 && nextFinal < eventEnd;
        if (isFinalUsageObject(text, nextUsage, jsonEnd)) member = 'object';
      } else if (
        // A null usage is only cut: for a client that asked for usage it is as none.
        !this.clientWantsUsage &&
        jsonEnd - NULL_USAGE_SUFFIX.length >= start &&
        endsWithNullUsage(text, jsonEnd)
      ) {
        member = 'null';
      }
      const decode = !this.#sawFirstToken || final || (hasObject && member !== 'object');
      let relayed: Relayed;
      if (decode) {
        const before = this.#soFar;
        relayed = this.#relayedEvent(bytes.subarray(start, eventEnd), member);
        if (this.#soFar !== before) soFarStart = -1; // a parsed usage, later than those before
      } else relayed = this.#memberAction(member);
      if (member === 'object') {
        soFarStart = nextUsage + USAGE_OBJECT.length - 1;
        soFarEnd = jsonEnd - 1;
      }
      if (relayed === 'keep') kept.add(start, eventEnd);
      else if (relayed === 'cut') {
        const at = member === 'null' ? jsonEnd - NULL_USAGE_SUFFIX.length : nextUsage - 1;
        kept.add(start, at);
        kept.add(jsonEnd - 1, eventEnd); // the closing brace and the event end stay
      } else if (relayed === 'null') {
        kept.add(start, nextUsage + USAGE_OBJECT.length - 1);
        kept.insert(NULL);
        kept.add(jsonEnd - 1, eventEnd);
      }
      start = eventEnd;
    }
    // Copied out of the read (a slice of `text` would keep all of it), parsed when asked.
    if (soFarStart >= 0) this.#soFar = bytes.toString('latin1', soFarStart, soFarEnd);
    return kept.from(bytes);
  }

  /** What becomes of one event: its data decides; an event with no data field is kept. */
  #relayedEvent(event: Buffer, member: UsageMember): Relayed {
    const data = eventData(event);
    return data === undefined ? 'keep' : this.#relayed(data, member);
  }

  /**
   * What becomes of a decoded event with this data and usage member: as #memberAction, but
   * the final chunk (parsed: `usage` is read from it) is dropped for a client that did not
   * ask for usage; and t5 fires at the first event with content.
   */
  #relayed(data: string, member: UsageMember): Relayed {
    // A chunk's usage object found by the scan needs no parse; the final chunk's does.
    if ((member !== 'object' || data.includes(EMPTY_CHOICES)) && data.includes(USAGE_OBJECT)) {
      try {
        const parsed = JSON.parse(data) as { usage?: Usage | null; choices?: unknown[] };
        if (parsed.usage) {
          this.#soFar = parsed.usage;
          if (parsed.choices?.length === 0) {
            this.usage = parsed.usage;
            if (!this.clientWantsUsage) return 'drop';
            return 'keep';
          }
        }
      } catch {
        // not JSON: relayed as it is
      }
    }
    if (!this.#sawFirstToken && hasContent(data)) {
      this.#sawFirstToken = true;
      this.onFirstToken();
    }
    return this.#memberAction(member);
  }

  /**
   * What becomes of a chunk with this usage member: kept for a client that asked for it,
   * cut for one that did not; a usage object (so far) nulled for a client that asked for
   * include_usage without continuous_usage_stats.
   */
  #memberAction(member: UsageMember): Relayed {
    if (member === 'none' || this.clientWantsContinuousUsage) return 'keep';
    if (!this.clientWantsUsage) return 'cut';
    return member === 'object' ? 'null' : 'keep';
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
        const out = this.#relayedData(data);
        if (out !== undefined) this.#genericOut.push(encodeData(out));
      });
    }
    this.#generic!.feed(chunk);
    if (this.#genericOut.length === 0) return [];
    const text = this.#genericOut.join('');
    this.#genericOut.length = 0;
    return [Buffer.from(text)];
  }

  /** The data of one decoded event as the client gets it (undefined: dropped). */
  #relayedData(data: string): string | undefined {
    const key = data.indexOf(USAGE_OBJECT);
    let member: UsageMember = 'none';
    if (key >= 0 && isFinalUsageObject(data, key, data.length)) {
      member = 'object';
      this.#soFar = data.slice(key + USAGE_OBJECT.length - 1, -1);
    } else if (data.endsWith(NULL_USAGE_SUFFIX)) member = 'null';
    switch (this.#relayed(data, member)) {
      case 'keep':
        return data;
      case 'drop':
        return undefined;
      case 'cut':
        return member === 'null'
          ? `${data.slice(0, -NULL_USAGE_SUFFIX.length)}}`
          : `${data.slice(0, key - 1)}}`;
      case 'null':
        return `${data.slice(0, key + USAGE_OBJECT.length - 1)}null}`;
    }
  }
}

/**
 * What the client gets of an event: it as it is, nothing, it with its usage member cut, or
 * it with its usage object replaced by `null`.
 */
type Relayed = 'keep' | 'drop' | 'cut' | 'null';
/** An event's top-level, last usage member: an object, `null`, or none (or not found). */
type UsageMember = 'object' | 'null' | 'none';

const EVENT_END = '\n\n';
const USAGE_OBJECT = '"usage":{';
const EMPTY_CHOICES = '"choices":[]';
const NOT_SEARCHED = -2;
const NULL_USAGE_SUFFIX = ',"usage":null}';
const NULL = Buffer.from('null');
const DATA_FIELD = Buffer.from('data:');

/** True when text[0, jsonEnd) ends with `,"usage":null}`. */
function endsWithNullUsage(text: string, jsonEnd: number): boolean {
  return text.startsWith(NULL_USAGE_SUFFIX, jsonEnd - NULL_USAGE_SUFFIX.length);
}

/**
 * True when the `"usage":{` at `key` starts the last member of the object that ends
 * text[0, jsonEnd): a comma before it, and its object, on one line, closes right before
 * that object's closing brace. The scan reads the usage object's few bytes only.
 */
function isFinalUsageObject(text: string, key: number, jsonEnd: number): boolean {
  const close = jsonEnd - 1;
  if (text.charCodeAt(key - 1) !== COMMA || text.charCodeAt(close) !== CLOSE_BRACE) return false;
  const open = key + USAGE_OBJECT.length - 1;
  // vLLM's (a flat object): its first closing brace is the last but one and no brace opens
  // in it (a brace in a string would show too): two native searches.
  const firstClose = text.indexOf('}', open);
  if (firstClose === close - 1 && text.lastIndexOf('{', firstClose) === open) return true;
  if (firstClose < 0 || firstClose >= close) return false;
  // Anything else (prompt_tokens_details, strings): its bytes scanned.
  let depth = 0;
  let inString = false;
  for (let at = open; at < close; at++) {
    const code = text.charCodeAt(at);
    if (inString) {
      if (code === BACKSLASH) at++;
      else if (code === QUOTE) inString = false;
    } else if (code === QUOTE) inString = true;
    else if (code === OPEN_BRACE) depth++;
    else if (code === CLOSE_BRACE) {
      depth--;
      if (depth === 0) return at === close - 1;
    } else if (code === NEWLINE) return false;
  }
  return false;
}

const COMMA = 0x2c;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const NEWLINE = 0x0a;

/** A usage object's text parsed, or undefined when it is not one. */
function parseUsage(text: string): Usage | undefined {
  try {
    const usage = JSON.parse(text) as Partial<Usage> | null;
    return typeof usage?.prompt_tokens === 'number' && typeof usage.completion_tokens === 'number'
      ? (usage as Usage)
      : undefined;
  } catch {
    return undefined;
  }
}

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
  /** Pairs: [start, end) of the read, or [-1, i] for inserted bytes #inserts[i]. */
  readonly #bounds: number[] = [];
  #inserts: Buffer[] | undefined;

  add(start: number, end: number): void {
    if (end <= start) return;
    const bounds = this.#bounds;
    const last = bounds.length - 1;
    if (last > 0 && bounds[last - 1]! >= 0 && bounds[last] === start) bounds[last] = end;
    else bounds.push(start, end);
  }

  /** Bytes not of the read (a nulled usage object), kept after the ranges so far. */
  insert(bytes: Buffer): void {
    this.#inserts ??= [];
    this.#bounds.push(-1, this.#inserts.length);
    this.#inserts.push(bytes);
  }

  /** The kept bytes of `bytes`: one slice when one range, else one buffer of them all. */
  from(bytes: Buffer): Buffer[] {
    const bounds = this.#bounds;
    if (bounds.length === 0) return [];
    if (bounds.length === 2 && bounds[0]! >= 0) {
      const [start, end] = bounds as [number, number];
      return [start === 0 && end === bytes.length ? bytes : bytes.subarray(start, end)];
    }
    let length = 0;
    for (let i = 0; i < bounds.length; i += 2) {
      const start = bounds[i]!;
      length += start < 0 ? this.#inserts![bounds[i + 1]!]!.length : bounds[i + 1]! - start;
    }
    const out = Buffer.allocUnsafe(length);
    let offset = 0;
    for (let i = 0; i < bounds.length; i += 2) {
      const start = bounds[i]!;
      offset +=
        start < 0
          ? this.#inserts![bounds[i + 1]!]!.copy(out, offset)
          : bytes.copy(out, offset, start, bounds[i + 1]!);
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
 * True when a chunk carries generated output: a `"content"` (chat delta) or `"text"`
 * (completion) string member that is not empty, or a tool call (a chat delta's non-empty
 * `"tool_calls"`: a tool-call answer has no content at all). In a chunk those keys hold only
 * the generated output (logprobs' `"content"` is an array), and a quote inside a JSON string
 * is escaped, so the raw text tells without parsing.
 */
function hasContent(data: string): boolean {
  return (
    hasNonEmptyString(data, '"content":"') ||
    hasNonEmptyString(data, '"text":"') ||
    data.includes(TOOL_CALL_DELTA)
  );
}

const TOOL_CALL_DELTA = '"tool_calls":[{';

function hasNonEmptyString(data: string, key: string): boolean {
  for (let at = data.indexOf(key); at >= 0; at = data.indexOf(key, at + key.length)) {
    if (data.charCodeAt(at + key.length) !== 0x22) return true;
  }
  return false;
}
