import type { RedisTopology } from '@fairgate/scheduler';
import { type Job, Queue, Worker } from 'bullmq';
import { Cluster, Redis, type RedisOptions } from 'ioredis';

/**
 * One BullMQ queue per pool, in the pool's Redis under the pool's hash tag: keys
 * `{fg:<pool>}:batch:*` (BullMQ prefix `{fg:<pool>}`, queue `batch`), so a pool's batch
 * jobs share its Cluster slot. Three kinds of job (docs/batch.md, *Execution*):
 *
 *   start     <batch>.start      reads the input file, adds the batch's line jobs
 *   line      <batch>.<index>    one line through the scheduler (batch-worker.ts)
 *   finalize  <batch>.finalize   writes the output and error files, ends the batch
 *
 * Job ids are deterministic, so a job added twice (a start job run again after a crash)
 * is one job. Line jobs carry a BullMQ priority of their index: lines of several batches
 * interleave (line 1 of each, then line 2 ...) instead of one batch going first, and the
 * scheduler's DRR then weighs the tenants. start and finalize jobs carry none and go
 * first. A failed try goes back with the backoff of `batch.retry_*`; a replica that dies
 * mid-job stops renewing the job's lock and another replica's stalled check runs it again
 * after `batch.stalled_ms`.
 */
export const QUEUE_NAME = 'batch';

export type BatchJob =
  | { kind: 'start'; batch: string }
  | { kind: 'finalize'; batch: string }
  | {
      kind: 'line';
      batch: string;
      index: number;
      customId: string;
      body: string;
      /** 502/504 answers so far (UPSTREAM_TRIES of them make an error line). */
      upstreamFailures?: number;
    };

/** BullMQ's highest priority number (lowest priority). */
const MAX_PRIORITY = 2_097_152;
/** Tries of a job; a line is retried until its batch's completion window ends. */
const ATTEMPTS = 1_000_000_000;

export function queuePrefix(pool: string): string {
  return `{fg:${pool}}`;
}

export function jobId(job: BatchJob): string {
  return job.kind === 'line' ? `${job.batch}.${job.index}` : `${job.batch}.${job.kind}`;
}

/** The wait before try n + 1 (n >= 1): retry_base_ms doubling up to retry_max_ms, +-25 %. */
export function retryDelayMs(attemptsMade: number, baseMs: number, maxMs: number): number {
  const exponential = Math.min(maxMs, baseMs * 2 ** Math.min(30, Math.max(0, attemptsMade - 1)));
  return Math.round(exponential * (0.75 + Math.random() * 0.5));
}

/**
 * A connection for BullMQ on the pool's Redis (the topology `redis:` describes:
 * scheduler-setup.ts `redisTopology`). BullMQ's workers block on Redis and need
 * `maxRetriesPerRequest: null` (commands wait out a reconnect instead of failing); the
 * scheduler's own connections fail fast instead (createRedisConnection).
 */
export function bullmqConnection(topology: RedisTopology): Redis | Cluster {
  const common: RedisOptions = { maxRetriesPerRequest: null };
  if (topology.kind === 'standalone') return new Redis(topology.url, common);
  const password = topology.password ? { password: topology.password } : {};
  if (topology.kind === 'sentinel') {
    return new Redis({
      ...common,
      ...password,
      sentinels: topology.sentinels,
      name: topology.name,
    });
  }
  return new Cluster(topology.nodes, { redisOptions: { ...common, ...password } });
}

export interface LineQueueOptions {
  pool: string;
  redis: RedisTopology;
  retryBaseMs: () => number;
  retryMaxMs: () => number;
  log: (line: string) => void;
}

/** A pool's queue, and (once `work` is called) this replica's worker on it. */
export class LineQueue {
  readonly pool: string;
  readonly #queue: Queue<BatchJob>;
  readonly #connections: (Redis | Cluster)[] = [];
  readonly #options: LineQueueOptions;
  #worker: Worker<BatchJob> | undefined;

  constructor(options: LineQueueOptions) {
    this.pool = options.pool;
    this.#options = options;
    const connection = this.#connect();
    this.#queue = new Queue<BatchJob>(QUEUE_NAME, {
      connection,
      prefix: queuePrefix(options.pool),
      defaultJobOptions: {
        attempts: ATTEMPTS,
        backoff: { type: 'batch' },
        removeOnComplete: true,
        removeOnFail: 1_000,
      },
    });
    this.#queue.on('error', (error) => options.log(`fairgate: batch queue ${this.pool}: ${error}`));
  }

  async add(jobs: readonly BatchJob[]): Promise<void> {
    await this.#queue.addBulk(
      jobs.map((job) => ({
        name: job.kind,
        data: job,
        opts: {
          jobId: jobId(job),
          ...(job.kind === 'line' ? { priority: (job.index % (MAX_PRIORITY - 1)) + 1 } : {}),
        },
      })),
    );
  }

  /**
   * Starts this replica's worker: up to `concurrency` jobs at once; `lockMs` is how long a
   * job stays locked without renewal (batch.stalled_ms) before another replica takes it.
   */
  work(
    concurrency: number,
    lockMs: number,
    process: (job: BatchJob, update: (data: BatchJob) => Promise<void>) => Promise<void>,
  ): void {
    if (concurrency <= 0 || this.#worker) return;
    const { retryBaseMs, retryMaxMs, log } = this.#options;
    this.#worker = new Worker<BatchJob>(
      QUEUE_NAME,
      (job: Job<BatchJob>) => process(job.data, (data) => job.updateData(data)),
      {
        connection: this.#connect(),
        prefix: queuePrefix(this.pool),
        concurrency,
        lockDuration: lockMs,
        stalledInterval: lockMs,
        // A job whose replica died is run again however often that happens.
        maxStalledCount: ATTEMPTS,
        removeOnComplete: { count: 0 },
        removeOnFail: { count: 1_000 },
        settings: {
          backoffStrategy: (attemptsMade: number) =>
            retryDelayMs(attemptsMade, retryBaseMs(), retryMaxMs()),
        },
      },
    );
    this.#worker.on('error', (error) => log(`fairgate: batch worker ${this.pool}: ${error}`));
    this.#worker.on('failed', (job, error) => {
      // Every failed try is retried (ATTEMPTS); only an unexpected error is worth a line.
      if (job && !(error instanceof RetryLater)) {
        log(`fairgate: batch job ${job.id} failed (try ${job.attemptsMade}): ${error.message}`);
      }
    });
  }

  /** Stops taking jobs; waits for the jobs this replica runs (their lines end first). */
  async stopWorking(): Promise<void> {
    await this.#worker?.close();
  }

  /** Closes the worker at once (a job still running is retried elsewhere) and the queue. */
  async close(): Promise<void> {
    await this.#worker?.close(true);
    await this.#queue.close();
    for (const connection of this.#connections) connection.disconnect();
  }

  #connect(): Redis | Cluster {
    const connection = bullmqConnection(this.#options.redis);
    connection.on('error', () => {}); // BullMQ reconnects; its own 'error' events log
    this.#connections.push(connection);
    return connection;
  }
}

/** Thrown by a line that should be tried again later (BullMQ's backoff decides when). */
export class RetryLater extends Error {
  constructor(reason: string) {
    super(`retry later: ${reason}`);
    this.name = 'RetryLater';
  }
}
