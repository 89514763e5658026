import type { TenantConfig } from '@fairgate/config';
import { isValidName } from '@fairgate/core';
import {
  type ApiEndpoint,
  ENDPOINTS,
  parseApiRequest,
  parseJsonBody,
  promptBlockKeys,
  type StreamDialect,
} from '@fairgate/openai';
import { ClientLink } from '@fairgate/runtime';
import { Attr, type RequestSeries } from '@fairgate/telemetry';
import type { Context as OtelContext, Span } from '@opentelemetry/api';
import { BATCH_ID_HEADER, BATCH_TENANT_HEADER } from '../batch/credential.js';
import { type NodeExchange, nodeHeader, readBodyText } from '../body.js';
import { type Classification, classify, SLO_CLASS_HEADER, SLO_TTFT_HEADER } from '../classify.js';
import { DEFAULT_MAX_TOKENS, type GatewayDeps, type RequestState } from '../context.js';
import { modelNotFound, unauthorized } from '../errors.js';
import type { PoolRuntime } from '../pool-runtime.js';
import { authenticateTenant } from '../tenants.js';
import { isAdapterEntry } from '../upstream/pod-models.js';
import { formFields, type SpooledUpload, spoolUpload, withFields } from './upload.js';

/**
 * Stage 1 of the request path (request/pipeline.ts): who is asking, for what, at which
 * class, on which pool. Authenticates the API key, reads the body within
 * `limits.max_body_bytes`, validates it (JSON, then the endpoint's zod schema), picks the
 * pool serving its model (404 model_not_found for a model no pool serves or the tenant may
 * not use) and classifies it (SLO class, deadline, token and KV estimates). Throws the
 * OpenAI-shaped 401/400/404/413; changes nothing.
 */
export interface Call extends Arrival {
  /** Whether the client is still there (one 'close' listener on the response). */
  readonly client: ClientLink;
  readonly tenant: TenantConfig;
  /** The pool serving the request's model (its scheduler, broker, pods and control plane). */
  readonly pool: PoolRuntime;
  /**
   * What forwarding needs of the validated request; the parsed body is not kept (a
   * waiting request holds only this and the text).
   */
  readonly forwarding: Forwarding;
  /**
   * Index keys of the prompt's first blocks, when the pool routes by prefix
   * (`routing.prefix: on`; docs/routing.md): the scheduler picks the pod with them.
   */
  readonly prefix: readonly string[] | undefined;
  /**
   * The LoRA adapter the request asks for: its model is one a pod lists as an adapter (with
   * a `parent`), or one `routing.lora_paths` names (docs/routing.md, *LoRA adapters*).
   */
  readonly adapter: string | undefined;
  /**
   * The batch this request is a line of (a Batch API worker's call: batch/line-runner.ts);
   * it is checked at the grant, so no line of a cancelled batch goes to a pod.
   */
  readonly batch: string | undefined;
  /** The body as the client sent it (forwarded as is when nothing in it changes). */
  readonly body: string;
  /** An upload endpoint's body, in a file: sent to the pod from there (request/upload.ts). */
  readonly upload: SpooledUpload | undefined;
  readonly cls: Classification;
  /** The metric series of this request's tenant and class (labels bound once). */
  readonly series: RequestSeries;
  /** Date.now() when it was classified (deadlines are relative to it). */
  readonly nowMs: number;
}

export interface Forwarding {
  /** The model's own name (a requested alias resolved). */
  readonly model: string;
  readonly stream: boolean;
  /** How the pod frames the stream: chat chunks and `[DONE]`, or Responses events. */
  readonly dialect: StreamDialect;
  /** The client's `stream_options.include_usage`. */
  readonly clientWantsUsage: boolean;
  /**
   * The client's `stream_options.continuous_usage_stats`, with include_usage (as vLLM reads
   * it): the client sees the usage so far on every chunk.
   */
  readonly clientWantsContinuousUsage: boolean;
  /** Whether the body has a `stream_options` member (a stream's is then rebuilt). */
  readonly hasStreamOptions: boolean;
}

/** The request as it arrived: endpoint, Node exchange, t1 and the SERVER span. */
export interface Arrival {
  readonly endpoint: ApiEndpoint;
  /** The path forwarded to the pod. */
  readonly route: string;
  readonly state: RequestState;
  readonly node: NodeExchange;
  /** The SERVER span and its context (parent of the queue and upstream spans). */
  readonly span: Span;
  readonly ctx: OtelContext;
}

