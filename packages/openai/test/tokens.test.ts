import { describe, expect, it } from 'vitest';
import {
  estimatePromptTokens,
  estimateTextTokens,
  kvBlocksFor,
  parseChatCompletionRequest,
  parseCompletionRequest,
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
