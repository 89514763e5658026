/**
 * Benchmark: where one gateway replica's CPU goes, per request.
 *
 *   npm run bench:profile -w @fairgate/loadtest
 *
 * One gateway process (with Redis, and one on the embedded scheduler) in front of the
 * static upstream (bench/static-upstream.ts), driven by wrk at c=16 for each workload
 * (plain: 1 token, not streamed; stream16: 16 chunks). After a JIT warm-up the bench
 * starts V8's sampling profiler in the gateway over the DevTools protocol (the gateway runs
 * with `--inspect` on a free loopback port), runs one measured wrk phase and stops it, so
 * the profile covers the steady state only. It prints the gateway's busy time per request
 * split by what spent it (loadtest/bench/cpu-profile.ts: Node's HTTP server, undici,
 * ioredis, the gateway's code, GC...) next to wrk's req/s: the "flame summary" tables of
 * docs/performance-history.md. Below them, the read and write system calls the gateway
 * made per request over the same phase (/proc/<pid>/io: on loopback each write also wakes
 * its receiver, so their count is what the syscall row's time is made of). Sampling costs a
 * few percent, so req/s here is a little below bench:overhead's.
 *
 * BENCH_COMPARE_WITH=<another checkout, built> profiles that checkout's gateway under the
 * same conditions (same upstream and Redis, in turn), for before/after tables.
 *
 * Environment: PROFILE_SECONDS (measured phase, default 6), PROFILE_WARMUP_SECONDS
 * (default 4), PROFILE_WORKLOADS (default plain,stream16), PROFILE_MODES (default
 * redis,embedded), PROFILE_CONCURRENCY (wrk connections, default 16; 1 shows what a lone
 * request pays), PROFILE_TRACES (off; `json` or `protobuf` has each gateway export its spans
 * over OTLP/HTTP in that encoding, OTEL_BSP_* unset, i.e. fairgate's batches of 128, to a
 * receiver here, bench/otlp-receiver.ts: the table then shows what tracing costs a
 * request), BENCH_COMPARE_WITH. Needs wrk (Debian package `wrk`).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  type AppHandle,
  findExecutable,
  freePort,
  startGatewayProcess,
  startRedis,
  stopAll,
  writeGatewayConfig,
} from '@fairgate/testkit';
import {
  CATEGORY_NAMES,
  type CpuProfile,
  type ProfileSummary,
  summarizeProfile,
} from './cpu-profile.js';
import { inspectorSession } from './inspector.js';
import { startOtlpReceiver } from './otlp-receiver.js';
import { type SyscallCounts, syscallCounts } from './proc.js';
import { runWrk, startCheckoutGateway, startStaticUpstream, workloadBody } from './wrk.js';

const SECONDS = Number(process.env.PROFILE_SECONDS ?? 6);
const WARMUP_SECONDS = Number(process.env.PROFILE_WARMUP_SECONDS ?? 4);
const WORKLOADS = (process.env.PROFILE_WORKLOADS ?? 'plain,stream16').split(',');
const MODES = (process.env.PROFILE_MODES ?? 'redis,embedded').split(',') as Array<
  'redis' | 'embedded'
>;
const COMPARE_WITH = process.env.BENCH_COMPARE_WITH;
/** PROFILE_TOP=N also prints each run's N functions with the most self time. */
const TOP = Number(process.env.PROFILE_TOP ?? 0);
/** PROFILE_SAVE=<dir> keeps each run's raw profile there (open it in Chrome DevTools). */
const SAVE_DIR = process.env.PROFILE_SAVE;
const CONCURRENCY = Number(process.env.PROFILE_CONCURRENCY ?? 16);
const TRACES = process.env.PROFILE_TRACES ?? 'off';
if (!['off', 'json', 'protobuf'].includes(TRACES)) {
  throw new Error(`PROFILE_TRACES must be off, json or protobuf, not ${TRACES}`);
}

interface Profiled {
  rps: number;
  requests: number;
  summary: ProfileSummary;
  /** The gateway's read and write system calls over the measured phase (/proc/<pid>/io). */
  syscalls: SyscallCounts;
}

async function profileGateway(
  gateway: { url: string; pid: number; inspectPort: number },
  workload: string,
  label: string,
): Promise<Profiled> {
  const body = workloadBody(workload);
  const wrk = { url: gateway.url, body, auth: true, concurrency: CONCURRENCY };
  await runWrk({ ...wrk, seconds: WARMUP_SECONDS });
  const session = await inspectorSession(gateway.inspectPort);
  await session.send('Profiler.enable');
  await session.send('Profiler.setSamplingInterval', { interval: 1_000 });
  await session.send('Profiler.start');
  const before = syscallCounts(gateway.pid);
  const result = await runWrk({ ...wrk, seconds: SECONDS });
  const after = syscallCounts(gateway.pid);
  const { profile } = await session.send<{ profile: CpuProfile }>('Profiler.stop');
  session.close();
  if (SAVE_DIR) {
    mkdirSync(SAVE_DIR, { recursive: true });
    writeFileSync(join(SAVE_DIR, `${label}.cpuprofile`), JSON.stringify(profile));
  }
  return {
    rps: result.rps,
    requests: result.count,
    summary: summarizeProfile(profile),
    syscalls: { reads: after.reads - before.reads, writes: after.writes - before.writes },
  };
}

