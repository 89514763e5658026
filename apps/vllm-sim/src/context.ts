import { OpenAIHttpError } from '@fairgate/openai';
import { ClientLink } from '@fairgate/runtime';
import type { HttpBindings } from '@hono/node-server';
import type { Context, Hono } from 'hono';
import { adapterOf, type LoraAdapters } from './adapters.js';
import type { SimConfig } from './config.js';
import type { EngineDriver } from './driver.js';
import { QueueFullError, type SequenceSpec, type SequenceView } from './engine.js';
import { runToCompletion } from './engine-jobs.js';
import type { Vocabulary } from './vocab.js';

/** What the endpoint modules share: the config, the engine's driver, adapters, vocabulary. */
export interface EndpointDeps {
  readonly config: SimConfig;
  readonly driver: EngineDriver;
  readonly adapters: LoraAdapters | null;
  readonly vocabulary: Vocabulary;
}

export type SimApp = Hono<{ Bindings: HttpBindings }>;
export type SimContext = Context<{ Bindings: HttpBindings }>;

/** The request's LoRA adapter (null for the base model); 404 for a model not served. */
export function modelOf(deps: EndpointDeps, model: string | null | undefined): string | null {
  return adapterOf(model, deps.config.model, deps.adapters);
}

/** How the client is watched: its socket under node, the request's signal otherwise. */
export function clientOf(c: SimContext): ClientLink {
  const outgoing = (c.env as Partial<HttpBindings> | undefined)?.outgoing;
  return outgoing ? ClientLink.ofResponse(outgoing) : ClientLink.ofSignal(c.req.raw.signal);
}

/** runToCompletion with a full queue answered 429, as for chat. */
export async function runSequences(
  deps: EndpointDeps,
  specs: readonly SequenceSpec[],
  client: ClientLink,
): Promise<SequenceView[] | null> {
  try {
    return await runToCompletion(deps.driver, specs, client);
  } catch (error) {
    if (error instanceof QueueFullError) throw overloaded(error);
    throw error;
  }
}

/** The answer to a client that left: nobody reads it. */
export const CLIENT_GONE = (): Response => new Response(null, { status: 499 });

/** vLLM's answer when its waiting queue is full: 429, retry after a second. */
export function overloaded(error: QueueFullError): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 429,
    type: 'rate_limit_error',
    message: `The server is overloaded: ${error.message}. Retry later.`,
    code: 'queue_full',
    headers: { 'retry-after': '1' },
  });
}

/** vLLM's request ids: a prefix and a uuid4 in hex. */
export function requestId(prefix: string): string {
  return `${prefix}${crypto.randomUUID().replaceAll('-', '')}`;
}

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);
