import { createReadStream } from 'node:fs';
import { collectingBuffers } from '../buffer-collection.js';

/**
 * An upload as the pod gets it: the file it was written to as it came (request/upload.ts),
 * with at most one span of it replaced (an alias in its `model` field, by the model's own
 * name).
 */
export interface UploadBody {
  readonly path: string;
  /** The client's content-type (its boundary), sent to the pod with the same bytes. */
  readonly contentType: string;
  /** The file's size. */
  readonly bytes: number;
  readonly splice?: { readonly start: number; readonly end: number; readonly text: string };
}

/** The bytes the pod gets. */
export function uploadLength(upload: UploadBody): number {
  const { splice } = upload;
  if (!splice) return upload.bytes;
  return upload.bytes - (splice.end - splice.start) + Buffer.byteLength(splice.text);
}

/**
 * The upload read from its file as the pod takes it (a retry reads it again), its read
 * buffers collected as they go.
 */
export function uploadStream(upload: UploadBody): AsyncGenerator<Buffer> {
  return collectingBuffers(spliced(upload));
}

async function* spliced({ path, splice }: UploadBody): AsyncGenerator<Buffer> {
  if (!splice) {
    yield* createReadStream(path);
    return;
  }
  // createReadStream's `end` is inclusive.
  if (splice.start > 0) yield* createReadStream(path, { start: 0, end: splice.start - 1 });
  yield Buffer.from(splice.text);
  yield* createReadStream(path, { start: splice.end });
}
