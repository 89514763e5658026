import type { z } from 'zod';
import type { ApiRequest, EndpointSpec } from './endpoints.js';
import { OpenAIHttpError } from './errors.js';
import {
  type ChatCompletionRequest,
  type CompletionRequest,
  chatCompletionRequestSchema,
  completionRequestSchema,
  type Endpoint,
} from './requests.js';

/** Dotted path of a zod issue, e.g. `messages.0.role`; null at the top level. */
function issuePath(issue: z.core.$ZodIssue): string | null {
  return issue.path.length === 0 ? null : issue.path.map(String).join('.');
}

/** Turns the first zod issue into a 400 naming the offending field. */
export function invalidRequest(error: z.ZodError): OpenAIHttpError {
  const issue = error.issues[0];
  const param = issue ? issuePath(issue) : null;
  const detail = issue ? issue.message : 'invalid request body';
  return new OpenAIHttpError({
    status: 400,
    type: 'invalid_request_error',
    message: param ? `Invalid value for '${param}': ${detail}` : `Invalid request body: ${detail}`,
    param,
    code: 'invalid_value',
  });
}

export function parseChatCompletionRequest(body: unknown): ChatCompletionRequest {
  const result = chatCompletionRequestSchema.safeParse(body);
  if (!result.success) throw invalidRequest(result.error);
  return result.data;
}

export function parseCompletionRequest(body: unknown): CompletionRequest {
  const result = completionRequestSchema.safeParse(body);
  if (!result.success) throw invalidRequest(result.error);
  return result.data;
}

export function parseGenerationRequest(
  endpoint: Endpoint,
  body: unknown,
): ChatCompletionRequest | CompletionRequest {
  return endpoint === 'chat' ? parseChatCompletionRequest(body) : parseCompletionRequest(body);
}

/** Validates a request body against its endpoint's schema (a 400 naming the field). */
export function parseApiRequest(spec: EndpointSpec, body: unknown): ApiRequest {
  const result = spec.schema.safeParse(body);
  if (!result.success) throw invalidRequest(result.error);
  return result.data;
}

/** Parses JSON text, failing with a 400 in the OpenAI shape. */
export function parseJsonBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (cause) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    throw new OpenAIHttpError({
      status: 400,
      type: 'invalid_request_error',
      message: `Request body is not valid JSON: ${reason}`,
      code: 'invalid_json',
    });
  }
}
