import { createReadStream } from 'node:fs';
import { collectingBuffers } from '../buffer-collection.js';

/** Bytes `[start, end)` of a file replaced by `text` (an insertion when they are equal). */
export interface Splice {
  readonly start: number;
  readonly end: number;
  readonly text: string;
}

/**
 * An upload as the pod gets it: the file it was written to as it came (request/upload.ts),
 * with spans of it replaced or text put in (its `model` field's alias by the model's own
 * name, a field the gateway adds).
 */
export interface UploadBody {
  readonly path: string;
  /** The client's content-type (its boundary), sent to the pod with the same bytes. */
  readonly contentType: string;
  /** The file's size. */
  readonly bytes: number;
  /** In order of `start`, none overlapping. */
  readonly splices?: readonly Splice[];
}

/** The bytes the pod gets. */
export function uploadLength({ bytes, splices = [] }: UploadBody): number {
  return splices.reduce(
    (total, splice) => total - (splice.end - splice.start) + Buffer.byteLength(splice.text),
    bytes,
  );
}

/**
 * The upload read from its file as the pod takes it (a retry reads it again), its read
 * buffers collected as they go.
 */
export function uploadStream(upload: UploadBody): AsyncGenerator<Buffer> {
  return collectingBuffers(spliced(upload));
}

async function* spliced({ path, splices = [] }: UploadBody): AsyncGenerator<Buffer> {
  let at = 0;
  for (const splice of splices) {
    // createReadStream's `end` is inclusive.
    if (splice.start > at) yield* createReadStream(path, { start: at, end: splice.start - 1 });
    yield Buffer.from(splice.text);
    at = splice.end;
  }
  yield* createReadStream(path, { start: at });
}
