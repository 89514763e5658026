import { randomUUID } from 'node:crypto';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatToolCall,
  ChatToolCallDelta,
  Completion,
  Endpoint,
  FinishReason,
  StreamChunk,
  Usage,
} from '@fairgate/openai';

/**
 * vLLM's response and chunk shapes for both endpoints. One {@link ResponseMeta} per request
 * gives every chunk the same id, created time and model, as vLLM does.
 */
export interface ResponseMeta {
  endpoint: Endpoint;
  id: string;
  created: number;
  model: string;
  /** With stream_options.include_usage every chunk carries `usage` (null until the last). */
  includeUsage: boolean;
  /**
   * With stream_options.continuous_usage_stats too: every chunk's `usage` is the usage so
   * far (the prompt and the tokens generated up to and including this chunk's) instead of
   * null.
   */
  continuousUsage: boolean;
}

export function responseMeta(
  endpoint: Endpoint,
  model: string,
  includeUsage: boolean,
  continuousUsage = false,
): ResponseMeta {
  const prefix = endpoint === 'chat' ? 'chatcmpl' : 'cmpl';
  return {
    endpoint,
    id: `${prefix}-${randomUUID().replaceAll('-', '')}`,
    created: Math.floor(Date.now() / 1000),
    model,
    includeUsage,
    continuousUsage: includeUsage && continuousUsage,
  };
}

/**
 * The usage so far a chunk carries with continuous_usage_stats, in vLLM's field order
 * (UsageInfo serialised with exclude_unset: prompt, total, completion).
 */
export interface UsageSoFar {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
}

export function usageSoFar(promptTokens: number, completionTokens: number): UsageSoFar {
  return {
    prompt_tokens: promptTokens,
    total_tokens: promptTokens + completionTokens,
    completion_tokens: completionTokens,
  };
}

/**
 * The chat stream's opening chunk: role only, empty content (sent with the first token).
 * `usage` is the usage so far (continuous_usage_stats: the prompt, no completion tokens).
 */
export function roleChunk(
  meta: ResponseMeta,
  usage: UsageSoFar | null = null,
): ChatCompletionChunk {
  return chatChunk(meta, { role: 'assistant', content: '' }, null, usage);
}

/**
 * A chat stream's chunk of one delta, with the usage so far when the client asked for it
 * (continuous_usage_stats; else `usage: null` with include_usage, none without).
 */
function chatChunk(
  meta: ResponseMeta,
  delta: ChatCompletionChunk['choices'][number]['delta'],
  finishReason: FinishReason,
  usage: UsageSoFar | null,
): ChatCompletionChunk {
  const chunk: ChatCompletionChunk = {
    id: meta.id,
    object: 'chat.completion.chunk',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  };
  if (meta.includeUsage) chunk.usage = meta.continuousUsage ? usage : null;
  return chunk;
}

/**
 * One content chunk; the last one carries the finish reason. `usage` is the usage so far,
 * this chunk's token included (continuous_usage_stats).
 */
export function textChunk(
  meta: ResponseMeta,
  text: string,
  finishReason: FinishReason,
  usage: UsageSoFar | null = null,
): StreamChunk {
  if (meta.endpoint === 'chat') return chatChunk(meta, { content: text }, finishReason, usage);
  const chunk: StreamChunk = {
    id: meta.id,
    object: 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason }],
  };
  if (meta.includeUsage) chunk.usage = meta.continuousUsage ? usage : null;
  return chunk;
}

/** A tool call's id, in vLLM's form. */
export function toolCallId(): string {
  return `chatcmpl-tool-${randomUUID().replaceAll('-', '')}`;
}

/**
 * The delta of a tool call's `generated`-th token: the first names the call with empty
 * arguments, each next one carries a fragment of the arguments.
 */
export function toolCallDelta(
  call: ChatToolCall,
  fragments: readonly string[],
  generated: number,
): ChatToolCallDelta {
  if (generated === 1) {
    return {
      index: 0,
      id: call.id,
      type: 'function',
      function: { name: call.function.name, arguments: '' },
    };
  }
  return { index: 0, function: { arguments: fragments[generated - 2] ?? '' } };
}

/** One chunk of a streamed tool call; the last one carries the finish reason. */
export function toolCallChunk(
  meta: ResponseMeta,
  delta: ChatToolCallDelta,
  finishReason: FinishReason,
  usage: UsageSoFar | null = null,
): ChatCompletionChunk {
  return chatChunk(meta, { tool_calls: [delta] }, finishReason, usage);
}

/** The usage-only chunk vLLM sends last with include_usage: `choices: []`. */
export function usageChunk(meta: ResponseMeta, usage: Usage): StreamChunk {
  const object = meta.endpoint === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  return { id: meta.id, object, created: meta.created, model: meta.model, choices: [], usage };
}

export function fullResponse(
  meta: ResponseMeta,
  text: string,
  finishReason: FinishReason,
  usage: Usage,
  toolCall: ChatToolCall | null = null,
): ChatCompletion | Completion {
  if (meta.endpoint === 'chat') {
    // vLLM's answer with a tool call: no content, the call, finish reason 'tool_calls'.
    const message: ChatCompletion['choices'][number]['message'] =
      toolCall === null
        ? { role: 'assistant', content: text }
        : { role: 'assistant', content: null, tool_calls: [toolCall] };
    return {
      id: meta.id,
      object: 'chat.completion',
      created: meta.created,
      model: meta.model,
      choices: [
        {
          index: 0,
          message,
          logprobs: null,
          finish_reason: finishReason,
        },
      ],
      usage,
    };
  }
  return {
    id: meta.id,
    object: 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason }],
    usage,
  };
}
