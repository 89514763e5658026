import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { estimateTextTokens } from '@fairgate/openai';
import { afterEach, describe, expect, it } from 'vitest';
import type { AdminSample } from '../src/load/admin.js';
import { AdminPoller } from '../src/load/admin.js';
import {
  BatchDriver,
  type BatchResult,
  type BatchSample,
  batchInput,
  batchLines,
  checkOutput,
} from '../src/load/batch.js';
import type { RequestRecord } from '../src/load/client.js';
import { batchLine, renderPlain, renderTable } from '../src/load/live.js';
import { batchText, runCharts, summaryText } from '../src/load/report.js';
import { computeBatchSeries, summarize, summarizeBatch } from '../src/load/report-data.js';
import type { RunProgress, RunResult } from '../src/load/runner.js';
import { parseScenario } from '../src/load/scenario.js';

const scenario = (seed = 1, lines = 50) =>
  parseScenario({
    name: 'b',
    seed,
    tenants: [
      { name: 'live', key_ref: 'paying', arrival: { kind: 'poisson', rate: 1 } },
      {
        name: 'bulk',
        key_ref: 'free',
        prompt_tokens: { median: 30, sigma: 0.2, max: 64 },
        output_tokens: { median: 6, sigma: 0.2, max: 12 },
      },
    ],
    batch: { tenant: 'bulk', lines, output_tokens: { median: 10, sigma: 0.3, min: 2, max: 20 } },
  });

describe('the batch input', () => {
  it('is seeded: same seed, same lines; lengths from the batch, else its tenant', () => {
    const one = batchLines(scenario(1));
    expect(batchLines(scenario(1))).toEqual(one);
    expect(batchLines(scenario(2)).map((l) => l.outputTokens)).not.toEqual(
      one.map((l) => l.outputTokens),
    );
    expect(one).toHaveLength(50);
    expect(one[0]?.customId).toBe('line-01');
    expect(one.at(-1)?.customId).toBe('line-50');
    expect(new Set(one.map((l) => l.customId)).size).toBe(50);
    // output_tokens from the batch section, prompt_tokens from the tenant.
    expect(one.every((l) => l.outputTokens >= 2 && l.outputTokens <= 20)).toBe(true);
    expect(one.every((l) => l.promptTokens <= 64)).toBe(true);
    const median = [...one.map((l) => l.promptTokens)].sort((a, b) => a - b)[25]!;
    expect(median).toBeGreaterThan(24);
    expect(median).toBeLessThan(36);
  });

  it('is one chat completion per line, max_tokens = the output length, not streamed', () => {
    const lines = batchLines(scenario(1, 5));
    const text = batchInput(lines, 'sim-model');
    expect(text.endsWith('\n')).toBe(true);
    const parsed = text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(parsed).toHaveLength(5);
    parsed.forEach((entry, i) => {
      expect(entry).toMatchObject({
        custom_id: lines[i]!.customId,
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'sim-model', max_tokens: lines[i]!.outputTokens },
      });
      expect(entry.body.stream).toBeUndefined();
      const content = entry.body.messages[0].content as string;
      expect(estimateTextTokens(`<|user|>\n${content}\n<|assistant|>\n`)).toBe(
        lines[i]!.promptTokens,
      );
    });
  });
});

describe('the output check', () => {
  const ids = ['a', 'b', 'c', 'd'];
  const line = (id: string) => JSON.stringify({ id: `batch_req_${id}`, custom_id: id });
  const cases: Array<[string, string[], string[], Partial<ReturnType<typeof checkOutput>>]> = [
    [
      'every custom_id once over both files',
      ['a', 'b', 'd'],
      ['c'],
      { ok: true, exactlyOnce: 4, outputLines: 3, errorLines: 1, missing: 0, duplicated: 0 },
    ],
    ['one missing', ['a', 'b', 'c'], [], { ok: false, missing: 1, exactlyOnce: 3 }],
    ['one twice', ['a', 'b', 'c', 'd'], ['b'], { ok: false, duplicated: 1, exactlyOnce: 3 }],
    ['one unknown', ['a', 'b', 'c', 'd', 'x'], [], { ok: false, unexpected: 1, exactlyOnce: 4 }],
  ];
  it.each(cases)('%s', (_name, output, errors, expected) => {
    const check = checkOutput(
      ids,
      `${output.map(line).join('\n')}\n`,
      errors.length ? `${errors.map(line).join('\n')}\n` : '',
    );
    expect(check).toMatchObject(expected);
  });

  it('names examples and counts unparsable lines as unexpected', () => {
    const check = checkOutput(ids, `${['a', 'a', 'c'].map(line).join('\n')}\nnot json\n`, '');
    expect(check.examples).toEqual({ missing: ['b', 'd'], duplicated: ['a'], unexpected: [''] });
    expect(check.unexpected).toBe(1);
    expect(check.outputLines).toBe(4);
  });
});

