import type { TenantConfig } from '@fairgate/config';
import { type Context, Hono, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import {
  type FileListQuery,
  type FilePurpose,
  FileQuotaError,
  type FileStore,
  type StoredFile,
} from '../batch/file-store.js';
import { BatchInputError, parseBatchInput } from '../batch/jsonl.js';
import type { GatewayDeps } from '../context.js';
import { badRequest, batchUnavailable, fileRefused, noSuchObject } from '../errors.js';
import { authenticateTenant } from '../tenants.js';
import { listPage } from './list-page.js';

/**
 * The OpenAI Files API, for the Batch API's files (docs/batch.md): upload (purpose `batch`
 * only: an input file, checked line by line at once), list, retrieve, content, delete.
 * Every call is the caller's tenant's: another tenant's file is 404, like a missing one.
 */

/** What the routes below find set by `authenticated` (their sub-app's variables). */
type FilesEnv = { Variables: { tenant: TenantConfig; files: FileStore } };
type FilesContext = Context<FilesEnv>;

/** Room for the multipart framing and the `purpose` field around the file itself. */
const MULTIPART_ALLOWANCE = 64 * 1024;
const MAX_LIST_LIMIT = 10_000;
const LISTABLE_PURPOSES: ReadonlySet<string> = new Set<FilePurpose>(['batch', 'batch_output']);

/** OpenAI's File object. */
export function fileObject(file: StoredFile) {
  return {
    id: file.id,
    object: 'file' as const,
    bytes: file.bytes,
    created_at: file.createdAt,
    filename: file.filename,
    purpose: file.purpose,
    status: 'processed' as const,
    expires_at: null,
    status_details: null,
  };
}

export function registerFileRoutes(app: Hono, deps: GatewayDeps): void {
  const files = new Hono<FilesEnv>();
  files.use('*', authenticated(deps));
  files.post('/', uploadLimit(deps), upload(deps));
  files.get('/', list);
  files.get('/:id', async (c) => {
    const id = c.req.param('id');
    const file = await c.var.files.get(c.var.tenant.id, id);
    if (!file) throw noSuchObject('File', id);
    return c.json(fileObject(file));
  });
  files.get('/:id/content', async (c) => {
    const id = c.req.param('id');
    const content = await c.var.files.content(c.var.tenant.id, id);
    if (!content) throw noSuchObject('File', id);
    // A view of the Buffer's bytes (no copy); ioredis never hands out shared memory.
    const bytes = new Uint8Array(content.buffer as ArrayBuffer, content.byteOffset, content.length);
    return c.body(bytes, 200, { 'content-type': 'application/octet-stream' });
  });
  files.delete('/:id', async (c) => {
    const id = c.req.param('id');
    if (!(await c.var.files.delete(c.var.tenant.id, id))) throw noSuchObject('File', id);
    return c.json({ id, object: 'file', deleted: true });
  });
  app.route('/v1/files', files);
}

/**
 * The tenant first (401 before anything else, an oversized upload included), then the
 * store: without Redis (embedded mode) there is none and every route answers 501.
 */
function authenticated(deps: GatewayDeps): MiddlewareHandler<FilesEnv> {
  return async function authenticateFiles(c, next) {
    c.set('tenant', await authenticateTenant(deps, c.req.header('authorization')));
    if (!deps.files) throw batchUnavailable();
    c.set('files', deps.files);
    await next();
  };
}

/**
 * Refuses an upload past batch.max_file_bytes before it is buffered: on its Content-Length,
 * or while a chunked body streams in. Built per request, as the limit can be hot-reloaded.
 */
function uploadLimit(deps: GatewayDeps): MiddlewareHandler<FilesEnv> {
  return (c, next) => {
    const maxFileBytes = deps.config().batch.max_file_bytes;
    return bodyLimit({
      maxSize: maxFileBytes + MULTIPART_ALLOWANCE,
      onError: () => {
        throw fileRefused(
          'file_too_large',
          `The upload exceeds the limit of ${maxFileBytes} bytes (batch.max_file_bytes)`,
        );
      },
    })(c, next);
  };
}

/** POST /v1/files: stores a batch input file once every line of it is a valid request. */
function upload(deps: GatewayDeps) {
  return async function uploadFile(c: FilesContext): Promise<Response> {
    const form = await c.req.parseBody().catch(() => {
      throw badRequest('The body must be multipart/form-data', null, 'invalid_multipart');
    });
    const { file, purpose } = form;
    if (!(file instanceof File)) throw badRequest('`file` must be an uploaded file', 'file');
    if (purpose !== 'batch') {
      throw badRequest(
        "`purpose` must be 'batch' (the only purpose this gateway serves)",
        'purpose',
      );
    }
    const batch = deps.config().batch;
    if (file.size > batch.max_file_bytes) {
      throw fileRefused(
        'file_too_large',
        `The file is ${file.size} bytes; the limit is ${batch.max_file_bytes} bytes (batch.max_file_bytes)`,
      );
    }
    const content = Buffer.from(await file.arrayBuffer());
    checkBatchInput(content, batch.max_lines);
    try {
      const stored = await c.var.files.put(
        { tenant: c.var.tenant.id, filename: file.name, purpose, content },
        { maxFileBytes: batch.max_file_bytes, maxTenantBytes: batch.max_tenant_bytes },
      );
      return c.json(fileObject(stored));
    } catch (error) {
      if (error instanceof FileQuotaError) throw fileRefused(error.kind, error.message);
      throw error;
    }
  };
}

/** A 400 naming the file's first bad line (its BatchInputError code), or nothing. */
function checkBatchInput(content: Buffer, maxLines: number): void {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(content);
  } catch {
    throw badRequest('The file is not valid UTF-8 text', 'file', 'invalid_encoding');
  }
  try {
    parseBatchInput(text, { maxLines });
  } catch (error) {
    if (error instanceof BatchInputError) throw badRequest(error.message, 'file', error.code);
    throw error;
  }
}

/** GET /v1/files: the tenant's files, a page at a time (OpenAI's cursor `after`). */
async function list(c: FilesContext): Promise<Response> {
  const page = await c.var.files.list(c.var.tenant.id, listQuery(c));
  return c.json(listPage(page.files.map(fileObject), page.hasMore));
}

function listQuery(c: FilesContext): FileListQuery {
  const { purpose, limit, order, after } = c.req.query();
  if (purpose !== undefined && !LISTABLE_PURPOSES.has(purpose)) {
    throw badRequest(`\`purpose\` must be one of: ${[...LISTABLE_PURPOSES].join(', ')}`, 'purpose');
  }
  if (order !== undefined && order !== 'asc' && order !== 'desc') {
    throw badRequest("`order` must be 'asc' or 'desc'", 'order');
  }
  const count = limit === undefined ? MAX_LIST_LIMIT : Number(limit);
  if (!/^\d+$/.test(limit ?? '1') || count < 1 || count > MAX_LIST_LIMIT) {
    throw badRequest(`\`limit\` must be an integer from 1 to ${MAX_LIST_LIMIT}`, 'limit');
  }
  return {
    limit: count,
    ...(purpose ? { purpose: purpose as FilePurpose } : {}),
    ...(order ? { order } : {}),
    ...(after ? { after } : {}),
  };
}
