import { estimateTextTokens, renderChatPrompt } from '@fairgate/openai';
import { validationError } from './adapters.js';
import { badRequest, fields, type JsonObject, readJsonObject } from './body.js';
import {
  CLIENT_GONE,
  clientOf,
  type EndpointDeps,
  modelOf,
  nowSeconds,
  requestId,
  runSequences,
  type SimApp,
  type SimContext,
} from './context.js';
import { prefillSpec } from './engine-jobs.js';
import { base64Floats, embeddingOf, normalized, pairScore } from './vectors.js';

/**
 * vLLM's pooling endpoints: /v1/embeddings, /pooling, /score (/v1/score) and /rerank
 * (/v1/rerank, /v2/rerank). Every input (or pair) is one prefill-only sequence on the engine,
 * so it costs alpha + (beta + gamma) * its tokens when alone, queues and batches with chat
 * traffic and counts in the metrics. Vectors and scores come from a seeded hash of the text
 * (vectors.ts). Responses are vLLM's, `usage` without completion tokens.
 */
interface PoolingInput {
  /** The text the vector is the hash of. */
  key: string;
  tokens: number;
}

export function addPoolingRoutes(app: SimApp, deps: EndpointDeps): void {
  /** An embeddings-shaped answer: one vector per input, under `field` of each `object`. */
  const vectors =
    (idPrefix: string, object: 'embedding' | 'pooling', field: 'embedding' | 'data') =>
    async (c: SimContext) => {
      const body = await readJsonObject(c);
      const request = parseEmbeddingRequest(body, deps);
      const done = await runSequences(deps, specsOf(request.inputs, request.lora), clientOf(c));
      if (!done) return CLIENT_GONE();
      return c.json({
        id: requestId(idPrefix),
        object: 'list',
        created: nowSeconds(),
        model: request.lora ?? deps.config.model,
        data: request.inputs.map((input, index) => ({
          index,
          object,
          [field]: encodeVector(vectorOf(input, request, deps), request.encoding),
        })),
        usage: usageInfo(request.inputs),
      });
    };
  app.post('/v1/embeddings', vectors('embd-', 'embedding', 'embedding'));
  app.post('/pooling', vectors('pool-', 'pooling', 'data'));

  const score = async (c: SimContext) => {
    const body = await readJsonObject(c);
    const lora = modelOf(deps, fields.optionalString(body, 'model'));
    const pairs = scorePairs(fields.strings(body, 'text_1'), fields.strings(body, 'text_2'));
    const inputs = pairs.map(([first, second]) => pairInput(first, second, deps));
    if (!(await runSequences(deps, specsOf(inputs, lora), clientOf(c)))) return CLIENT_GONE();
    return c.json({
      id: requestId('score-'),
      object: 'list',
      created: nowSeconds(),
      model: lora ?? deps.config.model,
      data: pairs.map(([first, second], index) => ({
        index,
        object: 'score',
        score: pairScore(first, second, deps.config.embeddingDim, deps.config.seed),
      })),
      usage: usageInfo(inputs),
    });
  };
  app.post('/score', score);
  app.post('/v1/score', score);

  const rerank = async (c: SimContext) => {
    const body = await readJsonObject(c);
    const lora = modelOf(deps, fields.optionalString(body, 'model'));
    const query = fields.string(body, 'query');
    const documents = rerankDocuments(body);
    const topN = fields.optionalInteger(body, 'top_n') ?? 0;
    const inputs = documents.map((document) => pairInput(query, document, deps));
    if (!(await runSequences(deps, specsOf(inputs, lora), clientOf(c)))) return CLIENT_GONE();
    const { embeddingDim, seed } = deps.config;
    const results = documents
      .map((text, index) => ({
        index,
        document: { text },
        relevance_score: pairScore(query, text, embeddingDim, seed),
      }))
      .sort((a, b) => b.relevance_score - a.relevance_score);
    return c.json({
      id: requestId('rerank-'),
      model: lora ?? deps.config.model,
      usage: { total_tokens: inputs.reduce((sum, input) => sum + input.tokens, 0) },
      results: topN > 0 ? results.slice(0, topN) : results,
    });
  };
  app.post('/rerank', rerank);
  app.post('/v1/rerank', rerank);
  app.post('/v2/rerank', rerank);
}

interface EmbeddingRequest {
  lora: string | null;
  inputs: PoolingInput[];
  encoding: 'float' | 'base64';
  dimensions: number | undefined;
}

