import { createHash } from 'node:crypto';
import { type ChatMessage, type GenerationRequest, isChatRequest } from './requests.js';

/**
 * The one token estimate used everywhere in fairgate.
 *
 * Rule: a text costs ceil(length / 4) tokens, where length counts UTF-16 code
 * units (JavaScript's `string.length`). A chat request is first rendered to one
 * prompt string by {@link renderChatPrompt}, so role markers count too. Token-id
 * prompts cost exactly their number of ids.
 *
 * The gateway uses it for cost and KV-block estimates; the simulated pod uses the
 * same function as its tokenizer, so the usage a sim reports equals the gateway's
 * estimate exactly. Against a real model it is the usual rough 4-characters-per-
 * token rule: good enough for admission, and the gateway trues up with the actual
 * usage the pod reports.
 */
export const CHARS_PER_TOKEN = 4;

export function estimateTextTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

function messageText(message: ChatMessage): string {
  const { content } = message;
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content
    .map((part) =>
      part.type === 'text' && typeof part.text === 'string' ? part.text : `<${part.type}>`,
    )
    .join('');
}

/** Renders chat messages as one prompt string (a neutral chat template). */
export function renderChatPrompt(messages: readonly ChatMessage[]): string {
  let prompt = '';
  for (const message of messages) prompt += `<|${message.role}|>\n${messageText(message)}\n`;
  return `${prompt}<|assistant|>\n`;
}

/**
 * The prompt as the pod would see it: rendered text for chat and text
 * completions (batched prompts joined), or the token-id list itself.
 */
export function renderPrompt(request: GenerationRequest): string | number[] {
  if (isChatRequest(request)) return renderChatPrompt(request.messages);
  const { prompt } = request;
  if (typeof prompt === 'string') return prompt;
  if (prompt.length > 0 && typeof prompt[0] === 'string') return (prompt as string[]).join('\n');
  if (prompt.length > 0 && Array.isArray(prompt[0])) return (prompt as number[][]).flat();
  return prompt as number[];
}

/** Estimated prompt tokens of a request (see the rule above). */
export function estimatePromptTokens(request: GenerationRequest): number {
  const prompt = renderPrompt(request);
  return typeof prompt === 'string' ? estimateTextTokens(prompt) : prompt.length;
}

/**
 * Splits a rendered prompt into its estimated tokens: 4-character slices of the
 * text, or the ids as strings. `tokenize(p).length === estimate(p)` always.
 */
export function tokenizePrompt(prompt: string | number[]): string[] {
  if (typeof prompt !== 'string') return prompt.map(String);
  const tokens: string[] = [];
  for (let at = 0; at < prompt.length; at += CHARS_PER_TOKEN) {
    tokens.push(prompt.slice(at, at + CHARS_PER_TOKEN));
  }
  return tokens;
}

/** KV-cache blocks a sequence of `tokens` tokens holds (vLLM's paged attention). */
export function kvBlocksFor(tokens: number, blockSize: number): number {
  return Math.ceil(tokens / blockSize);
}

/**
 * Chained hashes of the full blocks of a tokenized prompt: hash_k = H(hash_{k-1}, tokens of
 * block k), so equal hashes mean equal prefixes (vLLM's prefix-caching scheme). A trailing
 * partial block is never cached. The simulated pod's prefix cache and the gateway's prefix
 * index (docs/routing.md) hash alike; `maxBlocks` stops after the first so many blocks.
 */
export function hashPromptBlocks(
  tokens: readonly string[],
  blockSize: number,
  maxBlocks = Number.POSITIVE_INFINITY,
): string[] {
  const hashes: string[] = [];
  let parent = '';
  for (
    let start = 0;
    start + blockSize <= tokens.length && hashes.length < maxBlocks;
    start += blockSize
  ) {
    parent = createHash('sha256')
      .update(parent)
      .update(JSON.stringify(tokens.slice(start, start + blockSize)))
      .digest('base64url');
    hashes.push(parent);
  }
  return hashes;
}

/** Characters of a block hash as an index key (96 bits of the sha256: collisions negligible). */
export const BLOCK_KEY_CHARS = 16;

/**
 * Index keys of a request's first `maxBlocks` full prompt blocks: hashPromptBlocks of the
 * rendered, tokenized prompt, cut to BLOCK_KEY_CHARS. Only the part of the prompt those
 * blocks cover is tokenized (tokens are fixed slices of the text, so a prefix of the text
 * gives a prefix of the tokens). The gateway's prefix index keys (docs/routing.md).
 */
export function promptBlockKeys(
  request: GenerationRequest,
  blockSize: number,
  maxBlocks: number,
): string[] {
  const prompt = renderPrompt(request);
  const tokens = maxBlocks * blockSize;
  const head =
    typeof prompt === 'string'
      ? prompt.slice(0, tokens * CHARS_PER_TOKEN)
      : prompt.slice(0, tokens);
  return hashPromptBlocks(tokenizePrompt(head), blockSize, maxBlocks).map((hash) =>
    hash.slice(0, BLOCK_KEY_CHARS),
  );
}
