import { z } from 'zod';

/**
 * Request schemas for the two generation endpoints, covering the fields vLLM's
 * OpenAI-compatible server accepts and the gateway reads. Objects are *loose*:
 * fields not listed here (vLLM extras such as top_k, min_p, repetition_penalty,
 * guided_json, ...) are kept verbatim in the parsed value so a proxy can forward
 * them untouched. Only the types of known fields are checked.
 */

const stop = z.union([z.string(), z.array(z.string())]).nullish();

export const streamOptionsSchema = z.looseObject({
  include_usage: z.boolean().nullish(),
  continuous_usage_stats: z.boolean().nullish(),
});

/** Sampling fields common to both endpoints (OpenAI names plus vLLM's frequent extras). */
const samplingFields = {
  model: z.string().min(1, 'model must be a non-empty string'),
  stream: z.boolean().nullish(),
  stream_options: streamOptionsSchema.nullish(),
  max_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  n: z.number().int().positive().nullish(),
  seed: z.number().int().nullish(),
  stop,
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: z.record(z.string(), z.number()).nullish(),
  user: z.string().nullish(),
  // vLLM sampling extras: typed when present, forwarded as given.
  top_k: z.number().int().nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  repetition_penalty: z.number().gt(0).nullish(),
  min_tokens: z.number().int().min(0).nullish(),
  ignore_eos: z.boolean().nullish(),
  priority: z.number().int().nullish(),
};

const textPartSchema = z.looseObject({ type: z.literal('text'), text: z.string() });
const otherPartSchema = z.looseObject({ type: z.string() });
export const contentPartSchema = z.union([textPartSchema, otherPartSchema]);

export const chatMessageSchema = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: z.union([z.string(), z.array(contentPartSchema)]).nullish(),
  name: z.string().nullish(),
  tool_call_id: z.string().nullish(),
  tool_calls: z.array(z.looseObject({})).nullish(),
});

export const chatCompletionRequestSchema = z.looseObject({
  ...samplingFields,
  messages: z.array(chatMessageSchema).min(1, 'messages must contain at least one message'),
  max_completion_tokens: z.number().int().positive().nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).nullish(),
  response_format: z.looseObject({ type: z.string() }).nullish(),
  tools: z.array(z.looseObject({ type: z.string() })).nullish(),
  tool_choice: z.union([z.string(), z.looseObject({})]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
});

/** A prompt is text, a batch of texts, token ids, or a batch of token-id lists. */
export const promptSchema = z.union([
  z.string(),
  z.array(z.string()).min(1),
  z.array(z.number().int()).min(1),
  z.array(z.array(z.number().int()).min(1)).min(1),
]);

export const completionRequestSchema = z.looseObject({
  ...samplingFields,
  prompt: promptSchema,
  echo: z.boolean().nullish(),
  suffix: z.string().nullish(),
  logprobs: z.number().int().min(0).nullish(),
  best_of: z.number().int().positive().nullish(),
});

export type ChatMessage = z.infer<typeof chatMessageSchema>;
export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;
export type CompletionRequest = z.infer<typeof completionRequestSchema>;
export type GenerationRequest = ChatCompletionRequest | CompletionRequest;

export type Endpoint = 'chat' | 'completions';

export const ENDPOINT_PATHS: Record<Endpoint, string> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
};

/** OpenAI's (and vLLM's) default when a completions request names no max_tokens. */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16;

export function isChatRequest(request: GenerationRequest): request is ChatCompletionRequest {
  return Array.isArray((request as ChatCompletionRequest).messages);
}

/**
 * The output-token limit a request asks for, or undefined when it names none
 * (a chat request is then bounded only by the model's context length).
 */
export function requestedMaxTokens(request: GenerationRequest): number | undefined {
  if (isChatRequest(request)) {
    return request.max_completion_tokens ?? request.max_tokens ?? undefined;
  }
  return request.max_tokens ?? DEFAULT_COMPLETION_MAX_TOKENS;
}
