import {
  type Endpoint,
  errorBody,
  OpenAIHttpError,
  parseGenerationRequest,
  parseJsonBody,
} from '@fairgate/openai';
import { ClientLink } from '@fairgate/runtime';
import type { HttpBindings } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { type Context, Hono } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { RequestActivity } from './activity.js';
import { adapterOf, LoraAdapters, modelPermission, VllmError } from './adapters.js';
import { addAudioRoutes } from './audio.js';
import { readBodyText, readJson } from './body.js';
import { DEFAULT_CONFIG, type SimConfig, validateConfig } from './config.js';
import { overloaded } from './context.js';
import { EngineDriver, type TimerHost } from './driver.js';
import { SIM_ENDPOINTS } from './endpoints.js';
import { Engine, QueueFullError } from './engine.js';
import { drawFailure, failureError, stall } from './faults.js';
import { responseMeta } from './format.js';
import { planGeneration } from './generation.js';
import { SimMetrics } from './metrics.js';
import { addPoolingRoutes } from './pooling.js';
import {
  type Connection,
  completeResponse,
  type GenerationJob,
  streamResponse,
} from './respond.js';
import { addResponsesRoute } from './responses.js';
import { addTokenizeRoutes } from './tokenize.js';
import { Vocabulary } from './vocab.js';

/**
 * The sim's HTTP surface (Hono), the routes of endpoints.ts: chat and completions here, the
 * Responses API (responses.ts), pooling, score and rerank (pooling.ts), tokenize
 * (tokenize.ts), audio (audio.ts), vLLM's LoRA adapter endpoints (with --max-loras),
 * /health, /metrics and debug views. Every error leaves through one onError: in the OpenAI
 * shape (chat, completions), or in vLLM's (integer `code`) for the other endpoints and the
 * model check.
 */
export interface SimServerOptions {
  /** Clock and timers of the engine loop (tests inject fakes). */
  timerHost?: TimerHost;
  /** Where warnings go (default stderr). */
  log?: (line: string) => void;
}

export interface LastTraceContext {
  traceparent: string | null;
  tracestate: string | null;
  path: string | null;
  received_at: string | null;
}

export interface SimServer {
  readonly config: SimConfig;
  readonly app: Hono<{ Bindings: HttpBindings }>;
  readonly engine: Engine;
  readonly driver: EngineDriver;
  readonly metrics: SimMetrics;
  /** The LoRA adapters served; null when LoRA is off (--max-loras 0). */
  readonly adapters: LoraAdapters | null;
  /** Stops the engine loop and aborts every sequence. */
  close(): void;
}

export function createSimServer(
  overrides: Partial<SimConfig> = {},
  options: SimServerOptions = {},
): SimServer {
  const config = validateConfig({ ...DEFAULT_CONFIG, ...overrides });
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  // Gauges read the engine at scrape time only, after it exists.
  const simMetrics: SimMetrics = new SimMetrics(config, () => engine, log);
  const engine: Engine = new Engine(config, simMetrics);
  const adapters = config.maxLoras > 0 ? new LoraAdapters(engine, config.loraLoadMs) : null;
  for (const module of config.loraModules) adapters?.registerAtStart(module);
  const driver = new EngineDriver(engine, {
    ...(options.timerHost ? { host: options.timerHost } : {}),
    observer: simMetrics,
  });
  const sim: SimState = {
    config,
    driver,
    metrics: simMetrics,
    adapters,
    activity: new RequestActivity(),
    vocabulary: new Vocabulary(),
    requestCount: 0,
    lastTrace: { traceparent: null, tracestate: null, path: null, received_at: null },
  };
  const app = new Hono<{ Bindings: HttpBindings }>();
  handleErrors(app, log);
  countEngineRequests(app, sim.activity);
  addInfoRoutes(app, sim);
  if (adapters) addLoraRoutes(app, adapters);
  app.post('/v1/chat/completions', generationHandler('chat', sim));
  app.post('/v1/completions', generationHandler('completions', sim));
  addPoolingRoutes(app, sim);
  addTokenizeRoutes(app, sim);
  addResponsesRoute(app, sim, () => simMetrics.fault('reset'));
  addAudioRoutes(app, sim);

  return {
    config,
    app,
    engine,
    driver,
    metrics: simMetrics,
    adapters,
    close: () => driver.stop(),
  };
}

