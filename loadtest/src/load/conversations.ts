import type { ChatMessage } from '@fairgate/openai';
import type { ConversationTurn } from './arrivals.js';
import { promptText } from './client.js';
import type { TenantSpec } from './scenario.js';

type SharedPrefix = NonNullable<TenantSpec['shared_prefix']>;

/**
 * The messages of one turn of a shared_prefix tenant (scenario.ts): the user's system
 * prompt (one of `system_prompts`, the same text for every user given it), the earlier
 * turns of this conversation (each user turn and answer always the same text, so every
 * turn's prompt starts with the previous turn's whole prompt), and this turn's question.
 * Lengths in the shared token estimate: system_tokens, prompt_tokens' median per user
 * turn, output_tokens' median per answer.
 */
export function conversationMessages(
  tenant: TenantSpec & { shared_prefix: SharedPrefix },
  at: ConversationTurn,
  questionTokens: number,
): ChatMessage[] {
  const shared = tenant.shared_prefix;
  const system = at.user % shared.system_prompts;
  const messages: ChatMessage[] = [
    {
      role: 'system',
      content: promptText(shared.system_tokens, `${tenant.name} system prompt ${system}:`),
    },
  ];
  const key = `${tenant.name} user ${at.user} conversation ${at.round}`;
  for (let turn = 0; turn < at.turn; turn += 1) {
    messages.push(
      {
        role: 'user',
        content: promptText(Math.round(tenant.prompt_tokens.median), `${key} turn ${turn}:`),
      },
      {
        role: 'assistant',
        content: promptText(Math.round(tenant.output_tokens.median), `${key} answer ${turn}:`),
      },
    );
  }
  messages.push({ role: 'user', content: promptText(questionTokens, `${key} turn ${at.turn}:`) });
  return messages;
}
