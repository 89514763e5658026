import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { OpenAIHttpError } from '@fairgate/openai';
import type { ServerType } from '@hono/node-server';
import { headersTooLarge, malformedRequest, requestTimeout } from './errors.js';

/**
 * Requests Node's HTTP parser refuses before any handler runs (a header value
 * with CR/LF, a malformed request line, oversized headers) still get the
 * OpenAI error shape instead of Node's bare `400 Bad Request`; so do clients too
 * slow to send their request (server.headers_timeout_ms / request_timeout_ms:
 * 408, then the connection is closed), which `onTimeout` counts.
 */
export function installClientErrorHandler(
  server: ServerType,
  onTimeout?: (phase: 'headers' | 'request') => void,
): void {
  const closeTimedOut = slicedCloser();
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
    // A handler's response on the socket means the headers had arrived: the body was slow.
    const responding = Boolean((socket as { _httpMessage?: unknown })._httpMessage);
    if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      // Node reports a connection again at each timeout check until it is gone.
      if (timedOut.has(socket)) return;
      timedOut.add(socket);
      onTimeout?.(responding ? 'request' : 'headers');
      if (!socket.writable || responding) socket.destroy();
      else closeTimedOut(socket);
      return;
    }
    if (!socket.writable || responding) {
      socket.destroy();
      return;
    }
    const failure =
      error.code === 'HPE_HEADER_OVERFLOW'
        ? headersTooLarge()
        : malformedRequest(error.code ?? error.message);
    answerAndClose(socket, rawResponse(failure));
  });
}

const timedOut = new WeakSet<Socket>();

/** The error (chosen in errors.ts) as a whole HTTP/1.1 response that closes the connection. */
function rawResponse(failure: OpenAIHttpError): string {
  const body = JSON.stringify(failure.toBody());
  return (
    `HTTP/1.1 ${failure.status} ${STATUS_CODES[failure.status]}\r\n` +
    'content-type: application/json\r\n' +
    `content-length: ${Buffer.byteLength(body)}\r\n` +
    'connection: close\r\n\r\n' +
    body
  );
}

const REQUEST_TIMEOUT_RESPONSE = rawResponse(requestTimeout());

/**
 * Writes the answer and closes the socket once it is written, not just ends it: the
 * server's sockets are half-open, and a client that never closes its side would otherwise
 * keep the descriptor.
 */
function answerAndClose(socket: Socket, response: string): void {
  if (socket.destroyed) return;
  socket.write(response);
  socket.destroySoon();
}

/** Timed-out connections closed per event-loop turn. */
const CLOSE_SLICE = 64;

/**
 * Answers 408 and closes timed-out connections a slice per event-loop turn. Node expires
 * them in one loop at each timeout check, so clients that opened together (a slowloris
 * burst) time out together: closing 2,000 at once costs ~150 ms of this thread (a write
 * and a close each), which every other request would wait through. Between slices the
 * loop serves I/O. A queued socket is paused so it parses nothing more.
 */
function slicedCloser(): (socket: Socket) => void {
  let queue: Socket[] = [];
  let next = 0;
  let scheduled = false;
  const run = () => {
    const end = Math.min(queue.length, next + CLOSE_SLICE);
    for (; next < end; next++) answerAndClose(queue[next] as Socket, REQUEST_TIMEOUT_RESPONSE);
    if (next < queue.length) {
      setImmediate(run);
      return;
    }
    queue = [];
    next = 0;
    scheduled = false;
  };
  return (socket) => {
    socket.pause();
    queue.push(socket);
    if (!scheduled) {
      scheduled = true;
      setImmediate(run);
    }
  };
}
