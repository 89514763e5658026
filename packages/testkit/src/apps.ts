import { existsSync } from 'node:fs';
import { appEntry } from './paths.js';
import { freePort } from './ports.js';
import { type ManagedProcess, spawnManaged, waitUntil } from './processes.js';

/** A running app (sim or gateway) reachable over HTTP on 127.0.0.1. */
export interface AppHandle extends ManagedProcess {
  readonly url: string;
  readonly port: number;
}

export type FlagValues = Record<string, string | number | boolean | undefined>;

/** `{ 'alpha-ms': 20, stream: true }` -> `['--alpha-ms', '20', '--stream']`. */
export function toFlags(values: FlagValues): string[] {
  const flags: string[] = [];
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined || value === false) continue;
    flags.push(`--${name}`);
    if (value !== true) flags.push(String(value));
  }
  return flags;
}

export interface StartAppOptions {
  /** Extra CLI flags (object form, or raw strings). */
  args?: FlagValues | string[];
  env?: Record<string, string | undefined>;
  /** Fixed port; a free one is picked when omitted. */
  port?: number;
  /**
   * The loopback address to listen on (`--host`; default 127.0.0.1): sims on 127.0.0.2,
   * 127.0.0.3, ... share one port, as pods behind one DNS name do.
   */
  host?: string;
  /** Health path polled for readiness. */
  healthPath?: string;
  readyTimeoutMs?: number;
  /** Node flags placed before the entry point, e.g. ['--cpu-prof'] for profiling. */
  nodeArgs?: string[];
}

export async function startApp(app: string, options: StartAppOptions = {}): Promise<AppHandle> {
  const entry = appEntry(app);
  if (!existsSync(entry)) {
    throw new Error(
      `${entry} is missing: run \`npm run build\` first (tests run built apps as child processes)`,
    );
  }
  const port = options.port ?? (await freePort());
  const host = options.host ?? '127.0.0.1';
  const url = `http://${host}:${port}`;
  const extra = Array.isArray(options.args) ? options.args : toFlags(options.args ?? {});
  const hostFlags = options.host ? ['--host', options.host] : [];
  const child = spawnManaged({
    name: `${app}:${host === '127.0.0.1' ? '' : `${host}:`}${port}`,
    command: process.execPath,
    args: [...(options.nodeArgs ?? []), entry, '--port', String(port), ...hostFlags, ...extra],
    env: options.env ?? {},
    exitWithStdin: true,
  });
  const health = `${url}${options.healthPath ?? '/health'}`;
  const probe = async () => (await fetch(health, { signal: AbortSignal.timeout(1_000) })).ok;
  try {
    await waitUntil(`${app} at ${url}`, probe, {
      process: child,
      timeoutMs: options.readyTimeoutMs ?? 15_000,
    });
  } catch (error) {
    await child.kill();
    throw error;
  }
  return {
    name: child.name,
    pid: child.pid,
    url,
    port,
    logs: child.logs,
    get exited() {
      return child.exited;
    },
    exit: child.exit,
    stop: child.stop,
    kill: child.kill,
  };
}

/** A simulated vLLM pod (`fairgate-sim`) on a free port, ready when /health answers. */
export function startSim(options: StartAppOptions = {}): Promise<AppHandle> {
  return startApp('vllm-sim', { healthPath: '/health', ...options });
}

export interface StartGatewayOptions extends StartAppOptions {
  /** Path of the gateway config file. */
  config: string;
  replicaId?: string;
}

/** A gateway replica (`fairgate`) on a free port, ready when /healthz answers. */
export function startGatewayProcess(options: StartGatewayOptions): Promise<AppHandle> {
  const extra = Array.isArray(options.args) ? options.args : toFlags(options.args ?? {});
  const flags = ['--config', options.config, '--host', '127.0.0.1'];
  if (options.replicaId) flags.push('--replica-id', options.replicaId);
  return startApp('gateway', { ...options, args: [...flags, ...extra], healthPath: '/healthz' });
}
