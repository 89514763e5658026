/**
 * bench:waiting's upstream: a node:http server on 127.0.0.1 in a worker thread (its own event
 * loop, so the client's thousands of sockets do not delay its clocks). It answers an
 * OpenAI-shaped SSE stream after `holdMs` (or, in hold mode, once told to go) and records per
 * request its arrival, its finish and the sequence number the client put in `user`.
 */
import { Worker } from 'node:worker_threads';
import { timeLimit } from './harness/stack.js';

/** The worker (CommonJS). In: {mode}, {reset}, {go}, {report}, {close}; out: {port}, {report}. */
const SOURCE = String.raw`
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
let holding = false, held = [], arrivals = [], finishes = [], running = 0;
const created = Math.floor(Date.now() / 1000);
const event = (o) => 'data: ' + JSON.stringify(o) + '\n\n';
const base = { id: 'chatcmpl-bench', object: 'chat.completion.chunk', created, model: 'bench-model' };
const chunk = (delta, finish) =>
  event({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null });
const body = chunk({ role: 'assistant', content: '' }, null) + chunk({ content: 'ok' }, null) +
  chunk({ content: '.' }, 'stop');
const usage = event({ ...base, choices: [], usage: { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 } });
function respond(res, seq, includeUsage) {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  res.end(body + (includeUsage ? usage : '') + 'data: [DONE]\n\n');
  running--;
  finishes.push(seq, performance.now());
}
const server = http.createServer((req, res) => {
  if (req.method === 'GET') {
    if (req.url === '/health') return res.end('ok');
    if (req.url === '/metrics') {
      return res.end('vllm:num_requests_running{model_name="bench-model"} ' + running +
        '\nvllm:num_requests_waiting{model_name="bench-model"} 0' +
        '\nvllm:kv_cache_usage_perc{model_name="bench-model"} 0\n');
    }
    if (req.url === '/v1/models') {
      res.setHeader('content-type', 'application/json');
      return res.end(JSON.stringify({ object: 'list', data: [{ id: 'bench-model', object: 'model' }] }));
    }
    res.statusCode = 404;
    return res.end();
  }
  const at = performance.now();
  const parts = [];
  req.on('data', (c) => parts.push(c));
  req.on('end', () => {
    let request = {};
    try { request = JSON.parse(Buffer.concat(parts).toString('utf8')); } catch {}
    const seq = Number(String(request.user ?? 'seq-NaN').slice(4));
    const includeUsage = request.stream_options?.include_usage === true;
    arrivals.push(seq, at);
    running++;
    if (holding) held.push([res, seq, includeUsage]);
    else setTimeout(respond, workerData.holdMs, res, seq, includeUsage);
  });
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => parentPort.postMessage({ port: server.address().port }));
parentPort.on('message', (m) => {
  if (m.mode) holding = m.mode === 'hold';
  if (m.reset) { arrivals = []; finishes = []; }
  if (m.go) {
    holding = false;
    const now = held; held = [];
    for (const [res, seq, includeUsage] of now) respond(res, seq, includeUsage);
  }
  if (m.report) parentPort.postMessage({ report: { arrivals, finishes } });
  if (m.close) { server.closeAllConnections(); server.close(() => process.exit(0)); }
});
`;

/** Arrivals and finishes as flat [seq, ms, seq, ms, ...]. */
type Arrivals = { arrivals: number[]; finishes: number[] };
export type WaitingUpstream = Awaited<ReturnType<typeof startWaitingUpstream>>;

export async function startWaitingUpstream(holdMs: number) {
  // No loader flags: the worker runs plain CommonJS.
  const worker = new Worker(SOURCE, { eval: true, workerData: { holdMs }, execArgv: [] });
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('error', reject);
    worker.once('message', (m: { port: number }) => resolve(m.port));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    send: (message: Record<string, unknown>) => worker.postMessage(message),
    report: () =>
      new Promise<Arrivals>((resolve) => {
        const onMessage = (m: { report?: Arrivals }) => {
          if (!m.report) return;
          worker.off('message', onMessage);
          resolve(m.report);
        };
        worker.on('message', onMessage);
        worker.postMessage({ report: true });
      }),
    close: async () => {
      worker.postMessage({ close: true });
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      await Promise.race([exited, timeLimit(2_000)]);
      await worker.terminate();
    },
  };
}
