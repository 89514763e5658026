import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { unlink } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import {
  boundaryOf,
  MultipartError,
  type MultipartForm,
  OpenAIHttpError,
  readMultipart,
} from '@fairgate/openai';
import { collectingBuffers } from '../buffer-collection.js';
import { badRequest, payloadTooLarge } from '../errors.js';
import type { Splice, UploadBody } from '../upstream/upload-body.js';

/** A multipart upload written to a file as it arrived, to be sent to the pod from there. */
export interface SpooledUpload extends UploadBody {
  /** Its text fields (and where they lie in the file), and its files' names and sizes. */
  readonly form: MultipartForm;
}

/**
 * Reads a multipart/form-data upload (an audio file, docs/gateway.md) within `limit` bytes,
 * writing it to a file in the OS's temp directory as it comes and parsing its fields on the
 * way: the file's bytes are never held in memory, only a chunk at a time, and the chunks
 * read are collected as they go (buffer-collection.ts). The file goes when `outgoing`
 * closes (the answer sent, or the connection gone), whatever happened; the pod's read of it,
 * if still open, goes on from the unlinked file. A body that is not a well-formed multipart
 * form is a 400, one over the limit a 413; either leaves no file.
 */
export async function spoolUpload(
  incoming: IncomingMessage,
  outgoing: ServerResponse,
  limit: number,
): Promise<SpooledUpload> {
  const contentType = incoming.headers['content-type'] ?? '';
  const boundary = boundaryOf(contentType);
  if (!boundary) {
    incoming.resume();
    throw badRequest('Expected a multipart/form-data body', 'file');
  }
  const declared = incoming.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    refuseRest(incoming, outgoing);
    throw payloadTooLarge(limit);
  }
  const path = join(tmpdir(), `fairgate-upload-${randomUUID()}`);
  const file = createWriteStream(path);
  outgoing.once('close', () => {
    file.destroy();
    void unlink(path).catch(() => {});
  });
  let bytes = 0;
  async function* written(): AsyncGenerator<Buffer> {
    for await (const chunk of collectingBuffers(incoming as AsyncIterable<Buffer>)) {
      bytes += chunk.length;
      if (bytes > limit) throw payloadTooLarge(limit);
      if (!file.write(chunk)) await once(file, 'drain');
      yield chunk;
    }
  }
  try {
    const form = await readMultipart(written(), boundary);
    file.end();
    await finished(file);
    return { path, contentType, bytes, form };
  } catch (error) {
    refuseRest(incoming, outgoing);
    if (error instanceof OpenAIHttpError) throw error;
    if (error instanceof MultipartError) throw badRequest(error.message, 'file');
    // The connection closed mid-body: nobody reads the answer (as readBodyText says).
    throw badRequest('The request body was not received completely', null, 'request_aborted');
  }
}

/**
 * An upload refused before its end: what the client still sends is read and dropped until
 * the answer is written, and the connection then closes, so a client cannot keep it busy.
 */
function refuseRest(incoming: IncomingMessage, outgoing: ServerResponse): void {
  outgoing.shouldKeepAlive = false;
  incoming.resume();
}

/** The form as the endpoint's schema reads it: each text field, and each file's name and size. */
export function formFields(form: MultipartForm): Record<string, unknown> {
  return { ...Object.fromEntries(form.fields), ...Object.fromEntries(form.files) };
}

/**
 * The upload with these text fields set on the way to the pod: a field it has gets the new
 * value in place of its own, any other is added as the form's last part. The file stays as
 * it came.
 */
export function withFields(upload: SpooledUpload, fields: Record<string, string>): SpooledUpload {
  const { fieldSpans, closingAt } = upload.form;
  const boundary = boundaryOf(upload.contentType);
  const splices: Splice[] = [...(upload.splices ?? [])];
  for (const [name, value] of Object.entries(fields)) {
    const span = fieldSpans.get(name);
    if (span) splices.push({ ...span, text: value });
    else {
      const part = `\r\n--${boundary}\r\ncontent-disposition: form-data; name="${name}"\r\n\r\n${value}`;
      splices.push({ start: closingAt, end: closingAt, text: part });
    }
  }
  splices.sort((a, b) => a.start - b.start);
  return { ...upload, splices };
}
