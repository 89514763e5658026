#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { ConfigError } from '@fairgate/config';
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
  const shutdown = (signal: string) => {
    console.log(`fairgate: ${signal}: draining and shutting down`);
    void gateway.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
  if (process.env.FAIRGATE_EXIT_WITH_STDIN === '1') {
    // The harness that started us holds our stdin: when it dies, we go too.
    process.stdin.on('end', () => shutdown('stdin closed')).resume();
  }
}

main().catch((error: unknown) => {
  console.error('fairgate: fatal:', error);
  process.exit(1);
});
