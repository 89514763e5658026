import { OpenAIHttpError, parseChatCompletionRequest } from '@fairgate/openai';
import { VllmError, validationError } from './adapters.js';
import { fields, type JsonObject, readJsonObject } from './body.js';
import {
  CLIENT_GONE,
  clientOf,
  type EndpointDeps,
  modelOf,
  overloaded,
  type SimApp,
} from './context.js';
import { QueueFullError, type SequenceListener, type SequenceView } from './engine.js';
import { type GenerationPlan, planGeneration } from './generation.js';
import { RESET_MESSAGE, SSE_HEADERS } from './respond.js';
import {
  type ResponseEcho,
  ResponseEvents,
  type ResponseIdentity,
  responseIdentity,
  responseObject,
  responseUsage,
} from './responses-format.js';
import { PseudoText } from './text.js';

/**
 * POST /v1/responses, vLLM's Responses API, streaming and not. The input (a string or
 * message items, `instructions` as a system message first) becomes a chat prompt planned
 * like a chat request (planGeneration: same token estimate, prefix cache, output length,
 * pseudo-text), so it runs on the engine exactly as chat does. A stream sends vLLM's events:
 * response.created and response.in_progress at once, the item and part opening with the
 * first token, one response.output_text.delta per token, then the closing events and
 * response.completed with the usage. Every event has its sequence_number.
 */
export function addResponsesRoute(app: SimApp, deps: EndpointDeps, onReset: () => void): void {
  let requestIndex = 0;
  app.post('/v1/responses', async (c) => {
    const body = await readJsonObject(c);
    const lora = modelOf(deps, fields.optionalString(body, 'model'));
    const previous = fields.optionalString(body, 'previous_response_id');
    if (previous !== undefined) {
      // The sim stores no responses.
      throw new VllmError(
        404,
        'invalid_request_error',
        `Response with id '${previous}' not found.`,
      );
    }
    const plan = planResponse(body, deps, requestIndex++, lora);
    const who = responseIdentity(lora ?? deps.config.model);
    const echo: ResponseEcho = {
      instructions: fields.optionalString(body, 'instructions') ?? null,
      metadata: (body.metadata as Record<string, unknown> | undefined) ?? null,
      temperature: optionalNumber(body, 'temperature') ?? 1,
      topP: optionalNumber(body, 'top_p') ?? 1,
      maxOutputTokens: plan.maxTokens,
      user: fields.optionalString(body, 'user') ?? null,
    };
    const job = { deps, plan, who, echo, client: clientOf(c), onReset };
    try {
      return plan.stream ? streamResponse(job) : await completeResponse(job);
    } catch (error) {
      if (error instanceof QueueFullError) throw overloaded(error);
      throw error;
    }
  });
}

interface ResponseJob {
  deps: EndpointDeps;
  plan: GenerationPlan;
  who: ResponseIdentity;
  echo: ResponseEcho;
  client: ReturnType<typeof clientOf>;
  /** Counts a stream broken by --reset-after-tokens. */
  onReset: () => void;
}

/** The request as a chat request, planned as chat; errors name the Responses fields. */
function planResponse(
  body: JsonObject,
  deps: EndpointDeps,
  requestIndex: number,
  lora: string | null,
): GenerationPlan {
  const maxOutputTokens = fields.optionalInteger(body, 'max_output_tokens');
  const stream = fields.optionalBoolean(body, 'stream') ?? false;
  const instructions = fields.optionalString(body, 'instructions');
  const messages = [
    ...(instructions === undefined ? [] : [{ role: 'system', content: instructions }]),
    ...inputMessages(body),
  ];
  try {
    const chat = parseChatCompletionRequest({
      model: deps.config.model,
      messages,
      stream,
      ...(maxOutputTokens === undefined ? {} : { max_tokens: maxOutputTokens }),
      ...(typeof body.seed === 'number' ? { seed: body.seed } : {}),
    });
    return planGeneration('chat', chat, deps.config, requestIndex, lora);
  } catch (error) {
    if (!(error instanceof OpenAIHttpError)) throw error;
    const param = error.param === 'max_tokens' ? 'max_output_tokens' : 'input';
    throw new VllmError(error.status, 'BadRequestError', error.message, param);
  }
}

