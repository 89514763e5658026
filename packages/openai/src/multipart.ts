/**
 * A streaming multipart/form-data reader that keeps text fields and only counts the bytes
 * of file parts: an upload of any size is read with memory bounded by one chunk plus the
 * boundary, never buffered whole.
 */
export interface MultipartForm {
  fields: Map<string, string>;
  /** Where each text field's value lies in the body: byte offsets, `end` exclusive. */
  fieldSpans: Map<string, { start: number; end: number }>;
  /**
   * Where the closing delimiter (`\r\n--boundary--`, its CRLF first) starts: a part put
   * there is the form's last.
   */
  closingAt: number;
  /** File parts by field name: their filename and size in bytes. */
  files: Map<string, { filename: string; bytes: number }>;
}

export class MultipartError extends Error {}

/** The boundary of a multipart/form-data content-type, or null. */
export function boundaryOf(contentType: string | undefined): string | null {
  if (!contentType || !/^multipart\/form-data\b/i.test(contentType)) return null;
  const match = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return match?.[1] ?? match?.[2] ?? null;
}

type Phase = 'preamble' | 'afterDelimiter' | 'headers' | 'body' | 'done';

export async function readMultipart(
  stream: AsyncIterable<Uint8Array>,
  boundary: string,
  maxFieldBytes = 1 << 20,
): Promise<MultipartForm> {
  const form: MultipartForm = {
    fields: new Map(),
    fieldSpans: new Map(),
    files: new Map(),
    closingAt: -1,
  };
  /** Where the last delimiter read starts. */
  let delimiterAt = -1;
  // Every delimiter but the first follows a CRLF; a CRLF put in front makes them all alike.
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  let pending: Buffer = Buffer.from('\r\n');
  /** The body offset of `pending`'s first byte (the CRLF put in front is not the body's). */
  let offset = -2;
  /** Drops `n` bytes from the front of `pending`. */
  const advance = (n: number) => {
    pending = pending.subarray(n);
    offset += n;
  };
  let phase = 'preamble' as Phase;
  let part: {
    name: string;
    filename: string | null;
    start: number;
    chunks: Buffer[];
    bytes: number;
  } | null = null;

  const take = (data: Buffer) => {
    if (!part) return;
    part.bytes += data.length;
    if (part.filename !== null) return; // a file: counted, not kept
    if (part.bytes > maxFieldBytes) throw new MultipartError(`field ${part.name} is too large`);
    part.chunks.push(data);
  };
  const finishPart = () => {
    if (!part) return;
    if (part.filename === null) {
      form.fields.set(part.name, Buffer.concat(part.chunks).toString('utf8'));
      form.fieldSpans.set(part.name, { start: part.start, end: part.start + part.bytes });
    } else form.files.set(part.name, { filename: part.filename, bytes: part.bytes });
    part = null;
  };

  /**
   * Whether a delimiter may start in `tail` and go on in `next` (when `next` is shorter than
   * a delimiter, it may: that is only known with the chunks after it).
   */
  const straddles = (tail: Buffer, next: Buffer): boolean => {
    if (tail.length === 0) return false;
    if (next.length < delimiter.length - 1) return true;
    const joined = Buffer.concat([tail, next.subarray(0, delimiter.length - 1)]);
    const at = joined.indexOf(delimiter);
    return at >= 0 && at < tail.length;
  };

  const consume = (): boolean => {
    switch (phase) {
      case 'preamble':
      case 'body': {
        const at = pending.indexOf(delimiter);
        if (at < 0) {
          // Keep a tail that could be the start of a delimiter split across chunks.
          const safe = Math.max(0, pending.length - delimiter.length + 1);
          if (phase === 'body') take(pending.subarray(0, safe));
          advance(safe);
          return false;
        }
        if (phase === 'body') {
          take(pending.subarray(0, at));
          finishPart();
        }
        delimiterAt = offset + at;
        advance(at + delimiter.length);
        phase = 'afterDelimiter';
        return true;
      }
      case 'afterDelimiter': {
        if (pending.length < 2) return false;
        const marker = pending.subarray(0, 2).toString('latin1');
        if (marker === '--') {
          form.closingAt = delimiterAt;
          phase = 'done';
          return false;
        }
        if (marker !== '\r\n') throw new MultipartError('malformed multipart delimiter');
        advance(2);
        phase = 'headers';
        return true;
      }
      case 'headers': {
        const end = pending.indexOf('\r\n\r\n');
        if (end < 0) {
          if (pending.length > 16_384) throw new MultipartError('multipart headers too large');
          return false;
        }
        const headers = pending.subarray(0, end).toString('utf8');
        advance(end + 4);
        part = { ...dispositionOf(headers), start: offset, chunks: [], bytes: 0 };
        phase = 'body';
        return true;
      }
      case 'done':
        return false;
    }
  };

  for await (const chunk of stream) {
    if (phase === 'done') continue; // the epilogue is read and dropped
    const bytes: Buffer = Buffer.isBuffer(chunk)
      ? chunk
      : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (phase === 'body' && pending.length < delimiter.length && !straddles(pending, bytes)) {
      // A file's bytes are read in place, never copied: what is left of the previous chunk
      // (shorter than a delimiter, and no delimiter starts in it) is body.
      take(pending);
      offset += pending.length;
      pending = bytes;
    } else {
      pending = pending.length === 0 ? bytes : Buffer.concat([pending, bytes]);
    }
    while (consume()) {}
  }
  if (phase !== 'done') throw new MultipartError('multipart body ended early');
  return form;
}

function dispositionOf(headers: string): { name: string; filename: string | null } {
  const disposition = headers.split('\r\n').find((line) => /^content-disposition:/i.test(line));
  const name = disposition && /;\s*name="([^"]*)"/i.exec(disposition)?.[1];
  if (!disposition || name === undefined || name === null) {
    throw new MultipartError('a multipart part has no content-disposition name');
  }
  const filename = /;\s*filename="([^"]*)"/i.exec(disposition)?.[1] ?? null;
  return { name, filename };
}
