import { z } from 'zod';
import type { ChatCompletionRequest, ChatMessage } from './requests.js';
import type { Usage } from './responses.js';

/**
 * The Responses API request (`POST /v1/responses`, as vLLM serves it): `input` is a string
 * (one user message) or message items, `instructions` a system message before them. Loose:
 * every other field is forwarded as given.
 */
const inputItemSchema = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant']),
  content: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]),
});

export const responsesRequestSchema = z.looseObject({
  model: z.string().min(1, 'model must be a non-empty string'),
  input: z.union([z.string(), z.array(inputItemSchema).min(1, 'input must not be empty')]),
  instructions: z.string().nullish(),
  max_output_tokens: z.number().int().positive().nullish(),
  stream: z.boolean().nullish(),
});

export type ResponsesRequest = z.infer<typeof responsesRequestSchema>;

/** An input item's content as chat content: input_text and output_text parts as text. */
function chatContent(content: unknown) {
  if (!Array.isArray(content)) return content as string;
  return (content as Array<{ type: string; text?: unknown }>).map((part) =>
    (part.type === 'input_text' || part.type === 'output_text') && typeof part.text === 'string'
      ? { type: 'text' as const, text: part.text }
      : part,
  );
}

/**
 * The chat request a Responses request amounts to (the prompt the pod renders, its output
 * limit, whether it streams): what the gateway estimates and routes it by. vLLM renders it
 * with the chat template the same way (instructions first, as a system message).
 */
export function responsesAsChat(request: ResponsesRequest): ChatCompletionRequest {
  const input: ChatMessage[] =
    typeof request.input === 'string'
      ? [{ role: 'user', content: request.input }]
      : request.input.map(
          (item) => ({ role: item.role, content: chatContent(item.content) }) as ChatMessage,
        );
  const messages: ChatMessage[] = [
    ...(typeof request.instructions === 'string'
      ? [{ role: 'system' as const, content: request.instructions }]
      : []),
    ...input,
  ];
  return {
    model: request.model,
    messages,
    ...(request.max_output_tokens ? { max_tokens: request.max_output_tokens } : {}),
    ...(request.stream ? { stream: true } : {}),
  } as ChatCompletionRequest;
}

/**
 * A Responses API usage (`input_tokens`, `output_tokens`, `input_tokens_details.cached_tokens`)
 * in the chat shape the gateway meters; undefined when it is not one.
 */
export function usageOfResponse(usage: unknown): Usage | undefined {
  if (typeof usage !== 'object' || usage === null) return undefined;
  const u = usage as {
    input_tokens?: unknown;
    output_tokens?: unknown;
    input_tokens_details?: { cached_tokens?: unknown } | null;
  };
  if (typeof u.input_tokens !== 'number' || typeof u.output_tokens !== 'number') return undefined;
  const cached = u.input_tokens_details?.cached_tokens;
  return {
    prompt_tokens: u.input_tokens,
    completion_tokens: u.output_tokens,
    total_tokens: u.input_tokens + u.output_tokens,
    ...(typeof cached === 'number' ? { prompt_tokens_details: { cached_tokens: cached } } : {}),
  };
}