type SimApp = Hono<{ Bindings: HttpBindings }>;
type SimContext = Context<{ Bindings: HttpBindings }>;

/** What the routes share: the engine's driver and metrics, and what the debug routes show. */
interface SimState {
  readonly config: SimConfig;
  readonly driver: EngineDriver;
  readonly metrics: SimMetrics;
  readonly adapters: LoraAdapters | null;
  readonly activity: RequestActivity;
  readonly vocabulary: Vocabulary;
  /** Generation requests received: the index fault draws and plans take. */
  requestCount: number;
  lastTrace: LastTraceContext;
}

/** Every error in the OpenAI shape: OpenAIHttpError as it says, anything else a 500. */
function handleErrors(app: SimApp, log: (line: string) => void): void {
  app.onError((error, c) => {
    if (error instanceof OpenAIHttpError) {
      return c.json(error.toBody(), error.status as ContentfulStatusCode, error.headers);
    }
    if (error instanceof VllmError) {
      return c.json(error.toBody(), error.status as ContentfulStatusCode);
    }
    log(
      `fairgate-sim: internal error: ${error instanceof Error ? (error.stack ?? error.message) : error}`,
    );
    return c.json(errorBody('Internal server error.', 'server_error'), 500);
  });
  app.notFound((c) =>
    c.json(
      errorBody(`Not found: ${c.req.method} ${c.req.path}`, 'not_found_error', null, 'not_found'),
      404,
    ),
  );
}

/**
 * Every request of an engine endpoint (SIM_ENDPOINTS' `engine`), whatever its answer,
 * counts in /debug/stats and /debug/requests from its arrival to its response's end.
 */
function countEngineRequests(app: SimApp, activity: RequestActivity): void {
  for (const endpoint of SIM_ENDPOINTS) {
    if (!endpoint.engine) continue;
    for (const path of endpoint.paths) {
      app.use(path, async (c, next) => {
        if (c.req.method === 'POST') {
          activity.begin((c.env as Partial<HttpBindings> | undefined)?.outgoing);
        }
        await next();
      });
    }
  }
}

/** /health, /v1/models, /metrics and the debug endpoints. */
function addInfoRoutes(app: SimApp, sim: SimState): void {
  const { activity } = sim;
  app.get('/health', (c) => c.body(null, 200));
  app.get('/v1/models', (c) => c.json(modelList(sim)));
  app.get('/metrics', async (c) => {
    const { contentType, body } = await sim.metrics.render();
    return c.body(body, 200, { 'content-type': contentType });
  });
  app.get('/debug/last-traceparent', (c) => c.json(sim.lastTrace));
  app.get('/debug/stats', (c) => c.json(activity.stats()));
  app.get('/debug/requests', (c) =>
    c.json({ clock: 'hrtime-ns', intervals: activity.intervals() }),
  );
}

/**
 * vLLM's ModelList: the base model, then every registered adapter (id = its name, root = its
 * path, parent = the base model, max_model_len null).
 */
function modelList(sim: SimState) {
  const { config } = sim;
  // Cards are built per listing, so `created` is the time of the request (as in vLLM).
  const created = Math.floor(Date.now() / 1000);
  const card = (id: string, root: string, parent: string | null, maxModelLen: number | null) => ({
    id,
    object: 'model',
    created,
    owned_by: 'vllm',
    root,
    parent,
    max_model_len: maxModelLen,
    permission: [modelPermission(created)],
  });
  const loras = sim.adapters?.list() ?? [];
  return {
    object: 'list',
    data: [
      card(config.model, config.model, null, config.maxModelLen),
      ...loras.map((lora) => card(lora.name, lora.path, config.model, null)),
    ],
  };
}

