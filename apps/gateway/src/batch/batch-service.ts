import type { FairgateConfig, TenantConfig } from '@fairgate/config';
import type { RedisConnection } from '@fairgate/scheduler';
import type { EdgeMetrics } from '@fairgate/telemetry';
import type { Tracer } from '@opentelemetry/api';
import { badRequest, noSuchObject } from '../errors.js';
import type { Pools } from '../pools.js';
import { redisTopology } from '../scheduler-setup.js';
import {
  type BatchEndpoint,
  type BatchError,
  type BatchRecord,
  BatchStore,
  newBatchId,
} from './batch-store.js';
import { BatchWorker } from './batch-worker.js';
import { BatchCredential } from './credential.js';
import type { FileStore } from './file-store.js';
import { BatchInputError, parseBatchInput } from './jsonl.js';
import { LineQueue } from './line-queue.js';
import { LineRunner } from './line-runner.js';

export interface BatchServiceOptions {
  config: () => FairgateConfig;
  /** The connection files and batches are stored on (`redis:`). */
  redis: RedisConnection;
  files: FileStore;
  pools: Pools;
  metrics: EdgeMetrics;
  tracer: Tracer;
  log: (line: string) => void;
}

export interface NewBatch {
  inputFileId: string;
  endpoint: BatchEndpoint;
  completionWindow: '24h';
  metadata: Record<string, string> | null;
}

/** Hours a batch may take (`completion_window: 24h`, the only one OpenAI accepts). */
const WINDOW_S = 24 * 3_600;
/** How often each replica reads the pending lines gauge from Redis. */
const PENDING_REFRESH_MS = 5_000;
/** Most line errors a failed batch reports (OpenAI's errors.data). */
const MAX_ERRORS = 100;

/**
 * The Batch API of one replica (docs/batch.md): creates, reads, lists and cancels
 * batches (routes/batches.ts), and runs this replica's share of every pool's lines (one
 * BullMQ worker per pool, `batch.concurrency` lines at once).
 */
export class BatchService {
  readonly credential = new BatchCredential();
  readonly store: BatchStore;
  readonly #queues: Map<string, LineQueue>;
  readonly #options: BatchServiceOptions;
  #runner: LineRunner | undefined;
  readonly #pendingTimer: NodeJS.Timeout;

