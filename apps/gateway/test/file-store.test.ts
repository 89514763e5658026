import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { type FilePurpose, FileQuotaError, type StoredFile } from '../src/batch/file-store.js';
import { RedisFileStore } from '../src/batch/redis-file-store.js';

const roomy = { maxFileBytes: 1_000_000, maxTenantBytes: 10_000_000 };

let redis: RedisHandle;
let connection: Redis;
let store: RedisFileStore;

beforeAll(async () => {
  redis = await startRedis();
  connection = new Redis(redis.url);
  store = new RedisFileStore(connection);
});

afterAll(async () => {
  connection?.disconnect();
  await redis?.stop();
});

beforeEach(async () => {
  await connection.flushall();
  vi.restoreAllMocks();
});

function put(
  tenant: string,
  content: string | Buffer,
  options: { purpose?: FilePurpose; filename?: string; limits?: typeof roomy } = {},
): Promise<StoredFile> {
  return store.put(
    {
      tenant,
      filename: options.filename ?? 'input.jsonl',
      purpose: options.purpose ?? 'batch',
      content: Buffer.isBuffer(content) ? content : Buffer.from(content),
    },
    options.limits ?? roomy,
  );
}

/** Puts files created 1 s apart (creation time orders a list). */
async function putSeries(tenant: string, purposes: FilePurpose[]): Promise<StoredFile[]> {
  const files: StoredFile[] = [];
  for (const [i, purpose] of purposes.entries()) {
    vi.spyOn(Date, 'now').mockReturnValue(1_700_000_000_000 + i * 1_000);
    files.push(await put(tenant, `file ${i}`, { purpose }));
  }
  vi.restoreAllMocks();
  return files;
}

const ids = (files: StoredFile[]) => files.map((file) => file.id);
const tenantBytes = (tenant: string) => connection.hget('{fg-batch}:bytes', tenant);
const fileKeys = () => connection.keys('{fg-batch}:file:*');

describe('RedisFileStore', () => {
  it('stores a file: its record, its content and its bytes in the tenant total', async () => {
    const before = Math.floor(Date.now() / 1_000);
    const content = Buffer.from([0x00, 0xff, 0x7b, 0x0a, 0xc3]); // binary-safe
    const stored = await put('acme', content, { filename: 'in.jsonl' });
    expect(stored).toMatchObject({
      tenant: 'acme',
      filename: 'in.jsonl',
      purpose: 'batch',
      bytes: 5,
    });
    expect(stored.id).toMatch(/^file-[0-9a-f]{24}$/);
    expect(stored.createdAt).toBeGreaterThanOrEqual(before);
    expect(stored.createdAt).toBeLessThanOrEqual(Math.floor(Date.now() / 1_000));
    expect(await store.get('acme', stored.id)).toEqual(stored);
    expect(await store.content('acme', stored.id)).toEqual(content);
    expect(await tenantBytes('acme')).toBe('5');
    // One hash slot: every key carries the {fg-batch} hash tag.
    expect((await connection.keys('*')).every((key) => key.startsWith('{fg-batch}:'))).toBe(true);
  });

  it('gives each file its own id', async () => {
    const files = await Promise.all(Array.from({ length: 20 }, () => put('acme', 'x')));
    expect(new Set(ids(files)).size).toBe(20);
  });

  it('answers unknown and malformed ids as absent', async () => {
    for (const id of ['file-000000000000000000000000', 'nope', '', 'file-../x']) {
      expect(await store.get('acme', id)).toBeUndefined();
      expect(await store.content('acme', id)).toBeUndefined();
      expect(await store.delete('acme', id)).toBe(false);
    }
  });

  it("keeps tenants apart: another tenant's file is not found, not listed, not deleted", async () => {
    const file = await put('acme', 'secret');
    expect(await store.get('globex', file.id)).toBeUndefined();
    expect(await store.content('globex', file.id)).toBeUndefined();
    expect(await store.delete('globex', file.id)).toBe(false);
    expect(await store.list('globex', { limit: 10 })).toEqual({ files: [], hasMore: false });
    expect(await store.get('acme', file.id)).toEqual(file);
    expect(await tenantBytes('acme')).toBe('6');
  });

  it('deletes a file and takes its bytes back from the tenant total', async () => {
    const first = await put('acme', '12345');
    const second = await put('acme', '123', { purpose: 'batch_output' });
    expect(await tenantBytes('acme')).toBe('8');
    expect(await store.delete('acme', first.id)).toBe(true);
    expect(await store.delete('acme', first.id)).toBe(false); // once
    expect(await store.get('acme', first.id)).toBeUndefined();
    expect(await store.content('acme', first.id)).toBeUndefined();
    expect(await tenantBytes('acme')).toBe('3');
    expect(ids((await store.list('acme', { limit: 10 })).files)).toEqual([second.id]);
    expect(await store.delete('acme', second.id)).toBe(true);
    expect(await tenantBytes('acme')).toBeNull(); // no entry left at zero
    expect(await connection.keys('*')).toEqual([]);
  });
});

