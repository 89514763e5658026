/**
 * The floor of a proxy hop written in Node.js: bench:overhead's "node floor" row.
 *
 *   node --import tsx bench/node-proxy.ts --upstream http://127.0.0.1:<port> [--port N]
 *
 * The same two parts the gateway is built on, and nothing else: node:http's server for the
 * client and undici's `Pool.dispatch()` with a handler of its own for the pod (as
 * apps/gateway/src/upstream/exchange.ts), 64 connections, keep-alive both ways. Each
 * request's body is read whole and sent on as it came; the pod's status, content type and
 * body go back as they come (a plain answer collected and sent with one `end()`, a stream
 * written chunk by chunk, backpressure ignored: the bench's clients read everything). No
 * authentication, validation, scheduling, telemetry or metrics: what is left of the
 * gateway's CPU per request beyond this row is the gateway's own work, and a ratio to direct
 * above this row's is out of reach for any gateway on Node's HTTP stack on that machine.
 *
 * Port: --port, else a free one; the ready line and the way out are bench-server.ts's.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Dispatcher, Pool } from 'undici';
import { flag, serveBenchHttp } from './bench-server.js';

const UPSTREAM = flag('upstream');
if (!UPSTREAM) throw new Error('node-proxy: --upstream <url> is required');
const PORT = Number(flag('port') ?? 0);
const pool = new Pool(UPSTREAM, { connections: 64 });

/** Relays the pod's answer to `res`: collected when it has a length, else chunk by chunk. */
function relayTo(res: ServerResponse): Dispatcher.DispatchHandler {
  const chunks: Buffer[] = [];
  let streaming = false;
  return {
    onRequestStart() {}, // its presence tells undici this is a controller handler
    onResponseStart(_controller, status, headers) {
      if (status < 200) return;
      const type = String(headers['content-type'] ?? 'application/json');
      streaming = headers['content-length'] === undefined;
      res.statusCode = status;
      res.setHeader('content-type', type);
    },
    onResponseData(_controller, chunk) {
      if (streaming) res.write(chunk);
      else chunks.push(chunk);
    },
    onResponseEnd() {
      if (streaming) res.end();
      else res.end(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
    },
    onResponseError(_controller, error) {
      if (res.headersSent) res.destroy(error);
      else {
        res.statusCode = 502;
        res.end();
      }
    },
  };
}

function proxy(req: IncomingMessage, res: ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    pool.dispatch(
      {
        method: req.method ?? 'POST',
        path: req.url ?? '/',
        headers: { 'content-type': req.headers['content-type'] ?? 'application/json' },
        body: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks),
      },
      relayTo(res),
    );
  });
}

serveBenchHttp('node-proxy', PORT, proxy, () => void pool.close());
