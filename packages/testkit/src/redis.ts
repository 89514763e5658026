import { accessSync, constants, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findExecutable } from './paths.js';
import { freePort } from './ports.js';
import { type ManagedProcess, spawnManaged, waitUntil } from './processes.js';

/**
 * A Redis for one test file or demo run. Three sources, in order:
 * 1. REDIS_URL (an existing server; kill/restart are unavailable),
 * 2. a private `redis-server` on a free port (fast, isolated, killable),
 * 3. testcontainers, where a Docker engine is reachable.
 * With none of them it fails loudly with instructions: Redis tests never skip.
 */
export interface RedisHandle {
  /** redis://127.0.0.1:PORT (stable across restart()). */
  readonly url: string;
  readonly port: number;
  /** Where it came from: tests that need kill/restart check this. */
  readonly source: 'env' | 'redis-server' | 'container';
  /** Graceful shutdown (data is not persisted). */
  stop(): Promise<void>;
  /** SIGKILL: chaos tests. */
  kill(): Promise<void>;
  /** A fresh, empty server on the same port (after kill or stop, or while running). */
  restart(): Promise<void>;
  /** SIGSTOP: the server stalls with its connections open (a network stall, a long fork). */
  pause(): Promise<void>;
  /** SIGCONT after pause(). */
  resume(): Promise<void>;
}

export const REDIS_MISSING_HELP =
  'No Redis available for tests: install redis-server (Debian/Ubuntu: `apt-get install -y redis-server`; ' +
  'macOS: `brew install redis`), or set REDIS_URL=redis://host:port, or run a Docker engine for testcontainers.';

export function findRedisServer(): string | undefined {
  const explicit = process.env.REDIS_SERVER_BIN;
  if (explicit) {
    try {
      accessSync(explicit, constants.X_OK);
      return explicit;
    } catch {
      return undefined;
    }
  }
  return findExecutable('redis-server', ['/usr/bin', '/usr/local/bin', '/usr/sbin']);
}

/** One PING over a raw socket: true on +PONG. */
export function pingRedis(port: number, host = '127.0.0.1', timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => done(data.toString().startsWith('+PONG')));
  });
}

export async function startRedis(options: { args?: string[] } = {}): Promise<RedisHandle> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv) return externalRedis(fromEnv);
  const binary = findRedisServer();
  if (binary) return privateRedisServer(binary, options.args ?? []);
  const container = await containerRedis();
  if (container) return container;
  throw new Error(REDIS_MISSING_HELP);
}

function externalRedis(url: string): RedisHandle {
  const unsupported = (what: string) => () =>
    Promise.reject(
      new Error(
        `${what} is not possible on REDIS_URL=${url}; unset it to use a private redis-server`,
      ),
    );
  return {
    url,
    port: Number(new URL(url).port || 6379),
    source: 'env',
    stop: () => Promise.resolve(),
    kill: unsupported('kill'),
    restart: unsupported('restart'),
    pause: unsupported('pause'),
    resume: unsupported('resume'),
  };
}

async function privateRedisServer(binary: string, extraArgs: string[]): Promise<RedisHandle> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'fairgate-redis-'));
  // biome-ignore format: flag/value pairs read best side by side
  const args = [
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--save', '',
    '--appendonly', 'no',
    '--dir', dir,
    '--daemonize', 'no',
    '--loglevel', 'warning',
    ...extraArgs,
  ];
  let server: ManagedProcess | undefined;

  async function launch(): Promise<void> {
    const started = spawnManaged({ name: `redis-server:${port}`, command: binary, args });
    server = started;
    await waitUntil(`redis-server on port ${port}`, () => pingRedis(port), { process: started });
  }

  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    source: 'redis-server',
    async stop() {
      await server?.stop();
      rmSync(dir, { recursive: true, force: true });
    },
    async kill() {
      await server?.kill();
    },
    async restart() {
      if (server && !server.exited) await server.kill();
      await launch();
    },
    async pause() {
      if (server) process.kill(server.pid, 'SIGSTOP');
    },
    async resume() {
      if (server) process.kill(server.pid, 'SIGCONT');
    },
  };
}

/** testcontainers' Redis, only when a Docker engine answers; undefined otherwise. */
async function containerRedis(): Promise<RedisHandle | undefined> {
  let testcontainers: typeof import('testcontainers');
  try {
    testcontainers = await import('testcontainers');
    await testcontainers.getContainerRuntimeClient();
  } catch {
    return undefined;
  }
  const image = process.env.REDIS_IMAGE ?? 'redis:7-alpine';
  let container = await new testcontainers.GenericContainer(image).withExposedPorts(6379).start();
  const handle = {
    get url() {
      return `redis://${container.getHost()}:${container.getMappedPort(6379)}`;
    },
    get port() {
      return container.getMappedPort(6379);
    },
    source: 'container' as const,
    async stop() {
      await container.stop();
    },
    async kill() {
      await container.stop({ timeout: 0 });
    },
    async restart() {
      await container.stop({ timeout: 0 }).catch(() => {});
      container = await new testcontainers.GenericContainer(image).withExposedPorts(6379).start();
    },
    async pause() {
      await container.exec(['kill', '-STOP', '1']);
    },
    async resume() {
      await container.exec(['kill', '-CONT', '1']);
    },
  };
  return handle;
}
