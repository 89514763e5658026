import { randomBytes } from 'node:crypto';
import type { BatchPath } from '@fairgate/openai';
import type { Cluster, Redis } from 'ioredis';

/**
 * The Batch API's batches in Redis (docs/batch.md, *Keys*), under the hash tag `{fg-batch}`
 * with the files (one Cluster slot, so every script below is atomic):
 *
 *   {fg-batch}:batch:<id>          hash: the batch record (BatchRecord's fields)
 *   {fg-batch}:batch:<id>:results  hash: line index -> kind (o output, e error, s skipped)
 *                                  and the output line; cleared when the batch ends
 *   {fg-batch}:batches:<tenant>    sorted set: the tenant's batch ids by creation ms
 *   {fg-batch}:active              set: ids of the batches in progress (start to end)
 *
 * A line's result is written once (HSETNX on its index): a line run twice (its replica
 * died after the write, BullMQ ran it again) counts and appears once. The script that
 * records the last line moves the batch to `finalizing`; `beginLine` and `cancel` are one
 * script each, so no line begins once a cancel is acknowledged (one already granted stops
 * at the pipeline's `running` check, docs/batch.md).
 */
const TAG = '{fg-batch}';
const batchKey = (id: string) => `${TAG}:batch:${id}`;
const resultsKey = (id: string) => `${TAG}:batch:${id}:results`;
const tenantKey = (tenant: string) => `${TAG}:batches:${tenant}`;
/** The batches between their start and their end (the pending-lines gauge reads them). */
const ACTIVE_KEY = `${TAG}:active`;

export type BatchStatus =
  | 'validating'
  | 'failed'
  | 'in_progress'
  | 'finalizing'
  | 'completed'
  | 'expired'
  | 'cancelling'
  | 'cancelled';

export type BatchEndpoint = BatchPath;

