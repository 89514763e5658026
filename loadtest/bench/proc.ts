/**
 * What the benches read of a process from Linux's /proc: its CPU time, its resident memory,
 * its parent and how many read and write system calls it made. Every bench that prices a
 * request in a process's resources reads them here; and the helpers that find a
 * redis-server's pid, count the commands it ran and pin a process to cores (BENCH_PIN).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';

/** USER_HZ: /proc/<pid>/stat counts CPU time in ticks of 1/100 s on Linux. */
const TICKS_PER_SECOND = 100;

/** The fields of /proc/<pid>/stat after the command name (field 3, the state, is [0]). */
function statFields(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name is in parentheses and may hold spaces: read after its last ')'.
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** utime + stime of a process in microseconds; NaN when it cannot be read (gone, not Linux). */
export function cpuMicros(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const fields = statFields(pid);
    return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / TICKS_PER_SECOND;
  } catch {
    return Number.NaN;
  }
}

/** The parent's pid; throws when the process is gone. */
export function parentPid(pid: number): number {
  return Number(statFields(pid)[1]);
}

/** VmRSS of a process in MB. */
export function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN);
  return kb / 1024;
}

export interface SyscallCounts {
  /** read-like system calls (read, readv, recv...): syscr. */
  reads: number;
  /** write-like system calls (write, writev, send...): syscw. */
  writes: number;
}

/**
 * The read and write system calls a process has made (/proc/<pid>/io, readable by its owner
 * or root); NaN each when it cannot be read. A proxy on loopback pays most of its system time
 * in these: each socket write also runs the receiver's side of TCP and wakes it.
 */
export function syscallCounts(pid: number | undefined): SyscallCounts {
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

/**
 * Pins a process and all its threads to the CPUs of `cpuList` (taskset's list syntax, "0" or
 * "1-3"; util-linux's `taskset`, on every Debian). BENCH_PIN uses it to give the processes
 * measured a core of their own, as when Redis and the load run on other machines.
 */
export function pinProcess(pid: number, cpuList: string): void {
  execFileSync('taskset', ['-a', '-c', '-p', cpuList, String(pid)], { stdio: 'ignore' });
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
export interface RedisCommandStat {
  calls: number;
  /** Redis's own time inside the calls (its `usec`: no network, no queueing before them). */
  usec: number;
}

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