/** A gateway of this checkout (built dist/) or of BENCH_COMPARE_WITH, with --inspect. */
async function startProfiledGateway(
  root: string | undefined,
  config: string,
  replica: string,
  env: Record<string, string>,
): Promise<{ url: string; pid: number; inspectPort: number; stop(): Promise<void> }> {
  const inspectPort = await freePort();
  const nodeArgs = [`--inspect=127.0.0.1:${inspectPort}`];
  if (!root) {
    const app: AppHandle = await startGatewayProcess({
      config,
      replicaId: replica,
      nodeArgs,
      env,
    });
    return { url: app.url, pid: app.pid, inspectPort, stop: () => app.stop() };
  }
  const other = await startCheckoutGateway(root, config, replica, nodeArgs, env);
  return { url: other.url, pid: other.pid, inspectPort, stop: () => other.stop() };
}

async function main(): Promise<void> {
  if (!findExecutable('wrk')) throw new Error('bench:profile needs wrk (apt-get install wrk)');
  const redis = await startRedis();
  const receiver = TRACES === 'off' ? undefined : await startOtlpReceiver({ keepSpans: false });
  const env = receiver
    ? receiver.exportEnv({
        protocol: TRACES === 'json' ? 'http/json' : 'http/protobuf',
        batching: 'sdk-default',
      })
    : {};
  try {
    const upstream = await startStaticUpstream();
    const pods = [{ name: 'pod-a', url: upstream.url, cap: 64 }];
    const trees: Array<[string, string | undefined]> = [['this tree', undefined]];
    if (COMPARE_WITH) trees.push([`compare (${COMPARE_WITH})`, COMPARE_WITH]);
    const columns: Array<{ label: string; result: Profiled }> = [];
    for (const workload of WORKLOADS) {
      for (const mode of MODES) {
        for (const [tree, root] of trees) {
          const config = writeGatewayConfig({
            budget: 64,
            pods,
            ...(mode === 'redis' ? { redisUrl: redis.url } : {}),
          });
          const gateway = await startProfiledGateway(root, config, `profile-${mode}`, env);
          try {
            const label = `${workload} ${mode} ${tree}`;
            const result = await profileGateway(gateway, workload, label.replace(/\W+/g, '-'));
            columns.push({ label, result });
            console.error(`${workload} ${mode} ${tree}: ${result.rps.toFixed(0)} req/s`);
          } finally {
            await gateway.stop();
          }
        }
      }
    }
    const width = 20;
    console.log(
      `\ngateway CPU per request (µs of busy time, sampled), wrk c=${CONCURRENCY}, ${SECONDS} s after ${WARMUP_SECONDS} s warm-up, static upstream, traces ${TRACES}\n`,
    );
    console.log(
      `${'part'.padEnd(34)}|${columns.map((c) => c.label.slice(0, width).padStart(width + 1)).join(' |')}`,
    );
    const perRequest = (c: Profiled, micros: number) => micros / c.requests;
    for (const category of CATEGORY_NAMES) {
      if (columns.every((c) => (c.result.summary.byCategory.get(category) ?? 0) === 0)) continue;
      const cells = columns.map((c) =>
        perRequest(c.result, c.result.summary.byCategory.get(category) ?? 0)
          .toFixed(1)
          .padStart(width + 1),
      );
      console.log(`${category.padEnd(34)}|${cells.join(' |')}`);
    }
    console.log(
      `${'total busy'.padEnd(34)}|${columns
        .map((c) =>
          perRequest(c.result, c.result.summary.busy)
            .toFixed(1)
            .padStart(width + 1),
        )
        .join(' |')}`,
    );
    // What the busy time's syscall share is made of: every socket write on loopback also
    // runs the receiver's side of TCP and wakes it (writev leads every profile's self time).
    for (const [name, count] of [
      ['writes (syscalls per request)', (s: SyscallCounts) => s.writes],
      ['reads (syscalls per request)', (s: SyscallCounts) => s.reads],
    ] as const) {
      const cells = columns.map((c) =>
        (count(c.result.syscalls) / c.result.requests).toFixed(2).padStart(width + 1),
      );
      console.log(`${name.padEnd(34)}|${cells.join(' |')}`);
    }
    for (const { label, result } of TOP > 0 ? columns : []) {
      console.log(`\ntop ${TOP} functions by self time, ${label} (µs per request):`);
      const top = [...result.summary.byFunction].sort((a, b) => b[1] - a[1]).slice(0, TOP);
      for (const [where, micros] of top) {
        console.log(`  ${(micros / result.requests).toFixed(1).padStart(6)}  ${where}`);
      }
    }
    console.log(
      `${'req/s (profiler on)'.padEnd(34)}|${columns.map((c) => c.result.rps.toFixed(0).padStart(width + 1)).join(' |')}`,
    );
  } finally {
    await stopAll();
    await receiver?.close();
    await redis.stop();
  }
}

await main();
