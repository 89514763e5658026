import type { Socket } from 'node:net';
import { errorBody } from '@fairgate/openai';
import type { ServerType } from '@hono/node-server';

/**
 * Requests Node's HTTP parser refuses before any handler runs (a header value
 * with CR/LF, a malformed request line, oversized headers) still get the
 * OpenAI error shape instead of Node's bare `400 Bad Request`.
 */
export function installClientErrorHandler(server: ServerType): void {
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
    if (!socket.writable || (socket as { _httpMessage?: unknown })._httpMessage) {
      socket.destroy();
      return;
    }
    const tooLarge = error.code === 'HPE_HEADER_OVERFLOW';
    const status = tooLarge ? 431 : 400;
    const body = JSON.stringify(
      errorBody(
        tooLarge
          ? 'Request headers are too large'
          : `Malformed HTTP request: ${error.code ?? error.message}`,
        'invalid_request_error',
        null,
        tooLarge ? 'headers_too_large' : 'malformed_request',
      ),
    );
    socket.end(
      `HTTP/1.1 ${status} ${tooLarge ? 'Request Header Fields Too Large' : 'Bad Request'}\r\n` +
        'content-type: application/json\r\n' +
        `content-length: ${Buffer.byteLength(body)}\r\n` +
        'connection: close\r\n\r\n' +
        body,
    );
  });
}
