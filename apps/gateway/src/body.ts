import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context } from 'hono';
import { badRequest, payloadTooLarge } from './errors.js';

/**
 * The Node request and response under @hono/node-server (undefined under
 * app.request(), tests without a socket). The generation hot path reads
 * headers from, and writes its response straight to, these: going through
 * `c.req.header()` makes node-server build a web Headers object for every
 * request, and a returned web Response is converted back to Node headers.
 */
export interface NodeExchange {
  incoming: IncomingMessage;
  outgoing: ServerResponse;
}

export function nodeExchange(c: Context): NodeExchange | undefined {
  const env = c.env as Partial<NodeExchange> | undefined;
  return env?.incoming && env.outgoing
    ? { incoming: env.incoming, outgoing: env.outgoing }
    : undefined;
}

/**
 * A request header (`name` in lower case) with web Headers semantics:
 * repeated fields are joined with ', '. Node's parsed headers already join
 * most repeats, but keep only the first Authorization; that one is read from
 * the raw list so a repeated Authorization still fails authentication.
 */
export function requestHeader(
  c: Context,
  node: NodeExchange | undefined,
  name: string,
): string | undefined {
  return node ? nodeHeader(node.incoming, name) : c.req.header(name);
}

/** `requestHeader` on a Node request. */
export function nodeHeader(incoming: IncomingMessage, name: string): string | undefined {
  const value = incoming.headers[name];
  if (value === undefined || typeof value === 'string') {
    return name === 'authorization' && value !== undefined
      ? joinedRawHeader(incoming.rawHeaders, name, value)
      : value;
  }
  return value.join(', ');
}

function joinedRawHeader(raw: string[], name: string, first: string): string {
  const values: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const key = raw[i]!;
    if (key.length === name.length && key.toLowerCase() === name) values.push(raw[i + 1]!);
  }
  return values.length > 1 ? values.join(', ') : first;
}

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
    // The connection closed mid-body (the client left, or server.request_timeout_ms ended
    // it): nobody reads the answer; a 400, not an unhandled error logged with its stack.
    const onError = () =>
      reject(badRequest('The request body was not received completely', null, 'request_aborted'));
    // Once read, the request holds none of this: a waiting request keeps its IncomingMessage
    // (and its listeners) until it is answered, and these closures would keep the chunks.
    // Node's IncomingMessage never throws an 'error' nobody listens to (its _destroy checks).
    const onEnd = () => {
      incoming.off('data', onData);
      incoming.off('error', onError);
      const text = Buffer.concat(chunks, size).toString('utf8');
      chunks.length = 0;
      resolve(text);
    };
    incoming.on('data', onData);
    incoming.once('end', onEnd);
    incoming.once('error', onError);
  });
}