describe('RedisFileStore.list', () => {
  it('lists newest first by default, oldest first with order asc', async () => {
    const files = await putSeries('acme', ['batch', 'batch', 'batch']);
    expect((await store.list('acme', { limit: 10 })).files).toEqual([...files].reverse());
    expect((await store.list('acme', { limit: 10, order: 'desc' })).files).toEqual(
      [...files].reverse(),
    );
    expect((await store.list('acme', { limit: 10, order: 'asc' })).files).toEqual(files);
  });

  it.each(['asc', 'desc'] as const)('pages with the after cursor (order %s)', async (order) => {
    const files = await putSeries('acme', Array(5).fill('batch'));
    const expected = order === 'asc' ? ids(files) : ids(files).reverse();
    const seen: string[] = [];
    let after: string | undefined;
    const pages: boolean[] = [];
    for (;;) {
      const page = await store.list('acme', { limit: 2, order, ...(after ? { after } : {}) });
      seen.push(...ids(page.files));
      pages.push(page.hasMore);
      if (!page.hasMore) break;
      after = page.files.at(-1)?.id;
    }
    expect(seen).toEqual(expected);
    expect(pages).toEqual([true, true, false]);
  });

  it('answers hasMore false when the page ends exactly at the last file', async () => {
    await putSeries('acme', ['batch', 'batch']);
    expect((await store.list('acme', { limit: 2 })).hasMore).toBe(false);
    expect((await store.list('acme', { limit: 1 })).hasMore).toBe(true);
  });

  it('filters by purpose, paging within it', async () => {
    const files = await putSeries('acme', ['batch', 'batch_output', 'batch', 'batch_output']);
    const [in0, out1, in2, out3] = ids(files);
    const outputs = await store.list('acme', { limit: 1, purpose: 'batch_output' });
    expect(ids(outputs.files)).toEqual([out3]);
    expect(outputs.hasMore).toBe(true);
    const next = await store.list('acme', { limit: 1, purpose: 'batch_output', after: out3 });
    expect(next).toEqual({ files: [files[1]], hasMore: false });
    const inputs = await store.list('acme', { limit: 10, purpose: 'batch', order: 'asc' });
    expect(ids(inputs.files)).toEqual([in0, in2]);
    expect(ids((await store.list('acme', { limit: 10 })).files)).toEqual([out3, in2, out1, in0]);
  });

  it('answers an empty page after an unknown cursor', async () => {
    const [file] = await putSeries('acme', ['batch']);
    const unknown = 'file-000000000000000000000000';
    expect(await store.list('acme', { limit: 10, after: unknown })).toEqual({
      files: [],
      hasMore: false,
    });
    // Another purpose's file is not a cursor of this purpose's list either.
    expect(
      await store.list('acme', { limit: 10, after: file!.id, purpose: 'batch_output' }),
    ).toEqual({ files: [], hasMore: false });
  });
});

describe('RedisFileStore quotas', () => {
  const limits = { maxFileBytes: 10, maxTenantBytes: 25 };

  it('refuses a file past maxFileBytes, storing and counting nothing', async () => {
    await expect(put('acme', '12345678901', { limits })).rejects.toMatchObject({
      kind: 'file_too_large',
    });
    expect(await put('acme', '1234567890', { limits })).toMatchObject({ bytes: 10 });
    expect(await tenantBytes('acme')).toBe('10');
    expect(await fileKeys()).toHaveLength(1);
  });

  it("refuses a file past the tenant's total, storing and counting nothing", async () => {
    await put('acme', '1234567890', { limits });
    await put('acme', '1234567890', { limits });
    const refused = put('acme', '123456', { limits, purpose: 'batch_output' });
    await expect(refused).rejects.toBeInstanceOf(FileQuotaError);
    await expect(refused).rejects.toMatchObject({
      kind: 'tenant_quota_exceeded',
      message: expect.stringContaining('hold 20 bytes'),
    });
    expect(await tenantBytes('acme')).toBe('20');
    expect(await fileKeys()).toHaveLength(2);
    expect((await store.list('acme', { limit: 10 })).files).toHaveLength(2);
    expect((await store.list('acme', { limit: 10, purpose: 'batch_output' })).files).toEqual([]);
    // Exactly up to the limit passes; the quota is per tenant.
    await put('acme', '12345', { limits });
    expect(await tenantBytes('acme')).toBe('25');
    await put('globex', '1234567890', { limits });
    expect(await tenantBytes('globex')).toBe('10');
  });

  it('frees quota on delete', async () => {
    const file = await put('acme', '1234567890', { limits });
    await put('acme', '1234567890', { limits });
    await expect(put('acme', '1234567890', { limits })).rejects.toThrow(FileQuotaError);
    await store.delete('acme', file.id);
    await put('acme', '1234567890', { limits });
    expect(await tenantBytes('acme')).toBe('20');
  });

  it('lets only one of two replicas racing for the last bytes pass', async () => {
    // Two replicas: two stores, each on its own connection.
    const other = new Redis(redis.url);
    const replicas = [store, new RedisFileStore(other)];
    try {
      for (let round = 0; round < 20; round += 1) {
        await connection.flushall();
        await put('acme', '1234567890', { limits }); // 10 of 25 held: room for one more 10
        const results = await Promise.allSettled(
          replicas.map((replica) =>
            replica.put(
              { tenant: 'acme', filename: 'f', purpose: 'batch', content: Buffer.alloc(10) },
              limits,
            ),
          ),
        );
        expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
        const [refused] = results.filter((result) => result.status === 'rejected');
        expect((refused as PromiseRejectedResult).reason).toMatchObject({
          kind: 'tenant_quota_exceeded',
        });
        expect(await tenantBytes('acme')).toBe('20');
        expect(await fileKeys()).toHaveLength(2);
      }
    } finally {
      other.disconnect();
    }
  });

  it('admits exactly as many concurrent uploads as the quota holds', async () => {
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, () => put('acme', Buffer.alloc(4), { limits })),
    );
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(6); // 24 of 25
    expect(await tenantBytes('acme')).toBe('24');
    expect((await store.list('acme', { limit: 100 })).files).toHaveLength(6);
  });
});