  constructor(options: BatchServiceOptions) {
    this.#options = options;
    this.store = new BatchStore(options.redis);
    const { redis } = options.config();
    if (!redis) throw new Error('the Batch API needs redis:');
    const batch = () => options.config().batch;
    this.#queues = new Map(
      options.pools.all.map((pool) => [
        pool.name,
        new LineQueue({
          pool: pool.name,
          redis: redisTopology(redis),
          retryBaseMs: () => batch().retry_base_ms,
          retryMaxMs: () => batch().retry_max_ms,
          log: options.log,
        }),
      ]),
    );
    this.#pendingTimer = setInterval(() => void this.#refreshPending(), PENDING_REFRESH_MS);
    this.#pendingTimer.unref();
    void this.#refreshPending();
  }

  /**
   * The pending-lines gauge, read from Redis on a timer and never at scrape time: a scrape
   * must answer at once, Redis reachable or not (a read parked on a lost connection held
   * /metrics, and slowed the replica's recovery after a Redis restart). Kept as it was while
   * Redis is away.
   */
  async #refreshPending(): Promise<void> {
    const { config, metrics } = this.#options;
    try {
      const pending = await this.store.pendingByTenant(config().tenants.map((t) => t.id));
      metrics.batchLinesPending.reset();
      for (const [tenant, lines] of pending) metrics.batchLinesPending.set({ tenant }, lines);
    } catch {
      // Redis away: the next refresh tries again.
    }
  }

  /**
   * Starts this replica's workers once its HTTP server listens at `selfUrl` (each line is
   * a request to it: line-runner.ts).
   */
  work(selfUrl: string): void {
    const { config, files, metrics, tracer } = this.#options;
    const batch = config().batch;
    this.#runner = new LineRunner(selfUrl, this.credential, batch.concurrency * this.#queues.size);
    for (const queue of this.#queues.values()) {
      const worker = new BatchWorker(
        {
          store: this.store,
          files,
          runner: () => this.#runner,
          batchClass: (tenant) => this.batchClass(tenant),
          lineTimeoutMs: () => config().batch.line_timeout_ms,
          maxLines: () => config().batch.max_lines,
          metrics,
          tracer,
        },
        queue,
      );
      queue.work(batch.concurrency, batch.stalled_ms, worker.process);
    }
  }

  /** The SLO class a tenant's lines run at: tenants[].batch_class, else `batch`, else its default. */
  batchClass(tenantId: string): string {
    const config = this.#options.config();
    const tenant = config.tenants.find((t) => t.id === tenantId);
    if (tenant?.batch_class) return tenant.batch_class;
    if ('batch' in config.slo_classes) return 'batch';
    return tenant?.default_class ?? 'batch';
  }

  /**
   * Whether a batch still runs lines (asked when one of its lines is granted). A failed read
   * says yes: the line runs (it would have without the cancel), and its slot is never lost.
   */
  async running(id: string): Promise<boolean> {
    try {
      return (await this.store.status(id)) === 'in_progress';
    } catch {
      return true;
    }
  }

  /**
   * Creates a batch of the tenant's input file. The file's lines were validated at upload;
   * here each must name this endpoint and a model the tenant may use, all on one pool.
   * A batch that fails that is stored as `failed` with its line errors (OpenAI's way);
   * otherwise `validating`, and its start job adds the lines (line-queue.ts).
   */
  async create(tenant: TenantConfig, input: NewBatch): Promise<BatchRecord> {
    const { files, pools, config } = this.#options;
    const file = await files.get(tenant.id, input.inputFileId);
    if (!file) throw noSuchObject('File', input.inputFileId);
    if (file.purpose !== 'batch') {
      throw badRequest(
        `File ${file.id} has purpose '${file.purpose}'; a batch's input file has purpose 'batch'`,
        'input_file_id',
      );
    }
    const content = await files.content(tenant.id, input.inputFileId);
    const now = Math.floor(Date.now() / 1_000);
    const errors: BatchError[] = [];
    let pool: string | undefined;
    let model: string | null = null;
    let total = 0;
    try {
      const lines = parseBatchInput(content?.toString('utf8') ?? '', {
        maxLines: config().batch.max_lines,
      });
      total = lines.length;
      for (const line of lines) {
        if (errors.length >= MAX_ERRORS) break;
        const fail = (code: string, message: string, param: string) =>
          errors.push({ code, message: `Line ${line.line}: ${message}`, param, line: line.line });
        if (line.url !== input.endpoint) {
          fail(
            'invalid_url',
            `url ${line.url} is not the batch's endpoint ${input.endpoint}`,
            'url',
          );
          continue;
        }
        const route = pools.route(line.model, tenant);
        if (!route) {
          fail(
            'model_not_found',
            `The model \`${line.model}\` does not exist or you do not have access to it.`,
            'body.model',
          );
          continue;
        }
        model ??= line.model;
        pool ??= route.pool.name;
        if (route.pool.name !== pool) {
          fail(
            'mixed_pools',
            `model ${line.model} is served by pool ${route.pool.name}, the batch's first line by pool ${pool}: one batch runs on one pool`,
            'body.model',
          );
        }
      }
    } catch (error) {
      if (!(error instanceof BatchInputError)) throw error;
      errors.push({ code: error.code, message: error.message, param: null, line: error.line });
    }
    const record: BatchRecord = {
      id: newBatchId(),
      tenant: tenant.id,
      pool: pool ?? pools.first.name,
      endpoint: input.endpoint,
      inputFileId: input.inputFileId,
      completionWindow: input.completionWindow,
      status: errors.length > 0 ? 'failed' : 'validating',
      model,
      metadata: input.metadata,
      errors: errors.length > 0 ? errors : null,
      outputFileId: null,
      errorFileId: null,
      createdAt: now,
      expiresAt: now + WINDOW_S,
      inProgressAt: null,
      finalizingAt: null,
      completedAt: null,
      failedAt: errors.length > 0 ? now : null,
      expiredAt: null,
      cancellingAt: null,
      cancelledAt: null,
      total,
      completed: 0,
      failed: 0,
      skipped: 0,
    };
    await this.store.create(record);
    if (record.status === 'validating') {
      await this.#queues.get(record.pool)?.add([{ kind: 'start', batch: record.id }]);
    }
    return record;
  }

  /**
   * Cancels a batch: `cancelling` at once (no line starts after this answer but one already
   * granted and past the pipeline's `running` check), `cancelled` once the lines in flight
   * end. undefined: not the tenant's; a string: the status that cannot be cancelled.
   */
  async cancel(tenant: string, id: string): Promise<BatchRecord | undefined | string> {
    const batch = await this.store.get(tenant, id);
    if (!batch) return undefined;
    const status = await this.store.cancel(id);
    if (status !== 'cancelling') return status ?? undefined;
    return (await this.store.get(tenant, id)) ?? undefined;
  }

  /** Stops taking lines (the drain): lines running end first. */
  async stopWorking(): Promise<void> {
    await Promise.all([...this.#queues.values()].map((queue) => queue.stopWorking()));
  }

  /** Closes the queues and workers (without waiting for the lines still running). */
  async close(): Promise<void> {
    clearInterval(this.#pendingTimer);
    await Promise.all([...this.#queues.values()].map((queue) => queue.close()));
    await this.#runner?.close();
  }
}
