#!/usr/bin/env node
import type { Server } from 'node:http';
import { onShutdownRequest } from '@fairgate/runtime';
import { serve } from '@hono/node-server';
import { ConfigError, helpText, type ParsedCli, parseCli } from './config.js';
import { createSimServer } from './server.js';

/**
 * `fairgate-sim`: parses flags and env (exit 2 on a bad one), serves the sim, prints one
 * `fairgate-sim listening on http://HOST:PORT` line on stdout when ready, and exits 0 on
 * SIGTERM/SIGINT — or when stdin ends with FAIRGATE_EXIT_WITH_STDIN=1, so a test harness
 * that dies leaves no orphan sim behind.
 */
function main(): void {
  let parsed: ParsedCli;
  try {
    parsed = parseCli(process.argv.slice(2), process.env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(
      `fairgate-sim: ${error.message}\nRun fairgate-sim --help for the flags.\n`,
    );
    process.exit(2);
  }
  if (parsed.help) {
    process.stdout.write(`${helpText()}\n`);
    return;
  }
  const { config } = parsed;
  const sim = createSimServer(config);
  const server = serve(
    { fetch: sim.app.fetch, port: config.port, hostname: config.host },
    (info) => {
      process.stdout.write(
        `fairgate-sim listening on http://${urlHost(config.host)}:${info.port}\n`,
      );
    },
  ) as Server;
  server.on('error', (error) => {
    process.stderr.write(
      `fairgate-sim: cannot listen on ${config.host}:${config.port}: ${error.message}\n`,
    );
    process.exit(1);
  });

  let stopping = false;
  const shutdown = () => {
    if (stopping) return;
    stopping = true;
    sim.close();
    server.close(() => process.exit(0));
    // Streams and keep-alive connections would hold close() open; the sim owes them nothing.
    server.closeAllConnections();
    setTimeout(() => process.exit(0), 2000).unref();
  };
  onShutdownRequest(shutdown);
}

/** A bind address as a URL host: wildcards become loopback, IPv6 gets brackets. */
function urlHost(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

main();
