import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import {
  type FileListQuery,
  type FilePage,
  type FilePurpose,
  FileQuotaError,
  type FileStore,
  type NewFile,
  type StoredFile,
} from './file-store.js';

/**
 * The Batch API's files in Redis. Every key carries the hash tag `{fg-batch}`, so on a
 * Cluster they share one slot and each script below runs whole on one master:
 *
 * - `{fg-batch}:file:<id>`: hash of the record's fields and the bytes (field `content`);
 *   records are read with HMGET so the content never travels with them.
 * - `{fg-batch}:files:<tenant>`: sorted set of the tenant's file ids by creation ms (list).
 * - `{fg-batch}:files:<tenant>:<purpose>`: the same, one purpose (a filtered list pages
 *   without reading the other purpose's files).
 * - `{fg-batch}:bytes`: hash tenant -> bytes its files hold (the tenant quota).
 *
 * The quota is checked and counted in the script that writes the file, so two replicas
 * uploading at once can never both pass it; delete takes the bytes back in the same way.
 * The scripts go by EVAL (Redis caches them by digest): a script cache lost to a restart or a
 * failover costs nothing to handle, and the text is small beside an upload's content.
 */
export class RedisFileStore implements FileStore {
  readonly #redis: Redis | Cluster;

  constructor(redis: Redis | Cluster) {
    this.#redis = redis;
  }

  async put(
    file: NewFile,
    limits: { maxFileBytes: number; maxTenantBytes: number },
  ): Promise<StoredFile> {
    const bytes = file.content.length;
    if (bytes > limits.maxFileBytes) {
      throw new FileQuotaError(
        'file_too_large',
        `The file is ${bytes} bytes; the limit is ${limits.maxFileBytes} bytes`,
      );
    }
    const createdMs = Date.now();
    const stored: StoredFile = {
      id: `file-${randomBytes(12).toString('hex')}`,
      tenant: file.tenant,
      filename: file.filename,
      purpose: file.purpose,
      bytes,
      createdAt: Math.floor(createdMs / 1_000),
    };
    // biome-ignore format: the keys, then the arguments
    const held = (await this.#redis.eval(
      PUT_SCRIPT, 4,
      BYTES_KEY, fileKey(stored.id), tenantKey(stored.tenant), tenantKey(stored.tenant, stored.purpose),
      stored.tenant, bytes, limits.maxTenantBytes, stored.id, createdMs,
      stored.filename, stored.purpose, stored.createdAt, file.content,
    )) as number;
    if (held >= 0) {
      throw new FileQuotaError(
        'tenant_quota_exceeded',
        `The tenant's files hold ${held} bytes; this file's ${bytes} would pass the limit of ${limits.maxTenantBytes} bytes`,
      );
    }
    return stored;
  }

  async get(tenant: string, id: string): Promise<StoredFile | undefined> {
    if (!FILE_ID.test(id)) return undefined;
    const fields = await this.#redis.hmget(fileKey(id), ...RECORD_FIELDS);
    return recordOf(id, tenant, fields);
  }

  async content(tenant: string, id: string): Promise<Buffer | undefined> {
    if (!FILE_ID.test(id)) return undefined;
    const [owner, content] = await this.#redis.hmgetBuffer(fileKey(id), 'tenant', 'content');
    return owner?.toString() === tenant && content ? content : undefined;
  }

  async delete(tenant: string, id: string): Promise<boolean> {
    if (!FILE_ID.test(id)) return false;
    // Every purpose's set is named: a script touches only the keys it is given.
    // biome-ignore format: the keys, then the arguments
    const deleted = await this.#redis.eval(
      DELETE_SCRIPT, 3 + PURPOSES.length,
      fileKey(id), BYTES_KEY, tenantKey(tenant), ...PURPOSES.map((p) => tenantKey(tenant, p)),
      tenant, id,
    );
    return deleted === 1;
  }

  async list(tenant: string, query: FileListQuery): Promise<FilePage> {
    // biome-ignore format: the keys, then the arguments
    const ids = (await this.#redis.eval(
      PAGE_SCRIPT, 1,
      tenantKey(tenant, query.purpose),
      query.after ?? '', query.order ?? 'desc', query.limit + 1,
    )) as string[];
    const pipeline = this.#redis.pipeline();
    for (const id of ids) pipeline.hmget(fileKey(id), ...RECORD_FIELDS);
    const replies = (await pipeline.exec()) ?? [];
    // A file deleted between the two calls is left out.
    const files = ids.flatMap((id, i) => recordOf(id, tenant, replies[i]?.[1] as Fields) ?? []);
    return { files: files.slice(0, query.limit), hasMore: files.length > query.limit };
  }
}

