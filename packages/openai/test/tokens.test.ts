import { describe, expect, it } from 'vitest';
import {
  estimatePromptTokens,
  estimateTextTokens,
  hashPromptBlocks,
  kvBlocksFor,
  parseChatCompletionRequest,
  parseCompletionRequest,
  promptBlockKeys,
  renderChatPrompt,
  renderPrompt,
  tokenizePrompt,
} from '../src/index.js';

describe('token estimate', () => {
  it.each([
    ['', 0],
    ['a', 1],
    ['abcd', 1],
    ['abcde', 2],
    ['x'.repeat(400), 100],
  ])('%j costs %i tokens', (text, tokens) => {
    expect(estimateTextTokens(text)).toBe(tokens);
  });

  it('renders chat with role markers and a generation prompt', () => {
    const prompt = renderChatPrompt([
      { role: 'system', content: 'be brief' },
      { role: 'user', content: [{ type: 'text', text: 'hi' }, { type: 'image_url' }] },
    ]);
    expect(prompt).toBe('<|system|>\nbe brief\n<|user|>\nhi<image_url>\n<|assistant|>\n');
  });

  it.each([
    [
      'chat',
      parseChatCompletionRequest({
        model: 'm',
        messages: [{ role: 'user', content: 'hello world' }],
      }),
    ],
    ['text', parseCompletionRequest({ model: 'm', prompt: 'the quick brown fox' })],
    ['text batch', parseCompletionRequest({ model: 'm', prompt: ['ab', 'cd'] })],
    ['token ids', parseCompletionRequest({ model: 'm', prompt: [5, 6, 7] })],
    ['token id batch', parseCompletionRequest({ model: 'm', prompt: [[5, 6], [7]] })],
  ])('tokenize and estimate agree for a %s prompt', (_name, request) => {
    const tokens = tokenizePrompt(renderPrompt(request));
    expect(tokens.length).toBe(estimatePromptTokens(request));
  });

  it('counts token-id prompts exactly', () => {
    expect(
      estimatePromptTokens(parseCompletionRequest({ model: 'm', prompt: [[1, 2], [3]] })),
    ).toBe(3);
  });

  it.each([
    [0, 16, 0],
    [1, 16, 1],
    [16, 16, 1],
    [17, 16, 2],
    [100, 32, 4],
  ])('%i tokens hold %i-token blocks: %i', (tokens, blockSize, blocks) => {
    expect(kvBlocksFor(tokens, blockSize)).toBe(blocks);
  });
});

describe('hashPromptBlocks', () => {
  const request = (content: string) => ({
    model: 'm',
    messages: [{ role: 'user' as const, content }],
  });
  const blocksOf = (content: string) =>
    hashPromptBlocks(tokenizePrompt(renderPrompt(request(content))), 16);

  it('hashes the full 16-token blocks of the shared tokenizer output', () => {
    const content = 'x'.repeat(300);
    const tokens = estimatePromptTokens(request(content));
    expect(blocksOf(content)).toHaveLength(Math.floor(tokens / 16));
  });

  it('stops after maxBlocks', () => {
    const content = 'x'.repeat(1_000);
    const all = blocksOf(content);
    const first = hashPromptBlocks(tokenizePrompt(renderPrompt(request(content))), 16, 3);
    expect(first).toEqual(all.slice(0, 3));
  });

  it('chains: equal prefixes share hashes, a change invalidates every later block', () => {
    const base = blocksOf(`${'a'.repeat(200)}${'b'.repeat(200)}`);
    const sameStart = blocksOf(`${'a'.repeat(200)}${'c'.repeat(200)}`);
    const changedFirst = blocksOf(`z${'a'.repeat(199)}${'b'.repeat(200)}`);
    expect(sameStart.slice(0, 3)).toEqual(base.slice(0, 3));
    expect(sameStart[4]).not.toBe(base[4]);
    // Same tokens from block 1 on, but a different block 0: no hash may match.
    expect(changedFirst.filter((hash) => base.includes(hash))).toEqual([]);
  });
});

describe('promptBlockKeys', () => {
  const chat = (content: string) => ({
    model: 'm',
    messages: [
      { role: 'system' as const, content: 'You are terse. '.repeat(40) },
      { role: 'user' as const, content },
    ],
  });

  it('is the first blocks of hashPromptBlocks, cut to index keys', () => {
    const request = chat('hello there');
    const full = hashPromptBlocks(tokenizePrompt(renderPrompt(request)), 16);
    expect(promptBlockKeys(request, 16, 128)).toEqual(full.map((h) => h.slice(0, 16)));
    expect(promptBlockKeys(request, 16, 3)).toEqual(full.slice(0, 3).map((h) => h.slice(0, 16)));
  });

  it('shares the system prompt blocks between users, not the blocks after', () => {
    const a = promptBlockKeys(chat('question one'), 16, 128);
    const b = promptBlockKeys(chat('another question entirely'), 16, 128);
    const shared = a.findIndex((key, i) => key !== b[i]);
    expect(shared).toBeGreaterThan(5);
    expect(a.slice(shared).some((key) => b.includes(key))).toBe(false);
  });

  it('hashes token-id prompts by their ids', () => {
    const ids = Array.from({ length: 40 }, (_, i) => i);
    const keys = promptBlockKeys({ model: 'm', prompt: ids }, 16, 8);
    expect(keys).toHaveLength(2);
    expect(keys).toEqual(hashPromptBlocks(ids.map(String), 16).map((h) => h.slice(0, 16)));
  });
});
