import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type BatchRecord, BatchStore, newBatchId } from '../src/batch/batch-store.js';

/**
 * BatchStore on a real redis-server: the batch lifecycle's scripts (start, beginLine,
 * recordLine, cancel, finish) and what makes a batch exactly-once and cancel-safe.
 */
let redis: RedisHandle;
let connection: Redis;
let store: BatchStore;

beforeAll(async () => {
  redis = await startRedis();
  connection = new Redis(redis.url);
  store = new BatchStore(connection);
});

afterAll(async () => {
  connection?.disconnect();
  await redis?.stop();
});

beforeEach(async () => {
  await connection.flushall();
});

const nowS = () => Math.floor(Date.now() / 1_000);

function record(overrides: Partial<BatchRecord> = {}): BatchRecord {
  const now = nowS();
  return {
    id: newBatchId(),
    tenant: 'acme',
    pool: 'default',
    endpoint: '/v1/chat/completions',
    inputFileId: 'file-000000000000000000000000',
    completionWindow: '24h',
    status: 'validating',
    model: 'm',
    metadata: { team: 'eval' },
    errors: null,
    outputFileId: null,
    errorFileId: null,
    createdAt: now,
    expiresAt: now + 86_400,
    inProgressAt: null,
    finalizingAt: null,
    completedAt: null,
    failedAt: null,
    expiredAt: null,
    cancellingAt: null,
    cancelledAt: null,
    total: 3,
    completed: 0,
    failed: 0,
    skipped: 0,
    ...overrides,
  };
}

async function started(overrides: Partial<BatchRecord> = {}): Promise<BatchRecord> {
  const batch = record(overrides);
  await store.create(batch);
  expect(await store.start(batch.id)).toBe('in_progress');
  return batch;
}

