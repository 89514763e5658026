import { readFileSync } from 'node:fs';
import type { Server, ServerOptions } from 'node:http';
import type { ServerSectionConfig } from '@fairgate/config';

/**
 * The HTTP edge against slow and idle clients (docs/gateway.md, *The HTTP edge*): Node's
 * server timeouts and connection limit from the config's `server` section.
 */

/** Why the edge refused or closed a client connection (fairgate_connections_refused_total). */
export type RefusedReason =
  | 'max_connections'
  | 'headers_timeout'
  | 'request_timeout'
  | 'accept_error';

/**
 * How often Node checks its headers and request timeouts. Node's default is 30 s, so a
 * client trickling its headers would be closed up to 30 s past headers_timeout_ms; an
 * eighth of the headers timeout, at most 1 s, closes it within headers_timeout_ms + 1 s
 * with room for a busy event loop. (The check walks the list of connections with a request
 * in progress, in C++: cheap even with thousands.)
 */
export function connectionsCheckingIntervalMs(headersTimeoutMs: number): number {
  return Math.max(25, Math.min(1_000, Math.floor(headersTimeoutMs / 8)));
}

/** The node:http options of @hono/node-server's `serve(...)`. */
export function httpServerOptions(server: ServerSectionConfig): ServerOptions {
  return {
    headersTimeout: server.headers_timeout_ms,
    requestTimeout: server.request_timeout_ms,
    keepAliveTimeout: server.keep_alive_timeout_ms,
    connectionsCheckingInterval: connectionsCheckingIntervalMs(server.headers_timeout_ms),
  };
}

export interface HttpEdgeOptions {
  onRefused: (reason: RefusedReason) => void;
  log: (line: string) => void;
}

/**
 * The connection limit, counted refusals, and accept errors that do not crash the process:
 * without an 'error' listener an accept failing with EMFILE (out of file descriptors) would
 * be an uncaught exception. libuv closes such a connection itself (its reserve-fd trick).
 */
export function guardHttpEdge(
  server: Server,
  config: ServerSectionConfig,
  options: HttpEdgeOptions,
): void {
  server.maxConnections = config.max_connections;
  // Node closes the socket of a connection over maxConnections at accept and emits 'drop'.
  server.on('drop', () => options.onRefused('max_connections'));
  let lastLogged = 0;
  server.on('error', (error: NodeJS.ErrnoException) => {
    options.onRefused('accept_error');
    const now = performance.now();
    if (now - lastLogged > 10_000) {
      lastLogged = now;
      options.log(`fairgate: accepting a connection failed: ${error.code ?? error.message}`);
    }
  });
  const limit = openFilesLimit();
  if (limit !== undefined && config.max_connections + FD_HEADROOM > limit) {
    options.log(
      `fairgate: server.max_connections ${config.max_connections} + ${FD_HEADROOM} for pods, Redis and files exceeds this process's open-files limit ${limit} (ulimit -n): connections past it fail at accept`,
    );
  }
}

/** File descriptors kept for everything but client connections (pods, Redis, files). */
const FD_HEADROOM = 1_024;

/** The soft RLIMIT_NOFILE of this process (Linux /proc), undefined where unknown. */
export function openFilesLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.split(/\s{2,}/)[1];
    const value = Number(soft);
    return Number.isFinite(value) && value > 0 ? value : undefined;
  } catch {
    return undefined;
  }
}
