/**
 * Benchmark: what a tenant's budgets and rate cost Redis in a slot's handover, the call a
 * loaded replica makes for nearly every request (docs/tenants.md, *What they cost*).
 *
 *   npm run bench:limits -w @fairgate/loadtest
 *
 * Two pools on a private redis-server, one tenant each: with limits it never reaches
 * (tokens per day and per month, requests per minute) and without. Each sample is one FCALL
 * of the engine's batch running a chain of BENCH_CHAIN (200) handovers, each finishing the
 * previous request with its usage and admitting the next: the wall time per handover, the
 * pools in turn, BENCH_REPEAT (100) samples each; the median and minimum of each, and their
 * ratio. No network and no gateway between the calls: only the scripts.
 */
import { poolKeys, RedisScheduler } from '@fairgate/scheduler';
import { Redis } from 'ioredis';
import { median } from './harness/report.js';
import { envNumber, runBench, startBenchRedis } from './harness/stack.js';

const CHAIN = envNumber('BENCH_CHAIN', 200);
const REPEAT = envNumber('BENCH_REPEAT', 100);
const TENANT = 'paying';
const ESTIMATE = '138';

interface Chain {
  scheduler: RedisScheduler;
  tag: string;
  batch: string;
  last: string;
}

let sequence = 0;
const nextId = () => `r${sequence++}`;

await runBench(async () => {
  const redis = await startBenchRedis();
  const admin = new Redis(redis.url);
  try {
    const start = async (limited: boolean): Promise<Chain> => {
      const pool = `limits${limited ? 'on' : 'off'}`;
      const scheduler = new RedisScheduler({ pool, connection: redis.url });
      await scheduler.configure({ initialBudget: 64 });
      await scheduler.upsertTenants([
        limited
          ? {
              id: TENANT,
              limits: { tokensPerDay: 1e12, tokensPerMonth: 1e12, requestsPerMinute: 1e9 },
            }
          : { id: TENANT },
      ]);
      await scheduler.upsertPods([{ name: 'pod-a', cap: 64 }]);
      const first = nextId();
      await scheduler.enqueue({
        id: first,
        tenant: TENANT,
        band: 1,
        replica: 'bench',
        budgetTokens: Number(ESTIMATE),
      });
      const libraries = (await admin.call('FUNCTION', 'LIST')) as unknown[][];
      const library = libraries.map((l) => l[1] as string).find((n) => n.startsWith('fairgate'));
      if (!library) throw new Error('the fairgate function library is not loaded');
      return { scheduler, tag: poolKeys(pool).tag, batch: `${library}_batch`, last: first };
    };
    /** µs per handover of one batch of CHAIN. */
    const sample = async (chain: Chain): Promise<number> => {
      const args: string[] = [];
      for (let i = 0; i < CHAIN; i++) {
        const next = nextId();
        // lua/handover-1.lua's 12 arguments: the finished request, its outcome and usage,
        // then the next request (tenant, band, replica, class, cost, KV blocks, estimate).
        args.push('handover', '12', chain.last, 'completed', '10', '1', next, TENANT, '1');
        args.push('bench', 'standard', '1', '0', ESTIMATE);
        chain.last = next;
      }
      const started = process.hrtime.bigint();
      const replies = (await admin.call('FCALL', chain.batch, '1', chain.tag, ...args)) as [
        number,
        unknown,
      ][];
      const elapsed = Number(process.hrtime.bigint() - started) / 1_000;
      if (replies.some(([ok, reply]) => ok !== 1 || !Array.isArray(reply))) {
        throw new Error('a handover of the chain was refused');
      }
      return elapsed / CHAIN;
    };
    const plain = await start(false);
    const limited = await start(true);
    const times = { plain: [] as number[], limited: [] as number[] };
    for (let i = 0; i < REPEAT; i++) {
      times.plain.push(await sample(plain));
      times.limited.push(await sample(limited));
    }
    const line = (name: string, list: number[]) =>
      `${name}: median ${median(list).toFixed(1)} us, min ${Math.min(...list).toFixed(1)} us per handover`;
    console.log(`limits benchmark: ${REPEAT} samples of ${CHAIN} handovers in one FCALL per pool`);
    console.log(line('tenant without limits', times.plain));
    console.log(line('tenant with limits   ', times.limited));
    console.log(
      `with / without: median ${(median(times.limited) / median(times.plain)).toFixed(2)}x, min ${(Math.min(...times.limited) / Math.min(...times.plain)).toFixed(2)}x`,
    );
    await plain.scheduler.close();
    await limited.scheduler.close();
  } finally {
    admin.disconnect();
  }
});
