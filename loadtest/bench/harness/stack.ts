/**
 * Starting what the benches measure (a private Redis, the static upstream, a gateway of another
 * built checkout) and running a bench so that every process it started stops with it. Gateways
 * of this tree and sims come from @fairgate/testkit.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  freePort,
  type RedisHandle,
  spawnManaged,
  startRedis,
  stopAll,
  waitUntil,
} from '@fairgate/testkit';
import { redisPid } from './proc.js';

export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));
/** A time limit to race against: unlike `sleep`, it does not keep the process alive. */
export const timeLimit = (ms: number) => new Promise<void>((done) => setTimeout(done, ms).unref());

/** `--name value` from the command line. */
export const flag = (name: string) =>
  process.argv.includes(`--${name}`)
    ? process.argv[process.argv.indexOf(`--${name}`) + 1]
    : undefined;

/** A numeric BENCH_* knob. */
export const envNumber = (name: string, fallback: number) =>
  process.env[name] ? Number(process.env[name]) : fallback;

/** A private Redis; `pid` only for a redis-server started here (a REDIS_URL's may be anyone's). */
export async function startBenchRedis(): Promise<RedisHandle & { pid: number | undefined }> {
  const redis = await startRedis();
  const pid = redis.source === 'redis-server' ? await redisPid(redis.url) : undefined;
  return Object.assign(redis, { pid });
}

/** A process the benches measure: where it listens and its pid. */
export interface Upstream {
  url: string;
  pid: number;
}

/**
 * harness/static-upstream.ts in its own process (its CPU is measured apart), through tsx as
 * the benches run; ready once it prints its listening line. Stopped by stopAll().
 */
export async function startStaticUpstream(): Promise<Upstream> {
  const entry = fileURLToPath(new URL('./static-upstream.ts', import.meta.url));
  let url: string | undefined;
  const child = spawnManaged({
    name: 'static-upstream',
    command: process.execPath,
    args: ['--import', 'tsx', entry],
    cwd: dirname(entry), // where tsx resolves
    exitWithStdin: true,
    onLine: (line) => {
      url ??= /^static-upstream listening on (http:\/\/\S+)$/.exec(line)?.[1];
    },
  });
  await waitUntil('static-upstream', async () => url !== undefined, {
    process: child,
    timeoutMs: 15_000,
  });
  return { url: url!, pid: child.pid };
}

/**
 * A gateway replica of another checkout, from its built dist/ (BENCH_COMPARE_WITH), on a
 * free port; ready once /healthz answers.
 */
export async function startCheckoutGateway(
  root: string,
  config: string,
  replica: string,
): Promise<Upstream> {
  const entry = join(resolve(root), 'apps/gateway/dist/main.js');
  if (!existsSync(entry)) throw new Error(`${entry} is missing: build that checkout first`);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const listen = ['--host', '127.0.0.1', '--port', String(port)];
  const child = spawnManaged({
    name: `compare-gateway:${port}`,
    command: process.execPath,
    args: [entry, '--config', config, '--replica-id', replica, ...listen],
    exitWithStdin: true,
  });
  await waitUntil(
    `gateway of ${root} at ${url}`,
    async () => (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1_000) })).ok,
    { process: child, timeoutMs: 15_000 },
  );
  return { url, pid: child.pid };
}

/**
 * Runs a bench: every child process stops when it ends, fails or is interrupted (testkit
 * kills them on SIGINT), `cleanup` first; then the bench exits (tsx's esbuild service, a child
 * of this process, can otherwise keep it alive). A failure sets the exit code.
 */
export async function runBench(
  main: () => Promise<void>,
  cleanup: () => Promise<void> = async () => {},
): Promise<void> {
  try {
    await main();
  } catch (error) {
    console.error(error);
    process.exitCode = 1;
  } finally {
    await cleanup().catch(() => {});
    await stopAll();
  }
  process.exit();
}