/**
 * POST /v1/load_lora_adapter and /v1/unload_lora_adapter, as vLLM serves them with
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING: success is 200 with a plain text body and no
 * content-type (Starlette's Response of a str), an error vLLM's JSON.
 */
function addLoraRoutes(app: SimApp, adapters: LoraAdapters): void {
  const text = (c: SimContext, body: string): Response => {
    // Written to the socket directly: @hono/node-server would add a text/plain content-type.
    const outgoing = (c.env as Partial<HttpBindings> | undefined)?.outgoing;
    if (!outgoing) return new Response(new TextEncoder().encode(body), { status: 200 });
    outgoing.writeHead(200, { 'content-length': Buffer.byteLength(body) });
    outgoing.end(body);
    return RESPONSE_ALREADY_SENT;
  };
  app.post('/v1/load_lora_adapter', async (c) => text(c, await adapters.load(await readJson(c))));
  app.post('/v1/unload_lora_adapter', async (c) =>
    text(c, await adapters.unload(await readJson(c))),
  );
}

/** The handler of one generation endpoint: faults, then the plan run on the engine. */
function generationHandler(endpoint: Endpoint, sim: SimState) {
  const { config, driver, metrics: simMetrics } = sim;
  return async (c: SimContext) => {
    // The Node request and response; absent when served without a socket (app.request()).
    const node = c.env as Partial<HttpBindings> | undefined;
    const outgoing = node?.outgoing ?? null;
    const requestIndex = sim.requestCount++;
    sim.lastTrace = traceContextOf(c, node);
    const client = outgoing
      ? ClientLink.ofResponse(outgoing)
      : ClientLink.ofSignal(c.req.raw.signal);
    const bodyText = await readBodyText(c);
    if (config.stallMs > 0) {
      simMetrics.fault('stall');
      if (!(await stall(config.stallMs, client))) return new Response(null, { status: 499 }); // client left
    }
    const request = parseGenerationRequest(endpoint, parseJsonBody(bodyText));
    const lora = adapterOf(request.model, config.model, sim.adapters);
    const failure = drawFailure(config, requestIndex);
    if (failure) {
      simMetrics.fault(failure);
      throw failureError(failure);
    }
    const plan = planGeneration(endpoint, request, config, requestIndex, lora);
    const job: GenerationJob = {
      driver,
      plan,
      meta: responseMeta(endpoint, lora ?? config.model, plan.includeUsage, plan.continuousUsage),
      client,
      connection: connectionOf(c),
      outgoing,
      resetAfterTokens: config.resetAfterTokens,
      onReset: () => simMetrics.fault('reset'),
    };
    try {
      return plan.stream ? streamResponse(job) : await completeResponse(job);
    } catch (error) {
      if (error instanceof QueueFullError) throw overloaded(error);
      throw error;
    }
  };
}

/** The request's trace headers, for /debug/last-traceparent. */
function traceContextOf(c: SimContext, node: Partial<HttpBindings> | undefined): LastTraceContext {
  // Node's parsed headers when there is a socket: c.req.header() builds web Headers.
  const incomingHeaders = node?.incoming?.headers;
  const header = (name: string): string | null => {
    if (!incomingHeaders) return c.req.header(name) ?? null;
    const value = incomingHeaders[name];
    return (Array.isArray(value) ? value.join(', ') : value) ?? null;
  };
  return {
    traceparent: header('traceparent'),
    tracestate: header('tracestate'),
    path: c.req.path,
    received_at: new Date().toISOString(),
  };
}

/** The node socket behind a request, when served by @hono/node-server. */
function connectionOf(c: SimContext): Connection | null {
  const socket = (c.env as Partial<HttpBindings> | undefined)?.incoming?.socket;
  if (!socket) return null;
  return { drop: () => socket.destroySoon() };
}
