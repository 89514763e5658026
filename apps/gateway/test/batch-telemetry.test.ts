import { startTelemetry, type Telemetry } from '@fairgate/telemetry';
import { TEST_KEYS } from '@fairgate/testkit';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BATCH_LINE_SPAN } from '../src/batch/batch-worker.js';
import { BATCH_TENANT_HEADER } from '../src/batch/credential.js';
import { type GatewayStack, startGatewayStack } from './fixture.js';

const chatLine = (i: number) =>
  JSON.stringify({
    custom_id: `c-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: 'sim-model', messages: [{ role: 'user', content: `hi ${i}` }], max_tokens: 3 },
  });

/**
 * A batch's lines are traced and counted like requests (docs/batch.md, *Metrics and
 * spans*): each try is a `fairgate.batch_line` span, parent of the line's SERVER span at
 * the tenant's batch class; /metrics counts lines per tenant and outcome. The header a
 * worker names the tenant in opens nothing without the replica's own credential.
 */
describe('batch lines: spans, metrics and the batch credential', () => {
  const exporter = new InMemorySpanExporter();
  let telemetry: Telemetry;
  let stack: GatewayStack;

  beforeAll(async () => {
    telemetry = await startTelemetry({
      serviceName: 'fairgate-test',
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    stack = await startGatewayStack({
      replicaId: 'batch-r1',
      simArgs: { 'alpha-ms': 2 },
      withRedis: true,
      telemetry,
      config: { sections: { batch: { concurrency: 4 } } },
    });
  });
  afterAll(async () => {
    await stack?.close();
    await telemetry.shutdown();
  });

  it('each line is a batch_line span over its SERVER span at class batch; /metrics counts it', async () => {
    const client = new OpenAI({
      baseURL: `${stack.gateway.url}/v1`,
      apiKey: TEST_KEYS.paying,
      maxRetries: 0,
    });
    const jsonl = [0, 1, 2].map(chatLine).join('\n');
    const file = await client.files.create({
      file: await toFile(Buffer.from(jsonl), 'in.jsonl'),
      purpose: 'batch',
    });
    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    await expect
      .poll(async () => (await client.batches.retrieve(created.id)).status, { timeout: 15_000 })
      .toBe('completed');
    const batch = await client.batches.retrieve(created.id);

    await telemetry.flush();
    const spans = exporter.getFinishedSpans();
    const lines = spans.filter((s) => s.name === BATCH_LINE_SPAN);
    expect(lines).toHaveLength(3);
    for (const line of lines) {
      expect(line.attributes).toMatchObject({
        'fairgate.tenant': 'paying',
        'fairgate.class': 'batch',
        'fairgate.batch_id': batch.id,
        'fairgate.outcome': 'output',
      });
      const server = spans.find(
        (s) =>
          s.name === 'POST /v1/chat/completions' &&
          s.parentSpanContext?.spanId === line.spanContext().spanId,
      );
      expect(server?.attributes).toMatchObject({
        'fairgate.tenant': 'paying',
        'fairgate.class': 'batch',
        'fairgate.outcome': 'completed',
      });
      expect(server?.spanContext().traceId).toBe(line.spanContext().traceId);
    }

    const metrics = await (await fetch(`${stack.gateway.url}/metrics`)).text();
    expect(metrics).toMatch(
      /fairgate_batch_lines_total\{[^}]*tenant="paying"[^}]*outcome="completed"[^}]*\} 3/,
    );
    expect(metrics).toMatch(/fairgate_requests_total\{[^}]*class="batch"[^}]*\} 3/);
  });

  it('the tenant header without the replica credential is 401, even with a valid API key', async () => {
    for (const token of [TEST_KEYS.paying, 'f'.repeat(64), 'nonsense']) {
      const response = await fetch(`${stack.gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          [BATCH_TENANT_HEADER]: 'paying',
        },
        body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'x' }] }),
      });
      expect(response.status).toBe(401);
    }
  });
});

describe('without redis: the Batch API is not served', () => {
  let stack: GatewayStack;
  beforeAll(async () => {
    stack = await startGatewayStack({ replicaId: 'batch-embedded' });
  });
  afterAll(async () => {
    await stack?.close();
  });

  it('batches answer 501 batch_unavailable after authentication', async () => {
    const post = (key: string) =>
      fetch(`${stack.gateway.url}/v1/batches`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: '{}',
      });
    expect((await post('wrong')).status).toBe(401);
    const response = await post(TEST_KEYS.paying);
    expect(response.status).toBe(501);
    expect(await response.json()).toMatchObject({ error: { code: 'batch_unavailable' } });
  });
});
