/**
 * What the bench's own HTTP servers (static-upstream.ts, node-proxy.ts) share: listening on
 * 127.0.0.1, the ready line the starter waits for (`<name> listening on
 * http://127.0.0.1:<port>` on stdout) and the way out (SIGTERM, SIGINT, and the end of stdin
 * with FAIRGATE_EXIT_WITH_STDIN=1: @fairgate/runtime's onShutdownRequest), so a server never
 * outlives the bench that started it. Each server runs as its own process, its CPU measured
 * apart.
 */
import { createServer, type RequestListener } from 'node:http';
import { onShutdownRequest } from '@fairgate/runtime';

/** `--name value` from the command line. */
export function flag(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

/** Serves `handle` on 127.0.0.1:`port` (0: a free one) until told to stop; `onStop` runs first. */
export function serveBenchHttp(
  name: string,
  port: number,
  handle: RequestListener,
  onStop: () => void = () => {},
): void {
  const server = createServer({ keepAliveTimeout: 60_000 }, handle);
  server.once('error', (error) => {
    process.stderr.write(`${name}: ${error.message}\n`);
    process.exit(1);
  });
  server.listen(port, '127.0.0.1', () => {
    const address = server.address();
    const bound = typeof address === 'object' && address ? address.port : port;
    process.stdout.write(`${name} listening on http://127.0.0.1:${bound}\n`);
  });
  let stopping = false;
  const shutdown = () => {
    if (stopping) return;
    stopping = true;
    onStop();
    server.close(() => process.exit(0));
    server.closeAllConnections();
    setTimeout(() => process.exit(0), 1_000).unref();
  };
  onShutdownRequest(shutdown);
}