/** A 12 s run: live requests every second; a 40-line batch submitted at 3 s, running 3.5-8.5 s. */
function withBatch(): RunResult {
  const requests: RequestRecord[] = [];
  for (let s = 0; s < 10; s++) {
    const ttftMs = s === 7 ? 900 : s < 3 ? 50 : 100;
    requests.push({
      tenant: 0,
      seq: s,
      target: 0,
      scheduledS: s + 0.5,
      startS: s + 0.5,
      endS: s + 1.5,
      status: 200,
      outcome: 'ok',
      ttftMs,
      e2eMs: 1_000,
      promptTokens: 10,
      outputTokens: 20,
      maxTokens: 20,
    });
  }
  const admin: AdminSample[] = [];
  for (let t = 0.5; t < 12; t += 1) {
    const running = t >= 3.5 && t <= 8.5;
    admin.push({
      t,
      mode: 'redis',
      budget: 64,
      inflight: running ? 32 : 8,
      waiting: 0,
      leader: 'r1',
      replicas: 2,
      tenants: {
        live: { inflight: 8, waiting: 0 },
        bulk: { inflight: running ? 24 : 0, waiting: 0 },
      },
      podCap: 32,
      podInflight: running ? 32 : 8,
      capPerWorker: null,
      controllerEnabled: false,
      windowP99S: null,
    });
  }
  const samples: BatchSample[] = [
    { t: 3.1, status: 'validating', total: 40, completed: 0, failed: 0 },
    { t: 3.5, status: 'in_progress', total: 40, completed: 0, failed: 0 },
    { t: 4.5, status: 'in_progress', total: 40, completed: 8, failed: 0 },
    { t: 5.5, status: 'in_progress', total: 40, completed: 16, failed: 0 },
    { t: 6.5, status: 'in_progress', total: 40, completed: 24, failed: 0 },
    { t: 7.5, status: 'in_progress', total: 40, completed: 32, failed: 1 },
    { t: 8.5, status: 'completed', total: 40, completed: 38, failed: 2 },
  ];
  const batch: BatchResult = {
    tenant: 'bulk',
    lines: 40,
    model: 'sim-model',
    target: 0,
    submittedS: 3,
    createdS: 3.1,
    id: 'batch_x',
    status: 'completed',
    statusSeenS: { validating: 3.1, in_progress: 3.5, completed: 8.5 },
    gatewayTimesS: {},
    requestCounts: { total: 40, completed: 38, failed: 2 },
    samples,
    linesEndedS: 8.5,
    endedS: 8.5,
    timedOut: false,
    cancelledByRunner: false,
    polls: samples.length,
    output: checkOutput(['a'], JSON.stringify({ custom_id: 'a' }), ''),
    errors: [],
  };
  return {
    label: 'fairgate',
    scenario: 'unit',
    startedAt: new Date(0).toISOString(),
    durationS: 10,
    seed: 1,
    targets: ['http://127.0.0.1:1'],
    tenants: [
      { name: 'live', sloClass: 'standard', weight: 2 },
      { name: 'bulk', sloClass: 'batch', weight: 1 },
    ],
    requests,
    admin,
    actions: [],
    stoppedEarly: false,
    batch,
    meta: {},
  };
}