/** `input`: a string (one user message) or message items with text content parts. */
function inputMessages(body: JsonObject): Array<{ role: string; content: unknown }> {
  const input = body.input;
  if (!('input' in body)) throw validationError('body.input', 'Field required');
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input) || input.length === 0) {
    throw validationError('body.input', 'Input should be a string or a non-empty list of items');
  }
  return input.map((item, index) => {
    const record = item as JsonObject;
    if (typeof item !== 'object' || item === null || typeof record.role !== 'string') {
      throw validationError(`body.input.${index}`, 'Input should be a message item with a role');
    }
    return { role: record.role, content: contentOf(record.content) };
  });
}

/** Responses content parts (input_text, output_text) as chat text parts. */
function contentOf(content: unknown): unknown {
  if (!Array.isArray(content)) return content;
  return content.map((part: JsonObject) =>
    part?.type === 'input_text' || part?.type === 'output_text'
      ? { type: 'text', text: part.text }
      : part,
  );
}

function optionalNumber(body: JsonObject, key: string): number | undefined {
  const value = body[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number')
    throw validationError(`body.${key}`, 'Input should be a valid number');
  return value;
}

function sequenceSpec(job: ResponseJob) {
  const { plan, who } = job;
  return {
    id: who.id,
    promptTokens: plan.promptTokens,
    promptBlockHashes: plan.promptBlockHashes,
    outputTokens: plan.outputTokens,
    finishReason: plan.finishReason,
    ...(plan.lora === null ? {} : { lora: plan.lora }),
  };
}

function finalResponse(job: ResponseJob, seq: SequenceView, text: string) {
  const status = seq.spec.finishReason === 'length' ? 'incomplete' : 'completed';
  const usage = responseUsage(seq.spec.promptTokens, seq.generated, seq.cachedTokens ?? 0);
  return responseObject(job.who, job.echo, status, text, usage);
}

function completeResponse(job: ResponseJob): Promise<Response> {
  const { driver } = job.deps;
  const text = new PseudoText(job.plan.textSeed);
  return new Promise((resolve) => {
    let output = '';
    const listener: SequenceListener = {
      onToken() {
        output += text.next();
      },
      onFinish(seq) {
        resolve(Response.json(finalResponse(job, seq, output)));
      },
    };
    const seq = driver.submit(sequenceSpec(job), listener);
    job.client.onLeave(() => {
      driver.abort(seq);
      resolve(CLIENT_GONE());
    });
  });
}

function streamResponse(job: ResponseJob): Response {
  const { driver } = job.deps;
  const { who, echo } = job;
  const text = new PseudoText(job.plan.textSeed);
  const events = new ResponseEvents(who);
  const encoder = new TextEncoder();
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let open = true;
  let output = '';
  const send = (frames: string) => controller.enqueue(encoder.encode(frames));

  const listener: SequenceListener = {
    onToken(seq) {
      if (!open) return;
      if (seq.generated === 1) send(events.opened());
      const delta = text.next();
      output += delta;
      send(events.delta(delta));
      if (seq.generated === job.deps.config.resetAfterTokens) {
        // --reset-after-tokens: the stream breaks here, before its closing events.
        open = false;
        driver.abort(seq);
        job.onReset();
        setImmediate(() => controller.error(new Error(RESET_MESSAGE)));
      }
    },
    onFinish(seq) {
      if (!open) return;
      send(events.closed(output, finalResponse(job, seq, output)));
      open = false;
      controller.close();
    },
  };
  let seq: SequenceView | null = null;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel() {
      open = false;
      if (seq) driver.abort(seq);
    },
  });
  seq = driver.submit(sequenceSpec(job), listener);
  const started = responseObject(who, echo, 'in_progress', null, null);
  send(events.created(started) + events.inProgress(started));
  const submitted = seq;
  job.client.onLeave(() => driver.abort(submitted));
  return new Response(body, { status: 200, headers: SSE_HEADERS });
}
