import type { AppHandle } from '@fairgate/testkit';
import OpenAI, { toFile } from 'openai';
import type { Batch, BatchCreateParams } from 'openai/resources/batches';
import { SIM_MODEL, sleep } from './pool.js';

/**
 * The Batch API from a client's side, for the end-to-end tests (docs/batch.md): the
 * official SDK against a gateway, an input file of `lines` chat requests, and the wait
 * for a batch to end.
 */
export function sdk(gateway: AppHandle, apiKey: string): OpenAI {
  return new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey, maxRetries: 0 });
}

/** JSONL of `lines` chat requests with custom ids `line-0` ... */
export function batchInput(lines: number, maxTokens = 4, model = SIM_MODEL): string {
  return Array.from({ length: lines }, (_, i) =>
    JSON.stringify({
      custom_id: `line-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model, messages: [{ role: 'user', content: `line ${i}` }], max_tokens: maxTokens },
    }),
  ).join('\n');
}

/** Uploads `jsonl` and creates a batch of it (of chat lines unless `endpoint` says). */
export async function submitBatch(
  client: OpenAI,
  jsonl: string,
  endpoint: BatchCreateParams['endpoint'] = '/v1/chat/completions',
): Promise<Batch> {
  const file = await client.files.create({
    file: await toFile(Buffer.from(jsonl), 'input.jsonl'),
    purpose: 'batch',
  });
  return client.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
}

const ENDED = new Set(['completed', 'failed', 'expired', 'cancelled']);

/** Polls the batch until it ends (or throws after timeoutMs). */
export async function waitForBatch(
  client: OpenAI,
  id: string,
  timeoutMs: number,
  pollMs = 200,
): Promise<Batch> {
  const deadline = Date.now() + timeoutMs;
  let batch = await client.batches.retrieve(id);
  while (!ENDED.has(batch.status)) {
    if (Date.now() > deadline) {
      throw new Error(
        `batch ${id} still ${batch.status} after ${timeoutMs} ms: ${JSON.stringify(batch.request_counts)}`,
      );
    }
    await sleep(pollMs);
    batch = await client.batches.retrieve(id);
  }
  return batch;
}

/** Polls the batch until `completed` of its lines are done (it must still be running then). */
export async function waitForProgress(
  client: OpenAI,
  id: string,
  completed: number,
  timeoutMs = 30_000,
): Promise<Batch> {
  const deadline = Date.now() + timeoutMs;
  let batch = await client.batches.retrieve(id);
  while ((batch.request_counts?.completed ?? 0) < completed && Date.now() < deadline) {
    await sleep(50);
    batch = await client.batches.retrieve(id);
  }
  return batch;
}

export interface OutputLine {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: unknown } | null;
  error: { code: string; message: string } | null;
}

/** The lines of an output or error file (none when the batch has no such file). */
export async function fileLines(client: OpenAI, fileId: string | null | undefined) {
  if (!fileId) return [] as OutputLine[];
  const text = await (await client.files.content(fileId)).text();
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as OutputLine);
}

/** How often each custom id appears in the lines. */
export function customIdCounts(lines: readonly OutputLine[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of lines) counts.set(line.custom_id, (counts.get(line.custom_id) ?? 0) + 1);
  return counts;
}