describe('BatchStore', () => {
  it('stores a batch and reads it back for its tenant only', async () => {
    const batch = record();
    await store.create(batch);
    expect(await store.get('acme', batch.id)).toEqual(batch);
    expect(await store.get('other', batch.id)).toBeUndefined();
    expect(await store.get('acme', newBatchId())).toBeUndefined();
    expect(await store.read(batch.id)).toEqual(batch);
  });

  it('lists newest first, paginated by `after` with has_more', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const batch = record();
      await store.create(batch);
      ids.unshift(batch.id);
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    await store.create(record({ tenant: 'other' }));
    const first = await store.list('acme', { limit: 2 });
    expect(first.batches.map((b) => b.id)).toEqual(ids.slice(0, 2));
    expect(first.hasMore).toBe(true);
    const last = await store.list('acme', { limit: 3, after: ids[1] });
    expect(last.batches.map((b) => b.id)).toEqual(ids.slice(2));
    expect(last.hasMore).toBe(false);
    expect(await store.list('acme', { limit: 3, after: 'batch_unknown' })).toEqual({
      batches: [],
      hasMore: false,
    });
  });

  it('start: validating -> in_progress; a batch of no lines goes to finalizing', async () => {
    const batch = await started();
    expect((await store.read(batch.id))?.inProgressAt).toBeGreaterThan(0);
    expect(await store.start(batch.id)).toBe('in_progress'); // a rerun changes nothing
    const empty = record({ total: 0 });
    await store.create(empty);
    expect(await store.start(empty.id)).toBe('finalizing');
    expect(await store.start(newBatchId())).toBe('gone');
  });

  it('beginLine: run while in progress, done once recorded, gone without the batch', async () => {
    const batch = await started();
    expect(await store.beginLine(batch.id, 0)).toEqual({
      kind: 'run',
      tenant: 'acme',
      endpoint: '/v1/chat/completions',
    });
    await store.recordLine(batch.id, 0, 'output', '{"custom_id":"a"}');
    expect(await store.beginLine(batch.id, 0)).toEqual({ kind: 'done' });
    expect(await store.beginLine(newBatchId(), 0)).toEqual({ kind: 'gone' });
  });

  it('recordLine writes and counts a line once; the last line moves the batch to finalizing once', async () => {
    const batch = await started();
    expect(await store.recordLine(batch.id, 1, 'output', '{"custom_id":"b"}')).toEqual({
      written: true,
      finalize: false,
    });
    // The same line again (its job ran twice): neither written nor counted.
    expect(await store.recordLine(batch.id, 1, 'output', '{"custom_id":"b2"}')).toEqual({
      written: false,
      finalize: false,
    });
    expect(await store.recordLine(batch.id, 2, 'error', '{"custom_id":"c"}')).toEqual({
      written: true,
      finalize: false,
    });
    expect(await store.recordLine(batch.id, 0, 'output', '{"custom_id":"a"}')).toEqual({
      written: true,
      finalize: true,
    });
    expect(await store.recordLine(batch.id, 0, 'output', '{"custom_id":"a"}')).toEqual({
      written: false,
      finalize: false,
    });
    const read = await store.read(batch.id);
    expect(read).toMatchObject({ status: 'finalizing', completed: 2, failed: 1, skipped: 0 });
    expect(await store.results(batch.id)).toEqual({
      output: ['{"custom_id":"a"}', '{"custom_id":"b"}'],
      errors: ['{"custom_id":"c"}'],
    });
  });

  it('results come back in line order across many lines', async () => {
    const batch = await started({ total: 2_500 });
    const order = Array.from({ length: 2_500 }, (_, i) => i).sort(() => Math.random() - 0.5);
    for (const index of order) {
      await store.recordLine(batch.id, index, index % 10 === 0 ? 'error' : 'output', `${index}`);
    }
    const { output, errors } = await store.results(batch.id);
    expect(output).toHaveLength(2_250);
    expect(errors).toHaveLength(250);
    expect(output.map(Number)).toEqual([...output.map(Number)].sort((a, b) => a - b));
    expect(errors[1]).toBe('10');
  });

  it('finish ends a finalizing batch once, with its files, and drops its results', async () => {
    const batch = await started({ total: 1 });
    await store.recordLine(batch.id, 0, 'output', '{}');
    expect(await store.finish(batch.id, 'file-out', null)).toBe(true);
    expect(await store.finish(batch.id, 'file-other', null)).toBe(false);
    const done = await store.read(batch.id);
    expect(done).toMatchObject({
      status: 'completed',
      outputFileId: 'file-out',
      errorFileId: null,
    });
    expect(done?.completedAt).toBeGreaterThan(0);
    expect(await connection.exists(`{fg-batch}:batch:${batch.id}:results`)).toBe(0);
  });

  it('cancel: no line begins after it; running lines still record; the batch ends cancelled', async () => {
    const batch = await started();
    expect(await store.beginLine(batch.id, 0)).toMatchObject({ kind: 'run' });
    expect(await store.cancel(batch.id)).toBe('cancelling');
    expect(await store.cancel(batch.id)).toBe('cancelling');
    expect(await store.beginLine(batch.id, 1)).toEqual({ kind: 'cancelled' });
    await store.recordLine(batch.id, 0, 'output', '{}'); // the line that was running
    await store.recordLine(batch.id, 1, 'skipped', '');
    expect((await store.recordLine(batch.id, 2, 'skipped', '')).finalize).toBe(true);
    expect(await store.finish(batch.id, 'file-out', null)).toBe(true);
    const ended = await store.read(batch.id);
    expect(ended).toMatchObject({ status: 'cancelled', completed: 1, failed: 0, skipped: 2 });
    expect(ended?.cancelledAt).toBeGreaterThan(0);
    expect(await store.cancel(batch.id)).toBe('cancelled');
    expect(await store.cancel(newBatchId())).toBeNull();
  });

  it('a batch cancelled before its lines were added ends with every line skipped', async () => {
    const batch = record({ total: 4 });
    await store.create(batch);
    expect(await store.cancel(batch.id)).toBe('cancelling');
    expect(await store.start(batch.id)).toBe('finalizing');
    expect(await store.read(batch.id)).toMatchObject({ skipped: 4, status: 'finalizing' });
    expect(await store.finish(batch.id, null, null)).toBe(true);
    expect((await store.read(batch.id))?.status).toBe('cancelled');
  });

  it('a line past the completion window is expired; the batch ends expired', async () => {
    const batch = await started({ total: 1, expiresAt: nowS() - 1 });
    expect(await store.beginLine(batch.id, 0)).toEqual({ kind: 'expired' });
    expect((await store.read(batch.id))?.expiredAt).toBeGreaterThan(0);
    expect((await store.recordLine(batch.id, 0, 'error', '{}')).finalize).toBe(true);
    expect(await store.finish(batch.id, null, 'file-err')).toBe(true);
    expect(await store.read(batch.id)).toMatchObject({
      status: 'expired',
      errorFileId: 'file-err',
    });
  });

  it('pendingByTenant: lines not yet ended of the batches in progress', async () => {
    const a = await started({ total: 10 });
    await store.recordLine(a.id, 0, 'output', '{}');
    await store.recordLine(a.id, 1, 'error', '{}');
    await started({ total: 5, tenant: 'other' });
    await store.create(record({ total: 7 })); // still validating: not counted
    const pending = await store.pendingByTenant(['acme', 'other', 'idle']);
    expect(Object.fromEntries(pending)).toEqual({ acme: 8, other: 5, idle: 0 });
    for (let i = 2; i < 10; i++) await store.recordLine(a.id, i, 'output', '{}');
    await store.finish(a.id, null, null);
    expect(Object.fromEntries(await store.pendingByTenant(['acme']))).toEqual({
      acme: 0,
      other: 5,
    });
  });

  it('failValidation fails a batch still validating, and nothing else', async () => {
    const error = { code: 'input_file_missing', message: 'gone', param: null, line: null };
    const waiting = record();
    await store.create(waiting);
    expect(await store.failValidation(waiting.id, error)).toBe(true);
    expect(await store.read(waiting.id)).toMatchObject({ status: 'failed', errors: [error] });
    const running = await started();
    expect(await store.failValidation(running.id, error)).toBe(false);
    expect((await store.read(running.id))?.status).toBe('in_progress');
  });
});
