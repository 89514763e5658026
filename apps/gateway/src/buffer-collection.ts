import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** Bytes read between two collections of an upload's read buffers. */
const COLLECT_EVERY_BYTES = 256 * 1024;

type MinorCollection = () => void;

let collection: MinorCollection | null | undefined;

/**
 * V8's minor collection (a scavenge of the young generation: about half a millisecond on a
 * gateway's heap), or null where the runtime refuses to expose it. It is taken from a
 * context of its own, so the gateway's global scope gets no `gc`.
 */
function minorCollection(): MinorCollection | null {
  if (collection !== undefined) return collection;
  try {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as (options: { type: 'minor' }) => void;
    collection = () => gc({ type: 'minor' });
  } catch {
    collection = null;
  } finally {
    setFlagsFromString('--no-expose-gc');
  }
  return collection;
}

/**
 * Node reads every chunk of a body into a Buffer of its own, outside the JS heap, and V8
 * frees a dead one only at its next collection, which those bytes do not bring about. A
 * 5 MB upload streamed through would hold its whole size in dead buffers until then. This
 * counts the bytes of a stream and asks for a minor collection every `everyBytes`, so what
 * a stream costs stays within that many bytes whatever its size.
 */
function bufferCollector(everyBytes = COLLECT_EVERY_BYTES): (bytes: number) => void {
  const collect = minorCollection();
  if (!collect) return () => {};
  let since = 0;
  return (bytes) => {
    since += bytes;
    if (since < everyBytes) return;
    since = 0;
    collect();
  };
}

/** Each chunk of `stream` as it comes, its buffers collected as they die (`bufferCollector`). */
export async function* collectingBuffers<T extends Uint8Array>(
  stream: AsyncIterable<T>,
  everyBytes = COLLECT_EVERY_BYTES,
): AsyncGenerator<T> {
  const collected = bufferCollector(everyBytes);
  for await (const chunk of stream) {
    collected(chunk.length);
    yield chunk;
  }
}
