import { type ChildProcess, spawn } from 'node:child_process';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { findExecutable, freePort, waitUntil } from '@fairgate/testkit';
import { parentPid } from './proc.js';

/**
 * A real nginx as a plain reverse proxy (the benchmarks' reference row): one master and
 * `worker_processes 1`, unbuffered, HTTP/1.1 keep-alive to the upstream, everything
 * (pid, logs, temp dirs) in a temporary prefix so it runs without root.
 *
 * nginx is not one of our apps, so testkit's exitWithStdin does not apply, and killing
 * only the master (testkit's exit hooks SIGKILL the direct child) leaves the worker
 * serving as an orphan. So nginx runs under a small `sh` in its own process group:
 * - stop(): closes the shell's stdin; it sends nginx SIGTERM (fast shutdown, which ends the
 *   worker) and waits; the group is SIGKILLed if that takes over 5 s;
 * - killNow(): SIGKILL to the whole group, synchronously (SIGINT and process exit);
 * - if this process dies without either (even by SIGKILL), the shell's stdin pipe closes
 *   and it stops nginx by itself.
 */
export interface NginxProxy {
  readonly url: string;
  /** Master and worker pids (for CPU accounting). */
  readonly pids: number[];
  stop(): Promise<void>;
  killNow(): void;
}

export function findNginx(): string | undefined {
  return findExecutable('nginx', ['/usr/sbin', '/usr/local/sbin', '/usr/local/nginx/sbin']);
}

function nginxConfig(dir: string, port: number, upstream: URL): string {
  return `worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream backend {
    server ${upstream.host};
    keepalive 64;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
}

/** Pids whose parent is `parent` (Linux /proc). */
function childPids(parent: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (parentPid(Number(entry)) === parent) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** Starts nginx proxying to `upstreamUrl`; resolves once a request through it succeeds. */
export async function startNginxProxy(
  nginx: string,
  upstreamUrl: string,
  probePath = '/health',
): Promise<NginxProxy> {
  const dir = mkdtempSync(join(tmpdir(), 'fairgate-nginx-'));
  chmodSync(dir, 0o755); // as root, the worker runs as nobody
  for (const sub of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, sub));
  const port = await freePort();
  writeFileSync(join(dir, 'nginx.conf'), nginxConfig(dir, port, new URL(upstreamUrl)));
  const script =
    '"$0" -p "$1" -c "$1/nginx.conf" -g "daemon off;" & n=$!; read -r _; kill -TERM "$n"; wait "$n"';
  const child: ChildProcess = spawn('sh', ['-c', script, nginx, dir], {
    detached: true, // own process group: killNow() reaches master and worker
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  child.stdin?.on('error', () => {});
  let logs = '';
  child.stderr?.setEncoding('utf8').on('data', (text: string) => {
    logs = (logs + text).slice(-8_000);
  });
  let exited = false;
  const exit = new Promise<void>((resolve) => {
    child.once('exit', () => {
      exited = true;
      resolve();
    });
  });
  const group = child.pid;
  const killNow = () => {
    if (group !== undefined && !exited) {
      try {
        process.kill(-group, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const stop = async () => {
    if (!exited) {
      child.stdin?.end();
      await Promise.race([exit, sleep(5_000)]);
    }
    killNow();
    await exit;
  };
  process.once('exit', killNow);

  const url = `http://127.0.0.1:${port}`;
  try {
    await waitUntil(
      `nginx at ${url}`,
      async () => {
        if (exited) throw new Error('exited');
        return (await fetch(`${url}${probePath}`, { signal: AbortSignal.timeout(1_000) })).ok;
      },
      { timeoutMs: 10_000 },
    );
  } catch (error) {
    let errorLog = '';
    try {
      errorLog = readFileSync(join(dir, 'error.log'), 'utf8');
    } catch {}
    await stop();
    throw new Error(`${(error as Error).message}\n${logs}${errorLog}`);
  }
  const master = Number(readFileSync(join(dir, 'nginx.pid'), 'utf8').trim());
  return { url, pids: [master, ...childPids(master)], stop, killNow };
}
