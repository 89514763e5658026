import { type ChatMessage, chatMessageSchema } from '@fairgate/openai';
import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import { VllmError, validationError } from './adapters.js';

/**
 * Request bodies of the endpoints that answer in vLLM's error shape (integer `code`): the
 * JSON object and its fields, checked as vLLM's pydantic models check them. A bad field is a
 * 400 naming it (`param` = `body.<field>`), a body that is no JSON object a 400 on `body`.
 */
export type JsonObject = Record<string, unknown>;

/**
 * The request body as text. Under @hono/node-server it is read straight from the node
 * stream: the Web-stream path costs ~1 ms per 10 KB, which would show up in measured TTFT.
 */
export async function readBodyText(c: Context<{ Bindings: HttpBindings }>): Promise<string> {
  const incoming = (c.env as Partial<HttpBindings> | undefined)?.incoming;
  if (!incoming || incoming.readableDidRead || incoming.readableEnded) return c.req.text();
  const chunks: Buffer[] = [];
  for await (const chunk of incoming) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** The body as JSON, or vLLM's 400 for a body that is not. */
export async function readJson(c: Context<{ Bindings: HttpBindings }>): Promise<unknown> {
  try {
    return JSON.parse(await readBodyText(c));
  } catch {
    throw new VllmError(
      400,
      'Bad Request',
      '1 validation error:\n  body: JSON decode error',
      'body',
    );
  }
}

export async function readJsonObject(c: Context<{ Bindings: HttpBindings }>): Promise<JsonObject> {
  const body = await readJson(c);
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw validationError('body', 'Input should be a valid dictionary or object');
  }
  return body as JsonObject;
}

/** vLLM's answer to a request it parsed but cannot serve (BadRequestError, 400). */
export function badRequest(message: string, param: string | null = null): VllmError {
  return new VllmError(400, 'BadRequestError', message, param);
}

const isInteger = (value: unknown): value is number =>
  typeof value === 'number' && Number.isInteger(value);

export const fields = {
  optionalString(body: JsonObject, key: string): string | undefined {
    const value = body[key];
    if (value === undefined || value === null) return undefined;
    if (typeof value !== 'string')
      throw validationError(`body.${key}`, 'Input should be a valid string');
    return value;
  },

  string(body: JsonObject, key: string): string {
    if (!(key in body)) throw validationError(`body.${key}`, 'Field required');
    const value = fields.optionalString(body, key);
    if (value === undefined) throw validationError(`body.${key}`, 'Input should be a valid string');
    return value;
  },

  optionalInteger(body: JsonObject, key: string): number | undefined {
    const value = body[key];
    if (value === undefined || value === null) return undefined;
    if (!isInteger(value)) throw validationError(`body.${key}`, 'Input should be a valid integer');
    return value;
  },

  optionalBoolean(body: JsonObject, key: string): boolean | undefined {
    const value = body[key];
    if (value === undefined || value === null) return undefined;
    if (typeof value !== 'boolean')
      throw validationError(`body.${key}`, 'Input should be a valid boolean');
    return value;
  },

  /** A string or a non-empty list of strings, as a list. */
  strings(body: JsonObject, key: string): string[] {
    const value = body[key];
    if (!(key in body)) throw validationError(`body.${key}`, 'Field required');
    if (typeof value === 'string') return [value];
    if (
      Array.isArray(value) &&
      value.length > 0 &&
      value.every((item) => typeof item === 'string')
    ) {
      return value as string[];
    }
    throw validationError(`body.${key}`, 'Input should be a string or a non-empty list of strings');
  },

  integerList(body: JsonObject, key: string): number[] {
    const value = body[key];
    if (!(key in body)) throw validationError(`body.${key}`, 'Field required');
    if (Array.isArray(value) && value.every(isInteger)) return value as number[];
    throw validationError(`body.${key}`, 'Input should be a valid list of integers');
  },

  /** Chat messages ({role, content}), as the chat endpoint validates them. */
  messages(body: JsonObject, key: string): ChatMessage[] {
    const value = body[key];
    if (!Array.isArray(value) || value.length === 0) {
      throw validationError(`body.${key}`, 'Input should be a non-empty list of messages');
    }
    return value.map((message, index) => {
      const parsed = chatMessageSchema.safeParse(message);
      if (!parsed.success) {
        throw validationError(`body.${key}.${index}`, 'Input should be a valid chat message');
      }
      return parsed.data;
    });
  },
};