/** A line error of a batch that failed validation (OpenAI's `errors.data[]`). */
export interface BatchError {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

/** The batch as stored (times in unix seconds; counts of lines). */
export interface BatchRecord {
  id: string;
  tenant: string;
  pool: string;
  endpoint: BatchEndpoint;
  inputFileId: string;
  completionWindow: string;
  status: BatchStatus;
  model: string | null;
  metadata: Record<string, string> | null;
  errors: BatchError[] | null;
  outputFileId: string | null;
  errorFileId: string | null;
  createdAt: number;
  expiresAt: number;
  inProgressAt: number | null;
  finalizingAt: number | null;
  completedAt: number | null;
  failedAt: number | null;
  expiredAt: number | null;
  cancellingAt: number | null;
  cancelledAt: number | null;
  total: number;
  completed: number;
  failed: number;
  /** Lines never run because the batch was cancelled first (in neither file). */
  skipped: number;
}

/** What a worker may do with a line (beginLine's answer). */
export type LineStart =
  | { kind: 'run'; tenant: string; endpoint: BatchEndpoint }
  /** Already recorded (a retry after a crash): nothing to do. */
  | { kind: 'done' }
  | { kind: 'cancelled' }
  /** Past the completion window: recorded as a batch_expired error. */
  | { kind: 'expired' }
  /** The batch record is gone (deleted): the line is dropped. */
  | { kind: 'gone' };

export type LineKind = 'output' | 'error' | 'skipped';

const KIND_CODE: Record<LineKind, string> = { output: 'o', error: 'e', skipped: 's' };
const COUNTER: Record<LineKind, string> = {
  output: 'completed',
  error: 'failed',
  skipped: 'skipped',
};

// KEYS[1] batch; ARGV[1] now (ms), ARGV[2] line index (0-based); KEYS[2] results.
const BEGIN_LINE = `
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return {'done'} end
local fields = redis.call('HMGET', KEYS[1], 'status', 'expires_at', 'tenant', 'endpoint')
local status = fields[1]
if not status then return {'gone'} end
if status == 'cancelling' or status == 'cancelled' then return {'cancelled'} end
if status == 'in_progress' then
  if tonumber(ARGV[1]) >= tonumber(fields[2]) * 1000 then
    redis.call('HSETNX', KEYS[1], 'expired_at', math.floor(tonumber(ARGV[1]) / 1000))
    return {'expired'}
  end
  return {'run', fields[3], fields[4]}
end
if status == 'expired' then return {'expired'} end
return {'done'}
`;

// KEYS[1] batch, KEYS[2] results; ARGV[1] index, ARGV[2] kind code, ARGV[3] counter,
// ARGV[4] line (JSON or ''), ARGV[5] now (s). Returns {written, finalize}.
const RECORD_LINE = `
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2] .. ARGV[4]) == 0 then return {0, 0} end
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
local f = redis.call('HMGET', KEYS[1], 'status', 'total', 'completed', 'failed', 'skipped')
local ended = tonumber(f[3]) + tonumber(f[4]) + tonumber(f[5])
if ended >= tonumber(f[2]) and (f[1] == 'in_progress' or f[1] == 'cancelling') then
  redis.call('HSET', KEYS[1], 'final_status', f[1] == 'cancelling' and 'cancelled' or 'completed',
    'status', 'finalizing', 'finalizing_at', ARGV[5])
  return {1, 1}
end
return {1, 0}
`;

// KEYS[1] batch, KEYS[2] active; ARGV[1] now (s), ARGV[2] id. validating -> in_progress
// (and into the active set); a batch cancelled while
// validating, or one with no lines, goes straight to finalizing. Returns the new status.
const START = `
local f = redis.call('HMGET', KEYS[1], 'status', 'total')
if not f[1] then return 'gone' end
if f[1] == 'validating' then
  if tonumber(f[2]) == 0 then
    redis.call('HSET', KEYS[1], 'status', 'finalizing', 'final_status', 'completed', 'finalizing_at', ARGV[1])
    return 'finalizing'
  end
  redis.call('HSET', KEYS[1], 'status', 'in_progress', 'in_progress_at', ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[2])
  return 'in_progress'
end
if f[1] == 'cancelling' then
  -- Cancelled after its lines were added: they end as skipped when the workers take them.
  if redis.call('HEXISTS', KEYS[1], 'in_progress_at') == 1 then return 'cancelling' end
  local ended = redis.call('HMGET', KEYS[1], 'completed', 'failed')
  redis.call('HSET', KEYS[1], 'skipped', tonumber(f[2]) - tonumber(ended[1]) - tonumber(ended[2]),
    'status', 'finalizing', 'final_status', 'cancelled', 'finalizing_at', ARGV[1])
  return 'finalizing'
end
return f[1]
`;

// KEYS[1] batch; ARGV[1] errors (JSON), ARGV[2] now (s). validating -> failed.
const FAIL = `
if redis.call('HGET', KEYS[1], 'status') ~= 'validating' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'failed', 'failed_at', ARGV[2], 'errors', ARGV[1])
return 1
`;

// KEYS[1] batch; ARGV[1] now (s). Returns the status after the call.
const CANCEL = `
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
if status == 'validating' or status == 'in_progress' then
  redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', ARGV[1])
  return 'cancelling'
end
return status
`;

// KEYS[1] batch, KEYS[2] results, KEYS[3] active; ARGV[1] output file id, ARGV[2] error
// file id, ARGV[3] now (s), ARGV[4] id. finalizing -> its final status (completed, cancelled, or expired when a line
// found the window past). Returns 1 when this call ended it (0: another did).
const FINISH = `
local f = redis.call('HMGET', KEYS[1], 'status', 'final_status', 'expired_at')
if f[1] ~= 'finalizing' then return 0 end
local final = f[2]
if final == 'completed' and f[3] then final = 'expired' end
redis.call('HSET', KEYS[1], 'status', final, final .. '_at', ARGV[3])
if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], 'output_file_id', ARGV[1]) end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'error_file_id', ARGV[2]) end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[4])
return 1
`;

type Scripted = {
  fgBatchBegin(batch: string, results: string, now: number, index: number): Promise<string[]>;
  fgBatchRecord(
    batch: string,
    results: string,
    index: number,
    code: string,
    counter: string,
    line: string,
    now: number,
  ): Promise<[number, number]>;
  fgBatchStart(batch: string, active: string, now: number, id: string): Promise<string>;
  fgBatchFail(batch: string, errors: string, now: number): Promise<number>;
  fgBatchCancel(batch: string, now: number): Promise<string | null>;
  fgBatchFinish(
    batch: string,
    results: string,
    active: string,
    outputFile: string,
    errorFile: string,
    now: number,
    id: string,
  ): Promise<number>;
};

const SCRIPTS = {
  fgBatchBegin: { keys: 2, lua: BEGIN_LINE },
  fgBatchRecord: { keys: 2, lua: RECORD_LINE },
  fgBatchStart: { keys: 2, lua: START },
  fgBatchFail: { keys: 1, lua: FAIL },
  fgBatchCancel: { keys: 1, lua: CANCEL },
  fgBatchFinish: { keys: 3, lua: FINISH },
} as const;

const nowS = () => Math.floor(Date.now() / 1_000);

/** `batch_` + 24 hex characters (OpenAI's ids look alike). */
export function newBatchId(): string {
  return `batch_${randomBytes(12).toString('hex')}`;
}

export class BatchStore {
  readonly #redis: (Redis | Cluster) & Scripted;