/** vLLM's EmbeddingCompletionRequest (`input`) or EmbeddingChatRequest (`messages`). */
function parseEmbeddingRequest(body: JsonObject, deps: EndpointDeps): EmbeddingRequest {
  const encoding = fields.optionalString(body, 'encoding_format') ?? 'float';
  if (encoding !== 'float' && encoding !== 'base64') {
    throw validationError('body.encoding_format', "Input should be 'float' or 'base64'");
  }
  const dimensions = fields.optionalInteger(body, 'dimensions');
  const lora = modelOf(deps, fields.optionalString(body, 'model'));
  const inputs =
    'messages' in body && !('input' in body)
      ? [textInput(renderChatPrompt(fields.messages(body, 'messages')))]
      : embeddingInputs(body, deps);
  if (dimensions !== undefined && (dimensions < 1 || dimensions > deps.config.embeddingDim)) {
    throw badRequest(
      `dimensions must be between 1 and the model's ${deps.config.embeddingDim}, got ${dimensions}.`,
      'dimensions',
    );
  }
  for (const input of inputs) checkLength(input, deps.config.maxModelLen);
  return { lora, inputs, encoding, dimensions };
}

/** `input`: a string, strings, token ids or lists of token ids. */
function embeddingInputs(body: JsonObject, deps: EndpointDeps): PoolingInput[] {
  const input = body.input;
  const bad = () =>
    validationError(
      'body.input',
      'Input should be a string, a list of strings, a list of integers or a list of lists of integers',
    );
  if (!('input' in body)) throw validationError('body.input', 'Field required');
  if (typeof input === 'string') return [textInput(input)];
  if (!Array.isArray(input) || input.length === 0) throw bad();
  if (input.every((item) => typeof item === 'string')) return input.map(textInput);
  if (input.every(isTokenId)) return [idsInput(input, deps)];
  if (input.every((item) => Array.isArray(item) && item.length > 0 && item.every(isTokenId))) {
    return (input as number[][]).map((ids) => idsInput(ids, deps));
  }
  throw bad();
}

const isTokenId = (value: unknown): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0;

/** A text input; an empty text still costs one token (the BOS a tokenizer adds). */
function textInput(text: string): PoolingInput {
  return { key: text, tokens: Math.max(1, estimateTextTokens(text)) };
}

/** Token ids this sim gave hash like their text, so both spellings embed alike. */
function idsInput(ids: number[], deps: EndpointDeps): PoolingInput {
  const decoded = deps.vocabulary.decode(ids);
  return { key: 'text' in decoded ? decoded.text : `ids:${ids.join(',')}`, tokens: ids.length };
}

/** A cross-encoder's input: both texts in one sequence. */
function pairInput(first: string, second: string, deps: EndpointDeps): PoolingInput {
  const input = {
    key: `${first}\n${second}`,
    tokens: textInput(first).tokens + textInput(second).tokens,
  };
  checkLength(input, deps.config.maxModelLen);
  return input;
}

/** vLLM's pairing: 1:1, 1:N or N:N. */
function scorePairs(first: string[], second: string[]): Array<[string, string]> {
  if (first.length === 1) return second.map((text) => [first[0]!, text]);
  if (first.length !== second.length) {
    throw badRequest('Input lengths must be either 1:1, 1:N or N:N', 'text_1');
  }
  return first.map((text, index) => [text, second[index]!]);
}

function rerankDocuments(body: JsonObject): string[] {
  const documents = body.documents;
  if (!('documents' in body)) throw validationError('body.documents', 'Field required');
  if (!Array.isArray(documents) || !documents.every((item) => typeof item === 'string')) {
    throw validationError('body.documents', 'Input should be a valid list of strings');
  }
  return documents;
}

function checkLength(input: PoolingInput, maxModelLen: number): void {
  if (input.tokens <= maxModelLen) return;
  throw badRequest(
    `This model's maximum context length is ${maxModelLen} tokens. However, you requested ` +
      `${input.tokens} tokens in the input for embedding generation. Please reduce the length ` +
      'of the input.',
    'input',
  );
}

function specsOf(inputs: readonly PoolingInput[], lora: string | null) {
  return inputs.map((input, index) =>
    prefillSpec(`${requestId('pool-')}-${index}`, input.tokens, lora),
  );
}

function vectorOf(input: PoolingInput, request: EmbeddingRequest, deps: EndpointDeps): number[] {
  const vector = embeddingOf(input.key, deps.config.embeddingDim, deps.config.seed);
  return request.dimensions === undefined
    ? vector
    : normalized(vector.slice(0, request.dimensions));
}

function encodeVector(vector: number[], encoding: 'float' | 'base64'): number[] | string {
  return encoding === 'base64' ? base64Floats(vector) : vector;
}

/** vLLM's UsageInfo of a pooling answer, every field serialised. */
function usageInfo(inputs: readonly PoolingInput[]) {
  const promptTokens = inputs.reduce((sum, input) => sum + input.tokens, 0);
  return {
    prompt_tokens: promptTokens,
    total_tokens: promptTokens,
    completion_tokens: 0,
    prompt_tokens_details: null,
  };
}
