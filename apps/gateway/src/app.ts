import { ENDPOINT_PATHS } from '@fairgate/openai';
import { Hono } from 'hono';
import type { NodeExchange } from './body.js';
import type { GatewayDeps } from './context.js';
import { notFound } from './errors.js';
import { adminAuth } from './middleware/admin-auth.js';
import { httpErrorOf, requestContext } from './middleware/request-context.js';
import { generationHandler, nodeGenerationHandler } from './request/pipeline.js';
import { adminCapacity } from './routes/capacity.js';
import { adminState, healthz, metrics, models, readyz } from './routes/system.js';

/**
 * The gateway's HTTP surface (docs/architecture.md, "HTTP contract"). Every
 * error — thrown anywhere, or an unknown route — is rendered once, here, in
 * the OpenAI error shape.
 *
 * The two generation endpoints are also served before Hono under
 * @hono/node-server: a POST whose request target is exactly one of their
 * paths goes straight to the handler on the Node request and response (no
 * router, context or middleware chain per request, which is measurable at
 * thousands of requests per second). Anything else, including those paths
 * with a query string, and app.request() in tests, takes the Hono route below,
 * which runs the same handler.
 */
export function createGatewayApp(deps: GatewayDeps): Hono {
  const app = new Hono();
  app.use(requestContext());

  app.post('/v1/chat/completions', generationHandler(deps, 'chat'));
  app.post('/v1/completions', generationHandler(deps, 'completions'));
  app.get('/v1/models', models(deps));
  app.get('/healthz', healthz);
  app.get('/readyz', readyz(deps));
  app.get('/metrics', metrics(deps));
  app.use('/admin/*', adminAuth({ tokenSha256: () => deps.config().admin.token_sha256 }));
  app.get('/admin/state', adminState(deps));
  app.get('/admin/capacity', adminCapacity(deps));

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

  const direct = new Map<string, (node: NodeExchange) => Promise<Response>>([
    [ENDPOINT_PATHS.chat, nodeGenerationHandler(deps, 'chat')],
    [ENDPOINT_PATHS.completions, nodeGenerationHandler(deps, 'completions')],
  ]);
  const honoFetch = app.fetch;
  app.fetch = (request, env, executionCtx) => {
    const node = env as Partial<NodeExchange> | undefined;
    const incoming = node?.incoming;
    if (incoming?.method === 'POST' && node?.outgoing) {
      const handler = direct.get(incoming.url ?? '');
      if (handler) return handler({ incoming, outgoing: node.outgoing });
    }
    return honoFetch(request, env, executionCtx);
  };
  return app;
}
