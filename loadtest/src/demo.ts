#!/usr/bin/env node
/**
 * `npm run demo` — the main job. For now (foundation issue) it starts one
 * simulated vLLM pod on a free port, streams a chat completion from it with a
 * real HTTP client, prints the tokens as they arrive and the pod's measured
 * TTFT, then shuts everything down (also on Ctrl-C). The full demo (redis, 2
 * sims, 3 gateway replicas, noisy_neighbor scenario, report) replaces this in
 * the load-generator issue.
 */
import {
  type ChatCompletionChunk,
  chunkText,
  decodeSseStream,
  estimatePromptTokens,
  parseChatCompletionRequest,
  SSE_DONE_DATA,
} from '@fairgate/openai';
import { startSim, stopAll } from '@fairgate/testkit';

async function main(): Promise<void> {
  const sim = await startSim({ args: { 'alpha-ms': 15, 'beta-ms': 0.05, 'gamma-ms': 0.0005 } });
  console.log(`fairgate demo: simulated vLLM pod at ${sim.url}`);
  const body = parseChatCompletionRequest({
    model: 'sim-model',
    messages: [{ role: 'user', content: 'Tell me about fair queueing for LLM inference.' }],
    max_tokens: 48,
    stream: true,
    stream_options: { include_usage: true },
  });
  const started = performance.now();
  const response = await fetch(`${sim.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!response.ok || !response.body) throw new Error(`sim answered ${response.status}`);
  let firstTokenMs: number | undefined;
  process.stdout.write('\n');
  for await (const event of decodeSseStream(response.body)) {
    if (event.data === SSE_DONE_DATA) break;
    const chunk = JSON.parse(event.data) as ChatCompletionChunk;
    const text = chunkText(chunk);
    if (text && firstTokenMs === undefined) firstTokenMs = performance.now() - started;
    process.stdout.write(text);
    if (chunk.usage) {
      console.log(`\n\nusage: ${JSON.stringify(chunk.usage)}`);
      console.log(`estimated prompt tokens (shared estimate): ${estimatePromptTokens(body)}`);
    }
  }
  console.log(
    `client-side TTFT: ${firstTokenMs?.toFixed(1)} ms, total: ${(performance.now() - started).toFixed(1)} ms`,
  );
}

process.once('SIGINT', () => {
  void stopAll().then(() => process.exit(130));
});

main()
  .then(() => stopAll())
  .catch(async (error: unknown) => {
    console.error(error);
    await stopAll();
    process.exitCode = 1;
  });
