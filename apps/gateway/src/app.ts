import { OpenAIHttpError } from '@fairgate/openai';
import { Hono } from 'hono';
import type { GatewayDeps } from './context.js';
import { internalError, notFound } from './errors.js';
import { requestContext } from './middleware/request-context.js';
import { generationHandler } from './routes/generate.js';
import { adminState, healthz, metrics, models, readyz } from './routes/system.js';

/**
 * The gateway's HTTP surface (docs/architecture.md, "HTTP contract"). Every
 * error — thrown anywhere, or an unknown route — is rendered once, here, in
 * the OpenAI error shape.
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
  app.get('/admin/state', adminState(deps));

  app.notFound((c) => {
    const error = notFound(`${c.req.method} ${c.req.path}`);
    return c.json(error.toBody(), 404);
  });
  app.onError((error, c) => {
    const failure = error instanceof OpenAIHttpError ? error : internalError();
    if (!(error instanceof OpenAIHttpError)) console.error('fairgate: unhandled error', error);
    const response = c.json(failure.toBody(), failure.status as 400);
    for (const [name, value] of Object.entries(failure.headers)) response.headers.set(name, value);
    return response;
  });
  return app;
}