type Fields = Array<string | null>;

const PREFIX = '{fg-batch}';
const BYTES_KEY = `${PREFIX}:bytes`;
const FILE_ID = /^file-[0-9a-f]{24}$/;
const RECORD_FIELDS = ['tenant', 'filename', 'purpose', 'bytes', 'created_at'] as const;
/** Every purpose (a Record, so that a purpose added to FilePurpose must be added here). */
const PURPOSES = Object.keys({ batch: 1, batch_output: 1 } satisfies Record<
  FilePurpose,
  1
>) as FilePurpose[];

const fileKey = (id: string) => `${PREFIX}:file:${id}`;
const tenantKey = (tenant: string, purpose?: FilePurpose) =>
  `${PREFIX}:files:${tenant}${purpose ? `:${purpose}` : ''}`;

/** The record of HMGET RECORD_FIELDS; undefined when absent or another tenant's. */
function recordOf(id: string, tenant: string, fields: Fields | undefined): StoredFile | undefined {
  const [owner, filename, purpose, bytes, createdAt] = fields ?? [];
  if (owner !== tenant || filename == null || purpose == null) return undefined;
  return {
    id,
    tenant,
    filename,
    purpose: purpose as FilePurpose,
    bytes: Number(bytes),
    createdAt: Number(createdAt),
  };
}

/**
 * KEYS: bytes, file, tenant's set, tenant's purpose set. ARGV: tenant, size, tenant limit,
 * id, created ms, filename, purpose, created s, content. Returns -1 when stored, else the
 * bytes the tenant holds (refused, nothing written).
 */
const PUT_SCRIPT = `
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if held + tonumber(ARGV[2]) > tonumber(ARGV[3]) then return held end
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], 'tenant', ARGV[1], 'filename', ARGV[6], 'purpose', ARGV[7],
  'bytes', ARGV[2], 'created_at', ARGV[8], 'content', ARGV[9])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
return -1
`;

/**
 * KEYS: file, bytes, tenant's set, then each purpose's set. ARGV: tenant, id. Returns 1 when
 * the tenant's file was deleted, 0 when there was none.
 */
const DELETE_SCRIPT = `
local fields = redis.call('HMGET', KEYS[1], 'tenant', 'bytes')
if fields[1] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
for i = 3, #KEYS do redis.call('ZREM', KEYS[i], ARGV[2]) end
if redis.call('HINCRBY', KEYS[2], ARGV[1], -tonumber(fields[2])) <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 1
`;

/**
 * KEYS: the set to page. ARGV: after (a file id, or ''), 'asc' | 'desc', count. The ids of
 * the page, found by rank in one script so that a file added meanwhile shifts no page. An
 * unknown `after` gives an empty page.
 */
const PAGE_SCRIPT = `
local desc = ARGV[2] == 'desc'
local start = 0
if ARGV[1] ~= '' then
  local rank
  if desc then rank = redis.call('ZREVRANK', KEYS[1], ARGV[1])
  else rank = redis.call('ZRANK', KEYS[1], ARGV[1]) end
  if not rank then return {} end
  start = rank + 1
end
local stop = start + tonumber(ARGV[3]) - 1
if desc then return redis.call('ZREVRANGE', KEYS[1], start, stop) end
return redis.call('ZRANGE', KEYS[1], start, stop)
`;
