import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Child processes started by the harness. Every one is registered here so that
 * a failing test, an interrupted demo or a crashed parent leaves no orphans:
 * - stopAll() ends them (tests call it in afterAll; the demo on exit);
 * - on the parent's exit or SIGINT/SIGTERM they are killed synchronously;
 * - our own apps also get FAIRGATE_EXIT_WITH_STDIN=1 and a stdin pipe, so they
 *   exit by themselves when the parent dies even by SIGKILL.
 */
export interface ManagedProcess {
  readonly name: string;
  readonly pid: number;
  /** Last lines of stdout and stderr, for failure messages. */
  logs(): string;
  /** True once the process has exited. */
  readonly exited: boolean;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL at once (chaos tests); resolves when the process is gone. */
  kill(): Promise<void>;
  /** Resolves with the exit code (or signal) when the process exits. */
  readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const live = new Set<ChildProcess>();
let exitHooksInstalled = false;

function installExitHooks(): void {
  if (exitHooksInstalled) return;
  exitHooksInstalled = true;
  process.on('exit', () => {
    for (const child of live) child.kill('SIGKILL');
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      for (const child of live) child.kill('SIGKILL');
      process.kill(process.pid, signal);
    });
  }
}

const MAX_LOG_CHARS = 16_000;

export interface SpawnOptions {
  name: string;
  command: string;
  args: string[];
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** Give the child a stdin pipe that closes when we die (our own apps watch it). */
  exitWithStdin?: boolean;
  /** Called with every stdout line (readiness detection). */
  onLine?: (line: string) => void;
}

export function spawnManaged(options: SpawnOptions): ManagedProcess {
  installExitHooks();
  const child = spawn(options.command, options.args, {
    cwd: options.cwd,
    env: {
      ...process.env,
      ...(options.exitWithStdin ? { FAIRGATE_EXIT_WITH_STDIN: '1' } : {}),
      ...options.env,
    },
    stdio: [options.exitWithStdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  if (child.pid === undefined)
    throw new Error(`could not start ${options.name} (${options.command})`);
  live.add(child);

  let output = '';
  let partial = '';
  const append = (text: string) => {
    output = (output + text).slice(-MAX_LOG_CHARS);
  };
  child.stdout?.setEncoding('utf8').on('data', (text: string) => {
    append(text);
    if (!options.onLine) return;
    const lines = (partial + text).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) options.onLine(line);
  });
  child.stderr?.setEncoding('utf8').on('data', append);
  child.stdin?.on('error', () => {}); // the child may exit before we close it

  let exited = false;
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = true;
      live.delete(child);
      resolve({ code, signal });
    });
  });

  async function terminate(signal: NodeJS.Signals, graceMs: number): Promise<void> {
    if (exited) return;
    child.kill(signal);
    const done = await Promise.race([exit.then(() => true), sleep(graceMs).then(() => false)]);
    if (!done && !exited) {
      child.kill('SIGKILL');
      await exit;
    }
  }

  return {
    name: options.name,
    pid: child.pid,
    logs: () => output,
    get exited() {
      return exited;
    },
    exit,
    stop: (graceMs = 5_000) => terminate('SIGTERM', graceMs),
    kill: () => terminate('SIGKILL', 5_000),
  };
}

/** Stops every process the harness started (tests' afterAll, the demo's shutdown). */
export async function stopAll(): Promise<void> {
  await Promise.all(
    [...live].map(async (child) => {
      child.kill('SIGTERM');
      await Promise.race([
        new Promise((resolve) => child.once('exit', resolve)),
        sleep(5_000).then(() => child.kill('SIGKILL')),
      ]);
    }),
  );
}

/** Polls `probe` until it resolves true; fails with the process logs on timeout or exit. */
export async function waitUntil(
  what: string,
  probe: () => Promise<boolean>,
  options: { timeoutMs?: number; intervalMs?: number; process?: ManagedProcess } = {},
): Promise<void> {
  const deadline = Date.now() + (options.timeoutMs ?? 15_000);
  while (Date.now() < deadline) {
    if (options.process?.exited) {
      throw new Error(`${what}: ${options.process.name} exited early.\n${options.process.logs()}`);
    }
    try {
      if (await probe()) return;
    } catch {
      // not ready yet
    }
    await sleep(options.intervalMs ?? 25);
  }
  const logs = options.process ? `\n${options.process.logs()}` : '';
  throw new Error(`${what}: not ready after ${options.timeoutMs ?? 15_000} ms${logs}`);
}
