import type { IncomingMessage, ServerResponse } from 'node:http';
import { type ApiEndpoint, ENDPOINTS } from '@fairgate/openai';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import type { NodeExchange } from './body.js';
import type { GatewayDeps } from './context.js';
import { notFound } from './errors.js';
import { adminAuth } from './middleware/admin-auth.js';
import { httpErrorOf, requestContext } from './middleware/request-context.js';
import { generationHandler, nodeGenerationHandler } from './request/pipeline.js';
import { registerBatchRoutes } from './routes/batches.js';
import { adminCapacity } from './routes/capacity.js';
import { registerFileRoutes } from './routes/files.js';
import { adminState, healthz, metrics, models, readyz } from './routes/system.js';
import { registerTenantRoutes } from './routes/tenants.js';
import { adminUsage } from './routes/usage.js';

/**
 * The gateway's HTTP surface (docs/architecture.md, "HTTP contract"). Every
 * error — thrown anywhere, or an unknown route — is rendered once, here, in
 * the OpenAI error shape.
 *
 * On the Node server the endpoints of the endpoint table (ENDPOINTS of @fairgate/openai:
 * generation, prefill-only and tokenizer endpoints) are also served before Hono
 * (gatewayRequestListener below). Anything else, including those paths with a
 * query string, and app.request() in tests, takes the Hono route, which runs
 * the same handler.
 */
export function createGatewayApp(deps: GatewayDeps): Hono {
  const app = new Hono();
  app.use(requestContext());

  for (const [path, endpoint] of endpointPaths()) app.post(path, generationHandler(deps, endpoint));
  app.get('/v1/models', models(deps));
  registerFileRoutes(app, deps);
  registerBatchRoutes(app, deps);
  app.get('/healthz', healthz);
  app.get('/readyz', readyz(deps));
  app.get('/metrics', metrics(deps));
  app.use('/admin/*', adminAuth({ tokenSha256: () => deps.config().admin.token_sha256 }));
  app.get('/admin/state', adminState(deps));
  app.get('/admin/capacity', adminCapacity(deps));
  registerTenantRoutes(app, deps);
  app.get('/admin/usage', adminUsage(deps));

  app.notFound((c) => {
    const error = notFound(`${c.req.method} ${c.req.path}`);
    return c.json(error.toBody(), 404);
  });
  app.onError((error, c) => {
    const failure = httpErrorOf(error, deps.log);
    const response = c.json(failure.toBody(), failure.status as 400);
    for (const [name, value] of Object.entries(failure.headers)) response.headers.set(name, value);
    return response;
  });

  return app;
}

/**
 * The Node server's request listener: a POST whose request target is exactly one of the
 * endpoint table's paths goes straight to its handler on the Node request and response; anything
 * else goes to Hono through @hono/node-server. The generation requests skip the adapter's
 * per-request work (a web Request, three listeners on the request and response, and two
 * async frames that stay suspended while a request waits in the queue): measurable in CPU
 * at thousands of requests per second and in memory per waiting request (bench:waiting).
 * Node reads and drops a request body nobody read once the response is finished, as the
 * adapter would.
 */
export function gatewayRequestListener(
  deps: GatewayDeps,
  app: Hono,
): (incoming: IncomingMessage, outgoing: ServerResponse) => void {
  const honoListener = getRequestListener(app.fetch);
  const direct = new Map<string, (node: NodeExchange) => void>(
    endpointPaths().map(([path, endpoint]) => [path, nodeGenerationHandler(deps, endpoint)]),
  );
  return (incoming, outgoing) => {
    const handler = incoming.method === 'POST' ? direct.get(incoming.url ?? '') : undefined;
    if (handler) handler({ incoming, outgoing });
    else void honoListener(incoming, outgoing);
  };
}

/** Every path of the endpoint table (ENDPOINTS: each endpoint's path and its aliases). */
function endpointPaths(): Array<[string, ApiEndpoint]> {
  return Object.values(ENDPOINTS).flatMap((spec) =>
    [spec.path, ...spec.aliases].map((path): [string, ApiEndpoint] => [path, spec.endpoint]),
  );
}
