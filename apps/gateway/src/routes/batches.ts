import { BATCH_PATHS } from '@fairgate/openai';
import type { Context, Hono } from 'hono';
import { z } from 'zod';
import type { BatchService } from '../batch/batch-service.js';
import type { BatchRecord } from '../batch/batch-store.js';
import type { GatewayDeps } from '../context.js';
import { badRequest, batchUnavailable, noSuchObject } from '../errors.js';
import { authenticateTenant } from '../tenants.js';
import { listPage } from './list-page.js';

/**
 * OpenAI's Batch API, batches part (docs/batch.md): POST /v1/batches, GET /v1/batches,
 * GET /v1/batches/{id}, POST /v1/batches/{id}/cancel. Tenant-scoped: another tenant's
 * batch is 404. The lines run in the replicas' workers (batch/batch-worker.ts).
 */
export function registerBatchRoutes(app: Hono, deps: GatewayDeps): void {
  const serve =
    (handler: (c: Context, tenant: string, batches: BatchService) => Promise<Response>) =>
    async (c: Context) => {
      const tenant = await authenticateTenant(deps, c.req.header('authorization'));
      if (!deps.batches) throw batchUnavailable();
      return handler(c, tenant.id, deps.batches);
    };

  app.post(
    '/v1/batches',
    serve(async (c, tenantId, batches) => {
      const tenant = deps.tenants().get(tenantId)!;
      const input = parse(createSchema, await c.req.json().catch(() => undefined));
      const batch = await batches.create(tenant, {
        inputFileId: input.input_file_id,
        endpoint: input.endpoint,
        completionWindow: input.completion_window,
        metadata: input.metadata ?? null,
      });
      return c.json(batchObject(batch));
    }),
  );

  app.get(
    '/v1/batches',
    serve(async (c, tenant, batches) => {
      const query = parse(listSchema, c.req.query());
      const page = await batches.store.list(tenant, {
        limit: query.limit,
        ...(query.after ? { after: query.after } : {}),
      });
      return c.json(listPage(page.batches.map(batchObject), page.hasMore));
    }),
  );

  app.get(
    '/v1/batches/:id',
    serve(async (c, tenant, batches) => {
      const id = c.req.param('id') ?? '';
      const batch = await batches.store.get(tenant, id);
      if (!batch) throw noSuchObject('Batch', id);
      return c.json(batchObject(batch));
    }),
  );

  app.post(
    '/v1/batches/:id/cancel',
    serve(async (c, tenant, batches) => {
      const id = c.req.param('id') ?? '';
      const batch = await batches.cancel(tenant, id);
      if (batch === undefined) throw noSuchObject('Batch', id);
      if (typeof batch === 'string') {
        throw badRequest(
          `Cannot cancel a batch with status '${batch}'.`,
          null,
          'batch_not_cancellable',
        );
      }
      return c.json(batchObject(batch));
    }),
  );
}

const createSchema = z.looseObject({
  input_file_id: z.string().min(1),
  endpoint: z.enum(BATCH_PATHS),
  completion_window: z.literal('24h'),
  metadata: z
    .record(z.string().max(64), z.string().max(512))
    .refine((metadata) => Object.keys(metadata).length <= 16, 'at most 16 keys')
    .nullish(),
});

const listSchema = z.object({
  after: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
});

/** The body or query parsed, or a 400 naming the first bad member. */
function parse<T extends z.ZodType>(schema: T, value: unknown): z.output<T> {
  const result = schema.safeParse(value ?? {});
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const param = issue?.path.join('.') || null;
  throw badRequest(`Invalid ${param ?? 'body'}: ${issue?.message ?? 'invalid value'}`, param);
}

/** OpenAI's Batch object. */
export function batchObject(batch: BatchRecord) {
  return {
    id: batch.id,
    object: 'batch' as const,
    endpoint: batch.endpoint,
    model: batch.model,
    errors: batch.errors ? { object: 'list', data: batch.errors } : null,
    input_file_id: batch.inputFileId,
    completion_window: batch.completionWindow,
    status: batch.status,
    output_file_id: batch.outputFileId,
    error_file_id: batch.errorFileId,
    created_at: batch.createdAt,
    in_progress_at: batch.inProgressAt,
    expires_at: batch.expiresAt,
    finalizing_at: batch.finalizingAt,
    completed_at: batch.completedAt,
    failed_at: batch.failedAt,
    expired_at: batch.expiredAt,
    cancelling_at: batch.cancellingAt,
    cancelled_at: batch.cancelledAt,
    request_counts: { total: batch.total, completed: batch.completed, failed: batch.failed },
    metadata: batch.metadata,
  };
}
