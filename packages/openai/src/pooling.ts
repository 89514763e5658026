import { z } from 'zod';
import { chatMessageSchema, promptSchema } from './requests.js';
import { estimateTextTokens } from './tokens.js';

/**
 * Request schemas of vLLM's prefill-only endpoints (embeddings, rerank, score, pooling) and
 * of its tokenizer endpoints. Loose, as the generation schemas: fields not listed are
 * forwarded as given; only the types of those the gateway reads are checked.
 */

const model = z.string().min(1, 'model must be a non-empty string');

/** Text to embed or pool: a prompt (text, texts, ids, id lists), or chat messages. */
const pooledInput = {
  input: promptSchema.optional(),
  messages: z.array(chatMessageSchema).min(1).optional(),
};

const inputOrMessages = (request: { input?: unknown; messages?: unknown }) =>
  request.input !== undefined || request.messages !== undefined;
const INPUT_REQUIRED = { message: 'input (or messages) is required', path: ['input'] };

export const embeddingRequestSchema = z
  .looseObject({
    model,
    ...pooledInput,
    encoding_format: z.enum(['float', 'base64']).nullish(),
    dimensions: z.number().int().positive().nullish(),
    user: z.string().nullish(),
  })
  .refine(inputOrMessages, INPUT_REQUIRED);

export const poolingRequestSchema = z
  .looseObject({ model, ...pooledInput })
  .refine(inputOrMessages, INPUT_REQUIRED);

/** A document to rank: text, or an object carrying it (vLLM takes multimodal parts too). */
const documentSchema = z.union([z.string(), z.looseObject({})]);

export const rerankRequestSchema = z.looseObject({
  model,
  query: z.union([z.string(), z.looseObject({})]),
  documents: z.array(documentSchema).min(1, 'documents must contain at least one document'),
  top_n: z.number().int().min(0).nullish(),
  return_documents: z.boolean().nullish(),
});

const scoreSide = z.union([z.string(), z.array(documentSchema).min(1), z.looseObject({})]);

export const scoreRequestSchema = z.looseObject({ model, text_1: scoreSide, text_2: scoreSide });

export const tokenizeRequestSchema = z
  .looseObject({
    model,
    prompt: z.string().optional(),
    messages: z.array(chatMessageSchema).min(1).optional(),
    add_special_tokens: z.boolean().nullish(),
    return_token_strs: z.boolean().nullish(),
  })
  .refine((r) => r.prompt !== undefined || r.messages !== undefined, {
    message: 'prompt (or messages) is required',
    path: ['prompt'],
  });

export const detokenizeRequestSchema = z.looseObject({
  model,
  tokens: z.array(z.number().int()),
});

/**
 * Estimated tokens of everything a prefill-only request hands the model: each text by the
 * one estimate (`estimateTextTokens`), each token id as one, objects by their values
 * (a document `{text: ...}`, a chat message's content). Counts the request's input fields
 * only, never `model` or options.
 */
export function estimateInputTokens(value: unknown): number {
  if (typeof value === 'string') return estimateTextTokens(value);
  if (typeof value === 'number') return 1;
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + estimateInputTokens(v), 0);
  if (typeof value === 'object' && value !== null) {
    let n = 0;
    for (const v of Object.values(value)) n += estimateInputTokens(v);
    return n;
  }
  return 0;
}

/**
 * An audio upload's form (`/v1/audio/transcriptions`, `/translations`): its text fields and
 * its `file` part as its name and size (the bytes go to the pod as they were sent).
 */
export const audioRequestSchema = z.looseObject({
  model,
  file: z.object(
    { filename: z.string(), bytes: z.number().int().min(0) },
    {
      error: 'file is required (a multipart file part)',
    },
  ),
  language: z.string().optional(),
  prompt: z.string().optional(),
  response_format: z.string().optional(),
  temperature: z.string().optional(),
  stream: z.string().optional(),
  stream_include_usage: z.string().optional(),
  stream_continuous_usage_stats: z.string().optional(),
});
