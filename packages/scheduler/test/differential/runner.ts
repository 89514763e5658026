import { isDeepStrictEqual } from 'node:util';
import { createRng } from '@fairgate/runtime';
import type { Redis } from 'ioredis';
import { LocalScheduler, RedisScheduler } from '../../src/index.js';
import { apply, CONTROLLER, Generator, LEADER_TTL_MS, type Operation } from './operations.js';

/** Where the test clock starts: any instant works, both engines only see this one. */
/** 2023-11-30T23:59:50Z: the minute, the UTC day and the month all end 10 s into a run. */
const CLOCK_START_MS = Date.UTC(2023, 10, 30, 23, 59, 50);

export interface RunOptions {
  seed: number;
  operations: number;
  /** Snapshots are compared every this many operations (and after the last). */
  snapshotEvery: number;
  redisUrl: string;
  /** Tallies what the agreed results were (outcome kinds), to show the run reached them. */
  tally: Map<string, number>;
}

export interface Divergence {
  seed: number;
  /** 0-based index in the log (setup operations first). */
  step: number;
  operation: Operation;
  redis: unknown;
  local: unknown;
  log: Operation[];
}

/**
 * One seeded run: the same operations on a fresh Redis pool and a LocalScheduler, both on one
 * frozen clock (the pool's `testClockMs` config field, and LocalScheduler's `now`). Stops at
 * the first result or snapshot that differs. Kill/revive only change which replicas the
 * generator drives: a dead replica stops polling and heartbeating, and the clock lapses it.
 */
export async function runSeed(options: RunOptions): Promise<Divergence | null> {
  const { seed } = options;
  let nowMs = CLOCK_START_MS;
  const local = new LocalScheduler({ now: () => nowMs });
  const redis = new RedisScheduler({
    pool: `diff-${seed}-${process.pid}`,
    connection: options.redisUrl,
  });
  const connection = (redis as unknown as { redis: Redis }).redis;
  const setClock = () => connection.hset(redis.keys.config, 'testClockMs', nowMs);
  const log: Operation[] = [];
  try {
    await setClock();
    const fence = { replica: CONTROLLER, epoch: 0 };
    for (const scheduler of [redis, local]) {
      const led = await scheduler.acquireLeadership(CONTROLLER, LEADER_TTL_MS);
      fence.epoch = led.epoch;
    }
    const generator = new Generator(createRng(seed));
    const step = async (operation: Operation): Promise<Divergence | null> => {
      log.push(operation);
      if (operation.op === 'advance') {
        nowMs += operation.ms;
        await setClock();
        return null;
      }
      const redisResult = await apply(redis, operation, fence);
      const localResult = await apply(local, operation, fence);
      if (!isDeepStrictEqual(redisResult, localResult)) {
        return {
          seed,
          step: log.length - 1,
          operation,
          redis: redisResult,
          local: localResult,
          log,
        };
      }
      generator.observe(operation, localResult);
      for (const kind of resultKinds(operation, localResult)) {
        options.tally.set(kind, (options.tally.get(kind) ?? 0) + 1);
      }
      return null;
    };
    for (const operation of generator.setup()) {
      const divergence = await step(operation);
      if (divergence) return divergence;
    }
    for (let i = 1; i <= options.operations; i += 1) {
      const divergence = await step(generator.next());
      if (divergence) return divergence;
      if (i % options.snapshotEvery === 0 || i === options.operations) {
        const snapshots = await step({ op: 'snapshot' });
        if (snapshots) return snapshots;
      }
    }
    return null;
  } finally {
    await redis.close();
    await local.close();
  }
}

/** What kind of answer an operation got, e.g. 'enqueue:rejected:tenant_queue_full'. */
function resultKinds(operation: Operation, result: unknown): string[] {
  const r = result as Record<string, unknown> | unknown[] | null;
  if (typeof r === 'object' && r !== null && !Array.isArray(r) && 'error' in r)
    return [`${operation.op}:error:${String(r.error)}`];
  switch (operation.op) {
    case 'enqueue': {
      const e = r as { status: string; code?: string; retried?: boolean; limit?: string };
      const limit = e.limit ? `:${e.limit}` : '';
      return [
        `enqueue:${e.status}${e.code ? `:${e.code}` : ''}${limit}${e.retried ? ':retried' : ''}`,
      ];
    }
    case 'poll':
      return (r as { kind: string }[]).map((notice) => `notice:${notice.kind}`);
    case 'release':
    case 'cancel': {
      const ended = r as { was: string; predictedBlocks?: number };
      const predicted = ended.predictedBlocks === undefined ? [] : [`${operation.op}:predicted`];
      return [`${operation.op}:${ended.was}`, ...predicted];
    }
    case 'heartbeat':
      return (r as { lost: string[] }).lost.map(() => 'heartbeat:lost');
    case 'handover': {
      const h = r as { handedOver: boolean; contended?: boolean; limits?: unknown };
      if (!h.handedOver) return ['handover:refused'];
      return [
        h.contended ? 'handover:contended' : 'handover:uncontended',
        ...(h.limits ? ['handover:limited'] : []),
      ];
    }
    case 'reclaim': {
      const report = r as Record<string, number>;
      return Object.keys(report)
        .filter((k) => (report[k] ?? 0) > 0)
        .map((k) => `reclaim:${k}`);
    }
    default:
      return [operation.op];
  }
}

/** A divergence as a report: the seed to replay, the step, both answers and the log's tail. */
export function describeDivergence(d: Divergence, tail = 40): string {
  const from = Math.max(0, d.log.length - tail);
  const lines = d.log
    .slice(from)
    .map((operation, i) => `  ${from + i}: ${JSON.stringify(operation)}`);
  return [
    `seed ${d.seed} diverged at step ${d.step}: ${JSON.stringify(d.operation)}`,
    `  redis: ${JSON.stringify(d.redis)}`,
    `  local: ${JSON.stringify(d.local)}`,
    `operation log (steps ${from}..${d.log.length - 1}; DIFF_LOG=all prints every step):`,
    ...(process.env.DIFF_LOG === 'all'
      ? d.log.map((operation, i) => `  ${i}: ${JSON.stringify(operation)}`)
      : lines),
    `replay: DIFF_SEED=${d.seed} npx vitest run packages/scheduler/test/differential.test.ts`,
  ].join('\n');
}
