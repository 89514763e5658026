import type { IncomingMessage } from 'node:http';
import type { Context } from 'hono';
import { payloadTooLarge } from './errors.js';

/**
 * Reads a request body from the Node request, enforcing `limit` bytes whether
 * the client sent Content-Length or a chunked body: a declared length over the
 * limit is refused before reading; a chunked body is counted as it arrives and
 * refused as soon as it passes the limit. Past the limit nothing more is
 * buffered: the rest is drained and discarded so the 413 can still be written
 * on the same connection (destroying the request would reset the socket).
 */
export function readBodyText(incoming: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const declared = incoming.headers['content-length'];
    if (declared !== undefined && Number(declared) > limit) {
      incoming.resume();
      reject(payloadTooLarge(limit));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) {
        chunks.push(chunk);
        return;
      }
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      chunks.length = 0;
      incoming.resume();
      reject(payloadTooLarge(limit));
    };
    const onEnd = () => resolve(Buffer.concat(chunks, size).toString('utf8'));
    incoming.on('data', onData);
    incoming.once('end', onEnd);
    incoming.once('error', reject);
  });
}

/**
 * The body of a request as text, within `limit` bytes: read from the Node
 * request under @hono/node-server, or from the web Request under app.request()
 * (tests without a socket), with the same limit semantics.
 */
export async function readRequestBody(c: Context, limit: number): Promise<string> {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (incoming) return readBodyText(incoming, limit);
  const declared = c.req.header('content-length');
  if (declared !== undefined && Number(declared) > limit) throw payloadTooLarge(limit);
  const buffer = await c.req.arrayBuffer();
  if (buffer.byteLength > limit) throw payloadTooLarge(limit);
  return new TextDecoder().decode(buffer);
}