export async function receive(deps: GatewayDeps, arrival: Arrival): Promise<Call> {
  const { node, span } = arrival;
  const config = deps.config();
  const client = ClientLink.ofResponse(node.outgoing);
  const onBehalfOf = nodeHeader(node.incoming, BATCH_TENANT_HEADER);
  const tenant = await authenticate(deps, node, onBehalfOf);
  span.setAttribute(Attr.tenant, tenant.id);
  const spec = ENDPOINTS[arrival.endpoint];
  // An upload is written to a file as it comes (its fields parsed on the way); any other
  // body is JSON, read whole.
  const upload =
    spec.kind === 'upload'
      ? await spoolUpload(node.incoming, node.outgoing, config.limits.max_upload_bytes)
      : undefined;
  const body = upload ? '' : await readBodyText(node.incoming, config.limits.max_body_bytes);
  const request = parseApiRequest(spec, upload ? formFields(upload.form) : parseJsonBody(body));
  // Streams, stream options, prefix keys: a generation's only (a Responses request's as the
  // chat request it amounts to).
  const generation = spec.asGeneration?.(request);
  const chatDialect = spec.dialect === 'chat';
  const route = deps.pools.route(request.model, tenant);
  if (!route) throw modelNotFound(request.model);
  const pool = route.pool.config();
  const nowMs = Date.now();
  const cls = classify({
    tenant,
    sloClasses: config.slo_classes,
    sloTargetsMs: pool.scheduler.slo_targets_ms,
    spec,
    request,
    classHeader: nodeHeader(node.incoming, SLO_CLASS_HEADER),
    ttftHeader: nodeHeader(node.incoming, SLO_TTFT_HEADER),
    nowMs,
    blockSize: pool.scheduler.kv_block_size,
    defaultMaxTokens: DEFAULT_MAX_TOKENS,
  });
  span.setAttributes({
    [Attr.pool]: route.pool.name,
    [Attr.sloClass]: cls.sloClass,
    [Attr.requestModel]: request.model,
    [Attr.operationName]: spec.operation,
  });
  const stream = spec.streams(request);
  const usageAsked = stream ? spec.streamUsage?.(request) : undefined;
  // Every member listed (no spread of `arrival`): one object shape, built without a copy loop.
  return {
    endpoint: arrival.endpoint,
    route: arrival.route,
    state: arrival.state,
    node,
    span,
    ctx: arrival.ctx,
    client,
    tenant,
    pool: route.pool,
    forwarding: {
      model: route.model,
      stream,
      dialect: spec.dialect ?? 'chat',
      clientWantsUsage: usageAsked?.include === true,
      clientWantsContinuousUsage: usageAsked?.include === true && usageAsked.continuous,
      hasStreamOptions: chatDialect && generation?.stream_options !== undefined,
    },
    prefix:
      generation && pool.routing.prefix === 'on'
        ? promptBlockKeys(generation, pool.scheduler.kv_block_size, pool.routing.max_blocks)
        : undefined,
    adapter: adapterOf(route.pool, pool.routing.lora_paths, route.model),
    // A requested alias goes to the pod as the model's own name.
    body:
      upload || route.model === request.model
        ? body
        : JSON.stringify({ ...request, model: route.model }),
    upload:
      upload &&
      uploadAsSent(upload, route.model !== request.model ? route.model : null, usageAsked),
    batch: onBehalfOf === undefined ? undefined : nodeHeader(node.incoming, BATCH_ID_HEADER),
    cls,
    series: route.pool.metrics.series(tenant.id, cls.sloClass),
    nowMs,
  };
}

function adapterOf(
  pool: PoolRuntime,
  paths: Readonly<Record<string, string>>,
  model: string,
): string | undefined {
  // A name the scheduler takes as an adapter (EnqueueRequest.adapter).
  if (!isValidName(model)) return undefined;
  const entry = pool.models.get(model);
  if (entry ? isAdapterEntry(entry) : Object.hasOwn(paths, model)) return model;
  return undefined;
}

/**
 * The tenant of an API key; or, for a Batch API line a worker of this replica submits,
 * the tenant it names with the replica's batch credential (batch/credential.ts).
 */
function authenticate(
  deps: GatewayDeps,
  node: NodeExchange,
  onBehalfOf: string | undefined,
): TenantConfig | Promise<TenantConfig> {
  const authorization = nodeHeader(node.incoming, 'authorization');
  if (onBehalfOf !== undefined) {
    if (!deps.batches) throw unauthorized(`${BATCH_TENANT_HEADER} is for batch lines only`);
    return deps.batches.credential.tenantOf(deps.tenants(), onBehalfOf, authorization);
  }
  return authenticateTenant(deps, authorization);
}

/**
 * An upload as the pod gets it: an alias in its `model` field as the model's own name, and a
 * stream's usage asked for in every chunk, as chat's `stream_options` are forced (the gateway
 * meters it, a stream the client abandons too; the client sees what it asked for).
 */
function uploadAsSent(
  upload: SpooledUpload,
  model: string | null,
  usageAsked: { include: boolean; continuous: boolean } | undefined,
): SpooledUpload {
  const fields: Record<string, string> = {};
  if (model !== null) fields.model = model;
  if (usageAsked && !usageAsked.include) fields.stream_include_usage = 'true';
  if (usageAsked && !usageAsked.continuous) fields.stream_continuous_usage_stats = 'true';
  return Object.keys(fields).length === 0 ? upload : withFields(upload, fields);
}
