import {
  type Endpoint,
  type GenerationRequest,
  hashPromptBlocks,
  isChatRequest,
  OpenAIHttpError,
  renderPrompt,
  requestedMaxTokens,
  tokenizePrompt,
} from '@fairgate/openai';
import { createRng, deriveSeed, uniformInt } from '@fairgate/runtime';
import type { SimConfig } from './config.js';
import { PseudoText } from './text.js';
import { type PlannedToolCall, planToolCall, toolCallTokens } from './tools.js';

/**
 * Turns a validated request into what the engine runs: prompt tokens (the shared token
 * estimate, so usage.prompt_tokens === estimatePromptTokens(request)), prompt block hashes
 * for the prefix cache, and the number of tokens to generate.
 *
 * Output length: the request's limit (chat: max_completion_tokens ?? max_tokens; completions:
 * max_tokens ?? 16). A chat request naming no limit gets min(--default-max-tokens, context
 * left). --output-len-mode random draws uniformly in [max(1, min_tokens), limit] instead, as
 * if the model stopped at EOS, and --eos-after N stops every answer after at most N tokens
 * (at least min_tokens); ignore_eos forces the limit. Draws are seeded from --seed and
 * the request's `seed` when given, else its arrival index, so runs are reproducible.
 *
 * A chat request offering tools is answered with a tool call (see tools.ts) that generates
 * exactly the call's tokens, unless they do not fit the limit: then it gets a text answer.
 *
 * With a LoRA adapter the prompt's block hashes include the adapter's name, as vLLM's
 * include the LoRA in every block's hash: the same prompt under another adapter (or the
 * base model) does not hit the prefix cache.
 */
export interface GenerationPlan {
  endpoint: Endpoint;
  stream: boolean;
  includeUsage: boolean;
  /**
   * stream_options.continuous_usage_stats (with include_usage only, as in vLLM): every
   * chunk carries the usage so far instead of null.
   */
  continuousUsage: boolean;
  promptTokens: number;
  promptBlockHashes: string[];
  /** The LoRA adapter the request runs with, null for the base model. */
  lora: string | null;
  maxTokens: number;
  outputTokens: number;
  /**
   * The engine's: 'length' when the limit is reached, 'stop' when the simulated EOS (or the
   * end of a tool call) comes first.
   */
  finishReason: 'stop' | 'length';
  /** The call the answer carries instead of text (its finish reason is 'tool_calls'). */
  toolCall: PlannedToolCall | null;
  textSeed: number;
}

type PlanConfig = Pick<
  SimConfig,
  'maxModelLen' | 'blockSize' | 'defaultMaxTokens' | 'outputLenMode' | 'seed' | 'eosAfter'
>;

export function planGeneration(
  endpoint: Endpoint,
  request: GenerationRequest,
  config: PlanConfig,
  requestIndex: number,
  lora: string | null = null,
): GenerationPlan {
  rejectUnsupported(request);
  const promptParam = isChatRequest(request) ? 'messages' : 'prompt';
  const tokens = tokenizePrompt(renderPrompt(request));
  const promptTokens = tokens.length;
  if (promptTokens === 0) {
    throw badRequest('The prompt is empty; it must contain at least one token.', promptParam);
  }
  const maxTokens = resolveMaxTokens(
    request,
    promptTokens,
    config.maxModelLen,
    config.defaultMaxTokens,
  );
  const minTokens = request.min_tokens ?? 0;
  if (minTokens > maxTokens) {
    throw badRequest(
      `min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${minTokens}.`,
      'min_tokens',
    );
  }

  const includeUsage = request.stream === true && request.stream_options?.include_usage === true;
  const streamKey = request.seed ?? `#${requestIndex}`;
  let outputTokens = maxTokens;
  if (config.outputLenMode === 'random' && request.ignore_eos !== true) {
    const rng = createRng(deriveSeed(config.seed, 'length', streamKey));
    outputTokens = uniformInt(rng, Math.max(1, minTokens), maxTokens);
  }
  if (config.eosAfter > 0 && request.ignore_eos !== true) {
    outputTokens = Math.min(outputTokens, Math.max(config.eosAfter, minTokens));
  }
  const textSeed = deriveSeed(config.seed, 'text', streamKey);
  const word = new PseudoText(textSeed).next().trim();
  const planned = isChatRequest(request) ? planToolCall(request, word) : null;
  const toolCall = planned !== null && toolCallTokens(planned) <= maxTokens ? planned : null;
  if (toolCall !== null) outputTokens = toolCallTokens(toolCall);
  return {
    endpoint,
    stream: request.stream === true,
    includeUsage,
    continuousUsage: includeUsage && request.stream_options?.continuous_usage_stats === true,
    promptTokens,
    promptBlockHashes: adapterHashes(hashPromptBlocks(tokens, config.blockSize), lora),
    lora,
    maxTokens,
    outputTokens,
    finishReason: toolCall === null && outputTokens === maxTokens ? 'length' : 'stop',
    toolCall,
    textSeed,
  };
}

function adapterHashes(hashes: string[], lora: string | null): string[] {
  return lora === null ? hashes : hashes.map((hash) => `lora:${lora}/${hash}`);
}

/** The effective output limit; 400 like vLLM when prompt + limit exceeds the context. */
function resolveMaxTokens(
  request: GenerationRequest,
  promptTokens: number,
  maxModelLen: number,
  defaultMaxTokens: number,
): number {
  const requested = requestedMaxTokens(request);
  const promptParam = isChatRequest(request) ? 'messages' : 'prompt';
  if (promptTokens >= maxModelLen) {
    throw contextTooLong(
      `This model's maximum context length is ${maxModelLen} tokens. However, your request has ` +
        `${promptTokens} input tokens. Please reduce the length of the input.`,
      promptParam,
    );
  }
  if (requested === undefined) return Math.min(defaultMaxTokens, maxModelLen - promptTokens);
  if (promptTokens + requested > maxModelLen) {
    const param =
      isChatRequest(request) && request.max_completion_tokens != null
        ? 'max_completion_tokens'
        : 'max_tokens';
    throw contextTooLong(
      `'${param}' is too large: ${requested}. This model's maximum context length is ` +
        `${maxModelLen} tokens and your request has ${promptTokens} input tokens ` +
        `(${requested} > ${maxModelLen} - ${promptTokens}).`,
      param,
    );
  }
  return requested;
}

/** Features a pod would serve but the sim does not model: refused loudly, never ignored. */
function rejectUnsupported(request: GenerationRequest): void {
  if ((request.n ?? 1) > 1)
    throw badRequest('fairgate-sim generates one choice: n must be 1.', 'n');
  if (!isChatRequest(request) && (request.best_of ?? 1) > 1) {
    throw badRequest('fairgate-sim generates one choice: best_of must be 1.', 'best_of');
  }
}

function badRequest(message: string, param: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 400,
    type: 'invalid_request_error',
    message,
    param,
    code: 'invalid_value',
  });
}

function contextTooLong(message: string, param: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 400,
    type: 'invalid_request_error',
    message,
    param,
    code: 'context_length_exceeded',
  });
}
