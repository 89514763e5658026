import { describe, expect, it } from 'vitest';
import { boundaryOf, MultipartError, readMultipart } from '../src/multipart.js';

/** A form encoded by the platform's own FormData, as bytes and its content-type. */
async function encoded(form: FormData): Promise<{ bytes: Uint8Array; contentType: string }> {
  const request = new Request('http://x/', { method: 'POST', body: form });
  return {
    bytes: new Uint8Array(await request.arrayBuffer()),
    contentType: request.headers.get('content-type') ?? '',
  };
}

async function* chunked(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
}

describe('readMultipart', () => {
  it('keeps fields and where they lie, and counts file bytes, for any chunking (boundaries split across chunks)', async () => {
    const form = new FormData();
    form.set('model', 'whisper');
    form.set('file', new Blob([new Uint8Array(100_000).fill(45)]), 'a.wav');
    form.set('language', 'en');
    const { bytes, contentType } = await encoded(form);
    const boundary = boundaryOf(contentType)!;
    // Chunks around a delimiter's length (`\r\n--` + boundary) too: one may straddle two.
    const delimiter = boundary.length + 4;
    for (const size of [
      1,
      7,
      64,
      delimiter - 2,
      delimiter - 1,
      delimiter,
      delimiter + 1,
      4096,
      bytes.length,
    ]) {
      const parsed = await readMultipart(chunked(bytes, size), boundary);
      expect(Object.fromEntries(parsed.fields)).toEqual({ model: 'whisper', language: 'en' });
      expect(parsed.files.get('file')).toEqual({ filename: 'a.wav', bytes: 100_000 });
      // Each field's span is where its value lies in the body, before the file or after it.
      for (const [name, value] of parsed.fields) {
        const span = parsed.fieldSpans.get(name)!;
        expect(Buffer.from(bytes.subarray(span.start, span.end)).toString(), name).toBe(value);
      }
      expect(Buffer.from(bytes.subarray(parsed.closingAt)).toString()).toBe(
        `\r\n--${boundary}--\r\n`,
      );
    }
  });

  it('a body cut short, or a field too large, is refused', async () => {
    const form = new FormData();
    form.set('prompt', 'x'.repeat(2000));
    const { bytes, contentType } = await encoded(form);
    const boundary = boundaryOf(contentType)!;
    await expect(readMultipart(chunked(bytes.subarray(0, 100), 10), boundary)).rejects.toThrow(
      MultipartError,
    );
    await expect(readMultipart(chunked(bytes, 10), boundary, 1000)).rejects.toThrow(/too large/);
  });

  it('boundaryOf reads quoted and bare boundaries of multipart/form-data only', () => {
    expect(boundaryOf('multipart/form-data; boundary=abc')).toBe('abc');
    expect(boundaryOf('multipart/form-data; boundary="a b"')).toBe('a b');
    expect(boundaryOf('application/json')).toBeNull();
  });
});
