import { DROP_REASON_HEADER, isFlowControlDrop } from '@fairgate/core';
import { type ChatMessage, createSseDecoder } from '@fairgate/openai';
import { Agent, type Dispatcher, request } from 'undici';

/**
 * One real HTTP request per arrival (undici): a streaming chat completion whose client-side
 * timings are measured here: TTFT to the first content token, inter-token gaps, E2E; plus
 * status, the drop reason header and the gateway's queue time. An answer is a drop when
 * core's outcome table says its code is a flow-control drop; any other failure is an error.
 */
export type Outcome = 'ok' | 'dropped' | 'error' | 'aborted' | 'overflow';

export interface RequestRecord {
  tenant: number;
  seq: number;
  /** Index of the target (gateway replica) it was sent to. */
  target: number;
  /** Seconds from the run's start: scheduled, sent, ended. */
  scheduledS: number;
  startS: number;
  endS: number;
  status: number;
  outcome: Outcome;
  dropReason?: string;
  ttftMs?: number;
  e2eMs: number;
  /** Mean gap between content tokens after the first. */
  itlMs?: number;
  promptTokens: number;
  /** The answer's usage.prompt_tokens (the pod's count of the input), when it came. */
  inputTokens?: number;
  /** Content tokens received (the usage chunk's completion_tokens when it came). */
  outputTokens: number;
  maxTokens: number;
  /** x-fairgate-queue-ms. */
  queueMs?: number;
  error?: string;
}

export interface RequestPlan {
  tenant: number;
  seq: number;
  target: number;
  url: string;
  apiKey: string;
  model: string;
  sloClass?: string;
  sloTtftMs?: number;
  stream: boolean;
  promptTokens: number;
  outputTokens: number;
  scheduledS: number;
  /**
   * The run's label, part of the default prompt: runs one after the other on the same pods
   * (--baseline, compare:) share no prompt prefix, so none finds the other's in the cache.
   */
  run?: string;
  /** The chat messages to send (a conversation); default one unique user message. */
  messages?: ChatMessage[];
}

/** Chat template overhead of one user message in the shared token estimate (characters). */
const TEMPLATE_CHARS = '<|user|>\n\n<|assistant|>\n'.length;
const FILLER = 'the quick brown fox jumps over a lazy dog while fair queues keep tails short ';

/** A prompt the shared estimate counts as `tokens` tokens (unique prefix: no cache hits). */
export function promptText(tokens: number, unique: string): string {
  const chars = Math.max(1, tokens * 4 - TEMPLATE_CHARS);
  let text = `${unique} `;
  while (text.length < chars) text += FILLER;
  return text.slice(0, chars);
}

export function createAgent(connections: number): Agent {
  return new Agent({
    connections,
    pipelining: 1,
    keepAliveTimeout: 10_000,
    connect: { timeout: 5_000 },
  });
}