describe("the batch's report data", () => {
  it('summarizes counts, times, busy capacity and TTFT before / during / after', () => {
    const s = summarizeBatch(withBatch(), { fromS: 1, toS: 10 })!;
    expect(s).toMatchObject({
      tenant: 'bulk',
      id: 'batch_x',
      status: 'completed',
      lines: 40,
      total: 40,
      completed: 38,
      failed: 2,
      submittedS: 3,
      runningFromS: 3.5,
      linesEndedS: 8.5,
      endedS: 8.5,
      durationS: 5.5,
      runningS: 5,
      timedOut: false,
    });
    expect(s.linesPerS).toBeCloseTo(38 / 5, 9);
    // Samples at 3.5 .. 8.5: 32 of 32 seats; the live tenant's 8 of them.
    expect(s.meanBusyPct).toBe(100);
    expect(s.meanInteractiveBusyPct).toBe(25);
    // Before: samples at 1.5 and 2.5 (the warm-up excluded): 8 of 32.
    expect(s.meanBusyPctBefore).toBe(25);
    expect(s.interactive.before).toMatchObject({ fromS: 1, toS: 3, requests: 2, ttftP99Ms: 50 });
    expect(s.interactive.during).toMatchObject({ requests: 5, completed: 5, ttftP50Ms: 100 });
    expect(s.interactive.during?.ttftP99Ms).toBe(900);
    expect(s.interactive.after).toMatchObject({ fromS: 8.5, toS: 10, requests: 2 });
    expect(s.output?.ok).toBe(true);
    // And in the run's summary (results.json) and the console text.
    expect(summarize(withBatch()).batch?.completed).toBe(38);
    const text = summaryText(summarize(withBatch()));
    expect(text).toMatch(/batch batch_x of bulk: completed; 40 lines, 38 completed, 2 failed/);
    expect(text).toMatch(/duration 5.5 s \(lines ran 5.0 s, 7.6 lines\/s\)/);
    expect(text).toMatch(
      /busy capacity while the batch ran: mean 100.0% \(interactive share 25.0%\)/,
    );
    expect(batchText(s).join('\n')).toMatch(/output: every custom_id exactly once/);
  });

  it('has no batch numbers without a batch', () => {
    const r = withBatch();
    delete r.batch;
    expect(summarizeBatch(r)).toBeUndefined();
    expect(summarize(r).batch).toBeUndefined();
    expect(computeBatchSeries(r)).toBeUndefined();
    expect(runCharts(r).map((c) => c.file)).not.toContain('batch.svg');
  });

  it('spreads request_counts deltas over the seconds between polls', () => {
    const bs = computeBatchSeries(withBatch(), 1)!;
    // Buckets to the last response (10.5 s) or poll, whichever is later.
    expect(bs.times).toHaveLength(11);
    // 8 lines between the polls at 3.5 s and 4.5 s: 4 in second 3, 4 in second 4; ...
    expect(bs.batchCompletedPerS.slice(3, 9)).toEqual([4, 8, 8, 8, 7, 3]);
    expect(bs.batchCompletedPerS.reduce((a, b) => a + b, 0)).toBeCloseTo(38, 9);
    expect(bs.batchFailedPerS.reduce((a, b) => a + b, 0)).toBeCloseTo(2, 9);
    expect(bs.interactiveCompletedPerS.reduce((a, b) => a + b, 0)).toBe(10);
    expect(bs.busyPct.map((p) => p[1])).toEqual([
      25, 25, 25, 100, 100, 100, 100, 100, 100, 25, 25, 25,
    ]);
    expect(bs.interactiveBusyPct.every(([, v]) => v === 25)).toBe(true);
    expect(bs).toMatchObject({ submittedS: 3, runningFromS: 3.5, linesEndedS: 8.5 });
  });

  it('draws the Batch backfill panel, and no panel for the batch-only tenant', () => {
    const charts = runCharts(withBatch());
    expect(charts.map((c) => c.file)).toEqual([
      'tenant-live.svg',
      'pool.svg',
      'controller.svg',
      'ttft.svg',
      'throughput.svg',
      'batch.svg',
    ]);
    const panel = charts.at(-1)!;
    expect(panel.title).toBe('Batch backfill');
    expect(panel.svg.startsWith('<svg')).toBe(true);
    for (const name of [
      'batch lines completed/s',
      'interactive completed/s',
      'busy capacity %',
      'interactive share %',
      'batch submitted',
    ]) {
      expect(panel.svg).toContain(name);
    }
  });

  it('shows the batch in the live table and the plain line', () => {
    const r = withBatch();
    const progress: RunProgress = {
      elapsedS: 6,
      durationS: 10,
      outstanding: 1,
      phase: 'running',
      admin: new AdminPoller([], 'x', () => 0),
      tenants: [],
      batch: {
        ...r.batch!,
        status: 'in_progress',
        requestCounts: { total: 40, completed: 24, failed: 0 },
      },
    };
    expect(batchLine(progress)).toBe('in_progress 24/40 completed 0 failed (bulk batch_x)');
    expect(renderTable(progress, 'x').at(-1)).toBe(`batch: ${batchLine(progress)}`);
    expect(renderPlain(progress, 'x')).toMatch(/\| batch in_progress 24\/40 completed/);
  });
});

