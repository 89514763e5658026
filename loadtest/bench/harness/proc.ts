/**
 * What the benches read from Linux's /proc (a process's CPU, RSS, system calls) and from a
 * redis-server (its pid, its command counts), and pinning to cores with `taskset` (BENCH_PIN).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Redis } from 'ioredis';

/** USER_HZ: /proc/<pid>/stat counts CPU time in ticks of 1/100 s on Linux. */
const TICKS_PER_SECOND = 100;

/** utime + stime of a process in microseconds; NaN when it cannot be read (gone, not Linux). */
export function cpuMicros(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name is in parentheses and may hold spaces: read after its last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / TICKS_PER_SECOND;
  } catch {
    return Number.NaN;
  }
}

/** VmRSS of a process in MB. */
export function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN) / 1024;
}

/** The read- and write-like system calls a process made (/proc/<pid>/io syscr, syscw), or NaN. */
export function syscallCounts(pid: number | undefined): { reads: number; writes: number } {
  if (pid === undefined) return { reads: Number.NaN, writes: Number.NaN };
  try {
    const io = readFileSync(`/proc/${pid}/io`, 'utf8');
    const count = (name: string) =>
      Number(new RegExp(`^${name}: (\\d+)$`, 'm').exec(io)?.[1] ?? Number.NaN);
    return { reads: count('syscr'), writes: count('syscw') };
  } catch {
    return { reads: Number.NaN, writes: Number.NaN };
  }
}

/** Pins each process (all its threads) to the CPUs of `cpuList` (taskset's syntax, "0", "1-3"). */
export function pinProcesses(cpuList: string, pids: Iterable<number | undefined>): void {
  if (availableParallelism() < 2) throw new Error('BENCH_PIN=1 needs at least 2 CPUs');
  for (const pid of pids) {
    if (pid === undefined) continue;
    execFileSync('taskset', ['-a', '-c', '-p', cpuList, String(pid)], { stdio: 'ignore' });
  }
}

/** The pid of the redis-server at `url` (its `INFO server`), to pin or measure it. */
export async function redisPid(url: string): Promise<number | undefined> {
  const client = new Redis(url, { lazyConnect: true });
  try {
    await client.connect();
    const match = /process_id:(\d+)/.exec(await client.info('server'));
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  } finally {
    client.disconnect();
  }
}

/** What a redis-server ran of one command (`INFO commandstats`): its calls, Redis's µs in them. */
export type RedisCommandStat = { calls: number; usec: number };

/** The redis-server at `url`'s `INFO commandstats`, by command name. */
export async function redisCommandStats(url: string): Promise<Map<string, RedisCommandStat>> {
  const client = new Redis(url, { lazyConnect: true });
  try {
    await client.connect();
    const stats = new Map<string, RedisCommandStat>();
    for (const [, name, calls, usec] of (await client.info('commandstats')).matchAll(
      /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm,
    )) {
      stats.set(name as string, { calls: Number(calls), usec: Number(usec) });
    }
    return stats;
  } finally {
    client.disconnect();
  }
}

/** `after - before` of one command's calls and µs. */
export function commandDelta(
  before: Map<string, RedisCommandStat>,
  after: Map<string, RedisCommandStat>,
  name: string,
): RedisCommandStat {
  const a = after.get(name) ?? { calls: 0, usec: 0 };
  const b = before.get(name) ?? { calls: 0, usec: 0 };
  return { calls: a.calls - b.calls, usec: a.usec - b.usec };
}