function header(headers: Dispatcher.ResponseData['headers'], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** Sends one request and measures it. Never throws: failures become records. */
export async function sendRequest(
  plan: RequestPlan,
  options: {
    dispatcher: Dispatcher;
    signal: AbortSignal;
    timeoutMs: number;
    clock: () => number;
    /** Called when the status line arrives (live counters), with the drop reason if any. */
    onStatus?: (status: number, dropReason: string | undefined) => void;
  },
): Promise<RequestRecord> {
  const { clock } = options;
  const startMs = clock();
  const record = newRecord(plan, startMs);
  const headers = requestHeaders(plan);
  const body = requestBody(plan);
  const signal = AbortSignal.any([options.signal, AbortSignal.timeout(options.timeoutMs)]);
  try {
    const response = await request(`${plan.url}/v1/chat/completions`, {
      method: 'POST',
      headers,
      body,
      dispatcher: options.dispatcher,
      signal,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
    });
    record.status = response.statusCode;
    options.onStatus?.(response.statusCode, header(response.headers, DROP_REASON_HEADER));
    const queueMs = header(response.headers, 'x-fairgate-queue-ms');
    if (queueMs !== undefined && queueMs !== '') record.queueMs = Number(queueMs);
    if (response.statusCode !== 200) {
      recordRefusal(record, response, await response.body.text());
    } else if (!plan.stream) {
      const json = (await response.body.json()) as { usage?: Usage | null };
      record.ttftMs = clock() - startMs;
      record.outputTokens = json.usage?.completion_tokens ?? 0;
      if (json.usage?.prompt_tokens !== undefined) record.inputTokens = json.usage.prompt_tokens;
      record.outcome = 'ok';
    } else {
      const tally = new StreamTally(record, clock, startMs);
      const decoder = createSseDecoder((event) => tally.onEvent(event.data));
      for await (const piece of response.body) decoder.feed(piece as Buffer);
      decoder.end();
      tally.finish();
    }
  } catch (error) {
    if (options.signal.aborted) record.outcome = 'aborted';
    else {
      record.outcome = 'error';
      record.error = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    }
  }
  const endMs = clock();
  record.endS = endMs / 1_000;
  record.e2eMs = endMs - startMs;
  return record;
}

/** The record of a request sent at `startMs`, an error until its answer says otherwise. */
function newRecord(plan: RequestPlan, startMs: number): RequestRecord {
  return {
    tenant: plan.tenant,
    seq: plan.seq,
    target: plan.target,
    scheduledS: plan.scheduledS,
    startS: startMs / 1_000,
    endS: startMs / 1_000,
    status: 0,
    outcome: 'error',
    e2eMs: 0,
    promptTokens: plan.promptTokens,
    outputTokens: 0,
    maxTokens: plan.outputTokens,
  };
}

function requestHeaders(plan: RequestPlan): Record<string, string> {
  const headers: Record<string, string> = {
    authorization: `Bearer ${plan.apiKey}`,
    'content-type': 'application/json',
  };
  if (plan.sloClass) headers['x-slo-class'] = plan.sloClass;
  if (plan.sloTtftMs !== undefined) headers['x-slo-ttft-ms'] = String(plan.sloTtftMs);
  return headers;
}

function requestBody(plan: RequestPlan): string {
  return JSON.stringify({
    model: plan.model,
    messages: plan.messages ?? [
      {
        role: 'user',
        content: promptText(
          plan.promptTokens,
          `t${plan.tenant}-${plan.seq}${plan.run ? ` ${plan.run}` : ''}`,
        ),
      },
    ],
    max_tokens: plan.outputTokens,
    stream: plan.stream,
    ...(plan.stream ? { stream_options: { include_usage: true } } : {}),
  });
}

/** A status other than 200: a 429 is a drop (with its reason), anything else an error. */
function recordRefusal(
  record: RequestRecord,
  response: Dispatcher.ResponseData,
  text: string,
): void {
  const dropReason = header(response.headers, DROP_REASON_HEADER);
  if (isFlowControlDrop(dropReason)) {
    record.outcome = 'dropped';
    record.dropReason = dropReason;
  } else {
    record.outcome = 'error';
    record.error = `HTTP ${response.statusCode}: ${text.slice(0, 200)}`;
  }
}

interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
}

interface StreamChunk {
  choices?: Array<{ delta?: { content?: string | null }; text?: string }>;
  usage?: Usage | null;
  error?: { message?: string; type?: string; code?: string | null };
}

/**
 * A streamed completion's SSE events as they arrive: TTFT at the first content token, the
 * gaps after it, the usage chunk's token count, an error or a drop sent mid-stream, [DONE].
 */
class StreamTally {
  private last = 0;
  private gaps = 0;
  private gapSum = 0;
  private tokens = 0;
  private usageTokens: number | undefined;
  private usageInput: number | undefined;
  private streamError: string | undefined;
  private streamDrop: string | undefined;
  private done = false;

  constructor(
    private readonly record: RequestRecord,
    private readonly clock: () => number,
    private readonly startMs: number,
  ) {}

  onEvent(data: string): void {
    if (data === '[DONE]') {
      this.done = true;
      return;
    }
    let chunk: StreamChunk;
    try {
      chunk = JSON.parse(data);
    } catch {
      return;
    }
    if (chunk.error) {
      this.streamError = chunk.error.message ?? 'stream error';
      // Flow control taking the slot back mid-stream (in-flight eviction) is a drop.
      const code = chunk.error.code;
      if (code && isFlowControlDrop(code)) this.streamDrop = code;
      return;
    }
    const choice = chunk.choices?.[0];
    const text = choice?.delta?.content ?? choice?.text ?? '';
    if (text) {
      const now = this.clock();
      if (this.tokens === 0) this.record.ttftMs = now - this.startMs;
      else {
        this.gapSum += now - this.last;
        this.gaps++;
      }
      this.last = now;
      this.tokens++;
    }
    if (chunk.usage?.completion_tokens !== undefined)
      this.usageTokens = chunk.usage.completion_tokens;
    if (chunk.usage?.prompt_tokens !== undefined) this.usageInput = chunk.usage.prompt_tokens;
  }

  /** The record's tokens, ITL and outcome once the stream has ended. */
  finish(): void {
    const record = this.record;
    record.outputTokens = this.usageTokens ?? this.tokens;
    if (this.usageInput !== undefined) record.inputTokens = this.usageInput;
    if (this.gaps > 0) record.itlMs = this.gapSum / this.gaps;
    if (this.streamDrop) {
      record.outcome = 'dropped';
      record.dropReason = this.streamDrop;
    } else if (this.streamError) {
      record.outcome = 'error';
      record.error = this.streamError;
    } else if (!this.done) {
      record.outcome = 'error';
      record.error = 'stream ended without [DONE]';
    } else record.outcome = 'ok';
  }
}