  constructor(redis: Redis | Cluster) {
    for (const [name, script] of Object.entries(SCRIPTS)) {
      if (!(name in redis)) {
        redis.defineCommand(name, { numberOfKeys: script.keys, lua: script.lua });
      }
    }
    this.#redis = redis as (Redis | Cluster) & Scripted;
  }

  /** Stores a new batch (its status: validating, or failed with its errors). */
  async create(record: BatchRecord): Promise<void> {
    await this.#redis
      .multi()
      .hset(batchKey(record.id), toHash(record))
      .zadd(tenantKey(record.tenant), Date.now(), record.id)
      .exec();
  }

  /** The tenant's batch, or undefined (unknown, or another tenant's). */
  async get(tenant: string, id: string): Promise<BatchRecord | undefined> {
    const hash = await this.#redis.hgetall(batchKey(id));
    if (!hash.id || hash.tenant !== tenant) return undefined;
    return fromHash(hash);
  }

  /** A batch by id, whoever owns it (the workers). */
  async read(id: string): Promise<BatchRecord | undefined> {
    const hash = await this.#redis.hgetall(batchKey(id));
    return hash.id ? fromHash(hash) : undefined;
  }

  async status(id: string): Promise<BatchStatus | undefined> {
    return ((await this.#redis.hget(batchKey(id), 'status')) as BatchStatus | null) ?? undefined;
  }

  /**
   * A batch that cannot start (its input file was deleted before its start job ran): failed
   * with one error, when it is still validating. True when it did.
   */
  async failValidation(id: string, error: BatchError): Promise<boolean> {
    return (await this.#redis.fgBatchFail(batchKey(id), JSON.stringify([error]), nowS())) === 1;
  }

  /** Newest first; the page starts after the batch `after` (OpenAI's cursor). */
  async list(
    tenant: string,
    query: { after?: string; limit: number },
  ): Promise<{ batches: BatchRecord[]; hasMore: boolean }> {
    let start = 0;
    if (query.after) {
      const rank = await this.#redis.zrevrank(tenantKey(tenant), query.after);
      if (rank === null) return { batches: [], hasMore: false };
      start = rank + 1;
    }
    const ids = await this.#redis.zrevrange(tenantKey(tenant), start, start + query.limit);
    const page = ids.slice(0, query.limit);
    const pipeline = this.#redis.pipeline();
    for (const id of page) pipeline.hgetall(batchKey(id));
    const hashes = (await pipeline.exec()) ?? [];
    const batches = hashes
      .map(([, hash]) => hash as Record<string, string>)
      .filter((hash) => hash?.id)
      .map(fromHash);
    return { batches, hasMore: ids.length > query.limit };
  }

  /** validating -> in_progress (or finalizing: cancelled meanwhile, or no lines). */
  start(id: string): Promise<string> {
    return this.#redis.fgBatchStart(batchKey(id), ACTIVE_KEY, nowS(), id);
  }

  /** Cancels (validating / in_progress -> cancelling); the status after, null if unknown. */
  cancel(id: string): Promise<string | null> {
    return this.#redis.fgBatchCancel(batchKey(id), nowS());
  }

  async beginLine(id: string, index: number): Promise<LineStart> {
    const [kind, tenant, endpoint] = await this.#redis.fgBatchBegin(
      batchKey(id),
      resultsKey(id),
      Date.now(),
      index,
    );
    if (kind === 'run') return { kind, tenant: tenant!, endpoint: endpoint as BatchEndpoint };
    return { kind: kind as Exclude<LineStart['kind'], 'run'> };
  }

  /**
   * Records a line's end once. `written` false: it was recorded before (a repeat run);
   * `finalize` true: it was the batch's last line, and the batch is now finalizing.
   */
  async recordLine(
    id: string,
    index: number,
    kind: LineKind,
    line: string,
  ): Promise<{ written: boolean; finalize: boolean }> {
    const [written, finalize] = await this.#redis.fgBatchRecord(
      batchKey(id),
      resultsKey(id),
      index,
      KIND_CODE[kind],
      COUNTER[kind],
      line,
      nowS(),
    );
    return { written: written === 1, finalize: finalize === 1 };
  }

  /**
   * The recorded lines of one kind in line order (the output or error file's lines),
   * read in slices so a large batch never needs one huge reply.
   */
  async results(id: string): Promise<{ output: string[]; errors: string[] }> {
    const entries: [number, string][] = [];
    let cursor = '0';
    do {
      const [next, flat] = await this.#redis.hscan(resultsKey(id), cursor, 'COUNT', 1_000);
      cursor = next;
      for (let i = 0; i < flat.length; i += 2) {
        entries.push([Number(flat[i]), flat[i + 1] as string]);
      }
    } while (cursor !== '0');
    entries.sort((a, b) => a[0] - b[0]);
    const output: string[] = [];
    const errors: string[] = [];
    for (const [, value] of entries) {
      if (value.startsWith('o')) output.push(value.slice(1));
      else if (value.startsWith('e')) errors.push(value.slice(1));
    }
    return { output, errors };
  }

  /** finalizing -> completed / cancelled / expired with its files; false if already ended. */
  async finish(id: string, outputFileId: string | null, errorFileId: string | null) {
    const ended = await this.#redis.fgBatchFinish(
      batchKey(id),
      resultsKey(id),
      ACTIVE_KEY,
      outputFileId ?? '',
      errorFileId ?? '',
      nowS(),
      id,
    );
    return ended === 1;
  }

