#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { ConfigError } from '@fairgate/config';
import { onShutdownRequest } from '@fairgate/runtime';
import { startGateway } from './gateway.js';

const USAGE = `Usage: fairgate --config <file> [--port N] [--host H] [--replica-id ID]

  --config       gateway config (YAML); see docs/config.md and examples/
  --port         listen port (overrides listen.port)
  --host         listen address (overrides listen.host)
  --replica-id   this replica's id in the shared scheduler (default: hostname-pid)

Environment: FAIRGATE__<KEY>__<KEY>=value overrides any config key;
OTEL_EXPORTER_OTLP_ENDPOINT (and the other OTEL_* variables) export traces.`;

async function main(): Promise<void> {
  let values: {
    config?: string;
    port?: string;
    host?: string;
    'replica-id'?: string;
    help?: boolean;
  };
  try {
    ({ values } = parseArgs({
      options: {
        config: { type: 'string' },
        port: { type: 'string' },
        host: { type: 'string' },
        'replica-id': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (error) {
    console.error(`fairgate: ${(error as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (values.help) {
    console.log(USAGE);
    return;
  }
  if (!values.config) {
    console.error(`fairgate: --config is required\n\n${USAGE}`);
    process.exit(2);
  }
  let port: number | undefined;
  if (values.port !== undefined) {
    port = Number(values.port);
    if (!Number.isInteger(port) || port < 0 || port > 65_535) {
      console.error(`fairgate: --port must be an integer 0..65535, got '${values.port}'`);
      process.exit(2);
    }
  }
  let gateway: Awaited<ReturnType<typeof startGateway>>;
  try {
    gateway = await startGateway({
      configPath: values.config,
      ...(port !== undefined ? { port } : {}),
      ...(values.host ? { host: values.host } : {}),
      ...(values['replica-id'] ? { replicaId: values['replica-id'] } : {}),
    });
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`fairgate: refusing to start: ${error.message}`);
      process.exit(2);
    }
    throw error;
  }
  // The first SIGTERM / SIGINT (or stdin closing) drains (docs/gateway.md, *Drain*): the
  // process exits when the drain ends, at the latest shutdown.drain_timeout_s later. A second
  // signal ends the drain at once: in-flight requests are aborted, their leases released.
  let draining = false;
  const shutdown = (signal: string) => {
    if (draining) {
      console.log(`fairgate: ${signal} during the drain: ending it now`);
      gateway.cutDrain();
      // Whatever still hangs (an unreachable Redis on close) does not keep the process.
      setTimeout(() => process.exit(1), FORCED_EXIT_MS).unref();
      return;
    }
    draining = true;
    const drainMs = gateway.deps.config().shutdown.drain_timeout_s * 1_000;
    setTimeout(() => {
      console.error('fairgate: the drain did not end in time: exiting');
      process.exit(1);
    }, drainMs + FORCED_EXIT_MS).unref();
    void gateway.drain(signal).then(
      () => process.exit(0),
      (error: unknown) => {
        console.error('fairgate: drain failed:', error);
        process.exit(1);
      },
    );
  };
  onShutdownRequest(shutdown);
}

/** How long closing may take after the drain timeout (or a second signal) before exit anyway. */
const FORCED_EXIT_MS = 1_800;

main().catch((error: unknown) => {
  console.error('fairgate: fatal:', error);
  process.exit(1);
});