/**
 * A fake Batch API: uploads and creates answer (or fail with `uploadStatus`), a batch stays
 * in_progress for ever and counts one line per poll; cancel answers cancelling.
 */
async function fakeBatchApi(uploadStatus = 200) {
  const calls: string[] = [];
  let polls = 0;
  let multipart = '';
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      calls.push(`${req.method} ${req.url} ${req.headers.authorization}`);
      const json = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      const batch = (status: string, completed: number) => ({
        id: 'batch_fake',
        object: 'batch',
        status,
        created_at: Math.floor(Date.now() / 1_000),
        request_counts: { total: 20, completed, failed: 0 },
        output_file_id: null,
        error_file_id: null,
      });
      if (req.url === '/v1/files') {
        multipart = Buffer.concat(chunks).toString('utf8');
        if (uploadStatus !== 200) return json(uploadStatus, { error: { message: 'no redis' } });
        return json(200, { id: 'file-in', object: 'file', purpose: 'batch' });
      }
      if (req.url === '/v1/batches') return json(200, batch('validating', 0));
      if (req.url === '/v1/batches/batch_fake') return json(200, batch('in_progress', ++polls));
      if (req.url === '/v1/batches/batch_fake/cancel') return json(200, batch('cancelling', polls));
      return json(404, {});
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, calls, server, multipart: () => multipart };
}

describe('the batch driver', () => {
  let server: Server | undefined;
  afterEach(async () => {
    await new Promise((resolve) => server?.close(resolve));
    server = undefined;
  });

  const driver = (url: string, durationS: number, signal?: AbortSignal) => {
    const s = scenario(1, 20);
    s.batch!.poll_ms = 50;
    s.batch!.drain_s = 0.3;
    s.batch!.at_s = 0.1;
    const t0 = performance.now();
    return new BatchDriver({
      scenario: s,
      targets: [url],
      model: 'sim-model',
      clock: () => performance.now() - t0,
      wallAtZeroMs: Date.now(),
      durationS,
      ...(signal ? { signal } : {}),
    });
  };

  it('uploads the file as multipart, polls until the deadline, then cancels the batch', async () => {
    const api = await fakeBatchApi();
    server = api.server;
    const started = Date.now();
    const result = await driver(api.url, 0.5).run();
    const took = Date.now() - started;
    // Deadline: duration 0.5 s + drain 0.3 s.
    expect(took).toBeGreaterThanOrEqual(750);
    expect(took).toBeLessThan(2_000);
    expect(result).toMatchObject({
      id: 'batch_fake',
      inputFileId: 'file-in',
      status: 'cancelling',
      timedOut: true,
      cancelledByRunner: true,
      errors: [],
    });
    expect(result.endedS).toBeUndefined();
    expect(result.output).toBeUndefined();
    expect(result.submittedS).toBeGreaterThan(0.09); // at_s 0.1 (timers are ms-coarse)
    // Polled every 50 ms for ~0.7 s: bounded, and counts recorded per poll.
    expect(result.polls).toBeGreaterThan(5);
    expect(result.polls).toBeLessThan(30);
    expect(result.samples.at(-1)?.status).toBe('cancelling');
    expect(api.calls[0]).toBe('POST /v1/files Bearer fg-dev-free');
    expect(api.calls[1]).toBe('POST /v1/batches Bearer fg-dev-free');
    expect(api.calls.at(-1)).toBe('POST /v1/batches/batch_fake/cancel Bearer fg-dev-free');
    expect(api.multipart()).toContain('name="purpose"');
    expect(api.multipart()).toContain('"custom_id":"line-01"');
  });

  it('stops at once on the external stop, and still cancels', async () => {
    const api = await fakeBatchApi();
    server = api.server;
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 300);
    const started = Date.now();
    const result = await driver(api.url, 30, stop.signal).run();
    expect(Date.now() - started).toBeLessThan(1_500);
    expect(result).toMatchObject({ timedOut: false, cancelledByRunner: true });
    expect(api.calls.at(-1)).toMatch(/cancel/);
  });

  it('records a failed upload (e.g. a gateway without redis:) and ends', async () => {
    const api = await fakeBatchApi(501);
    server = api.server;
    const result = await driver(api.url, 5).run();
    expect(result.status).toBe('submit_failed');
    expect(result.errors[0]).toMatch(/POST \/v1\/files: HTTP 501/);
    expect(result.id).toBeUndefined();
    expect(api.calls).toHaveLength(1);
  });
});