  /**
   * Lines not yet ended per tenant over the batches in progress (the pending gauge): 0 for
   * every tenant named, plus any other tenant with a batch in progress.
   */
  async pendingByTenant(tenants: readonly string[]): Promise<Map<string, number>> {
    const pending = new Map<string, number>(tenants.map((tenant) => [tenant, 0]));
    const ids = await this.#redis.smembers(ACTIVE_KEY);
    if (ids.length === 0) return pending;
    const pipeline = this.#redis.pipeline();
    for (const id of ids) {
      pipeline.hmget(batchKey(id), 'tenant', 'total', 'completed', 'failed', 'skipped');
    }
    for (const [, fields] of (await pipeline.exec()) ?? []) {
      const [tenant, total, completed, failed, skipped] = fields as (string | null)[];
      if (!tenant) continue;
      const lines = Number(total) - Number(completed) - Number(failed) - Number(skipped);
      pending.set(tenant, (pending.get(tenant) ?? 0) + lines);
    }
    return pending;
  }
}

const FIELDS: Record<keyof BatchRecord, string> = {
  id: 'id',
  tenant: 'tenant',
  pool: 'pool',
  endpoint: 'endpoint',
  inputFileId: 'input_file_id',
  completionWindow: 'completion_window',
  status: 'status',
  model: 'model',
  metadata: 'metadata',
  errors: 'errors',
  outputFileId: 'output_file_id',
  errorFileId: 'error_file_id',
  createdAt: 'created_at',
  expiresAt: 'expires_at',
  inProgressAt: 'in_progress_at',
  finalizingAt: 'finalizing_at',
  completedAt: 'completed_at',
  failedAt: 'failed_at',
  expiredAt: 'expired_at',
  cancellingAt: 'cancelling_at',
  cancelledAt: 'cancelled_at',
  total: 'total',
  completed: 'completed',
  failed: 'failed',
  skipped: 'skipped',
};

const JSON_FIELDS = new Set<keyof BatchRecord>(['metadata', 'errors']);
const NUMBER_FIELDS = new Set<keyof BatchRecord>([
  'createdAt',
  'expiresAt',
  'inProgressAt',
  'finalizingAt',
  'completedAt',
  'failedAt',
  'expiredAt',
  'cancellingAt',
  'cancelledAt',
  'total',
  'completed',
  'failed',
  'skipped',
]);

function toHash(record: BatchRecord): Record<string, string> {
  const hash: Record<string, string> = {};
  for (const [key, field] of Object.entries(FIELDS) as [keyof BatchRecord, string][]) {
    const value = record[key];
    if (value === null || value === undefined) continue;
    hash[field] = JSON_FIELDS.has(key) ? JSON.stringify(value) : String(value);
  }
  return hash;
}

function fromHash(hash: Record<string, string>): BatchRecord {
  const record: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(FIELDS) as [keyof BatchRecord, string][]) {
    const value = hash[field];
    if (value === undefined) record[key] = null;
    else if (JSON_FIELDS.has(key)) record[key] = JSON.parse(value);
    else if (NUMBER_FIELDS.has(key)) record[key] = Number(value);
    else record[key] = value;
  }
  for (const count of ['total', 'completed', 'failed', 'skipped'] as const) {
    record[count] ??= 0;
  }
  return record as unknown as BatchRecord;
}
