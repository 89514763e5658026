import type { UsageBucket } from '@fairgate/scheduler';
import type { Context } from 'hono';
import type { GatewayDeps } from '../context.js';
import { badRequest } from '../errors.js';

const DIMENSIONS = ['tenant', 'model', 'pool', 'hour'] as const;
type Dimension = (typeof DIMENSIONS)[number];
const COUNTS = ['requests', 'input_tokens', 'output_tokens', 'cached_tokens'] as const;

/**
 * GET /admin/usage (admin token; docs/tenants.md, *Usage*): what the pods reported at
 * release, from the shared hourly buckets of every pool, summed over `group_by` (any of
 * tenant, model, pool, hour; default tenant,model), for hours from `from` to `to` (Unix
 * seconds or ISO 8601; default the last 24 hours; an hour counts when it starts in the
 * range), optionally for one `tenant`. `format=csv` answers text/csv for export.
 */
export function adminUsage(deps: GatewayDeps) {
  return async function adminUsageRoute(c: Context): Promise<Response> {
    const now = Math.floor(Date.now() / 1_000);
    const to = instant(c.req.query('to'), 'to') ?? now;
    const from = instant(c.req.query('from'), 'from') ?? to - 86_400;
    if (from > to) throw badRequest('from must not be after to', 'from');
    const groupBy = dimensions(c.req.query('group_by'));
    const tenant = c.req.query('tenant');
    const format = c.req.query('format') ?? 'json';
    if (format !== 'json' && format !== 'csv') throw badRequest('format is json or csv', 'format');
    const fromHour = Math.ceil(from / 3_600) * 3_600;
    const toHour = Math.floor(to / 3_600) * 3_600;
    if (toHour - fromHour > 366 * 86_400)
      throw badRequest('a usage query spans at most 366 days', 'from');
    const buckets: Array<UsageBucket & { pool: string }> = [];
    if (fromHour <= toHour) {
      for (const pool of deps.pools.all) {
        for (const bucket of await pool.scheduler.readUsage(fromHour, toHour)) {
          if (tenant === undefined || bucket.tenant === tenant)
            buckets.push({ ...bucket, pool: pool.name });
        }
      }
    }
    const rows = summed(buckets, groupBy);
    if (format === 'csv') {
      const header = [...groupBy, ...COUNTS].join(',');
      const lines = rows.map((row) =>
        [...groupBy, ...COUNTS].map((k) => csvField(row[k])).join(','),
      );
      return c.body(`${[header, ...lines].join('\n')}\n`, 200, {
        'content-type': 'text/csv; charset=utf-8',
      });
    }
    return c.json({
      object: 'usage',
      from: new Date(fromHour * 1_000).toISOString(),
      to: new Date(toHour * 1_000).toISOString(),
      group_by: groupBy,
      ...(tenant !== undefined ? { tenant } : {}),
      data: rows,
    });
  };
}

type Row = Partial<Record<Dimension, string>> & Record<(typeof COUNTS)[number], number>;

function summed(
  buckets: ReadonlyArray<UsageBucket & { pool: string }>,
  groupBy: Dimension[],
): Row[] {
  const rows = new Map<string, Row>();
  for (const b of buckets) {
    const labels: Partial<Record<Dimension, string>> = {};
    for (const d of groupBy)
      labels[d] = d === 'hour' ? new Date(b.hour * 1_000).toISOString() : b[d];
    const key = JSON.stringify(labels);
    const row = rows.get(key) ?? {
      ...labels,
      requests: 0,
      input_tokens: 0,
      output_tokens: 0,
      cached_tokens: 0,
    };
    row.requests += b.requests;
    row.input_tokens += b.inputTokens;
    row.output_tokens += b.outputTokens;
    row.cached_tokens += b.cachedTokens;
    rows.set(key, row);
  }
  return [...rows.values()].sort((a, b) => {
    for (const d of groupBy) {
      const order = (a[d] ?? '').localeCompare(b[d] ?? '');
      if (order !== 0) return order;
    }
    return 0;
  });
}

/** Unix seconds or an ISO 8601 time; undefined when absent; 400 naming the parameter. */
function instant(value: string | undefined, param: string): number | undefined {
  if (value === undefined || value === '') return undefined;
  const seconds = /^\d+$/.test(value) ? Number(value) : Date.parse(value) / 1_000;
  if (!Number.isFinite(seconds)) {
    throw badRequest(
      `${param} must be Unix seconds or an ISO 8601 time, got ${JSON.stringify(value)}`,
      param,
    );
  }
  return Math.floor(seconds);
}

function dimensions(value: string | undefined): Dimension[] {
  if (value === undefined || value === '') return ['tenant', 'model'];
  const names = value.split(',').map((name) => name.trim());
  for (const name of names) {
    if (!(DIMENSIONS as readonly string[]).includes(name)) {
      throw badRequest(`group_by takes ${DIMENSIONS.join(', ')}; got '${name}'`, 'group_by');
    }
  }
  return [...new Set(names)] as Dimension[];
}

/** A CSV field: quoted when it holds a comma, a quote or a line break. */
function csvField(value: string | number | undefined): string {
  const text = value === undefined ? '' : String(value);
  return /[",\n\r]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}
