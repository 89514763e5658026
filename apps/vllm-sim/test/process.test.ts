import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { type AppHandle, appEntry, startSim } from '@fairgate/testkit';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { jsonPost, metricValue } from './http.js';

// The built CLI as a process: readiness line, signals, stdin watchdog, flags, /metrics.
const entry = appEntry('vllm-sim');
const children: ChildProcess[] = [];
const handles: AppHandle[] = [];

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});
afterAll(async () => {
  await Promise.all(handles.map((handle) => handle.stop()));
});

function run(args: string[], env: Record<string, string> = {}): ChildProcess {
  const child = spawn(process.execPath, [entry, ...args], {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  return child;
}

async function output(stream: NodeJS.ReadableStream | null, until: RegExp): Promise<string> {
  let text = '';
  if (!stream) throw new Error('no stream');
  for await (const chunk of stream) {
    text += String(chunk);
    if (until.test(text)) return text;
  }
  return text;
}

async function exitOf(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const [code] = (await once(child, 'exit')) as [number | null];
  return code;
}

describe('fairgate-sim CLI', () => {
  it('prints one readiness line with the real port, serves, and exits 0 on SIGTERM', async () => {
    const child = run(['--port', '0', '--alpha-ms', '1']);
    const line = await output(child.stdout, /\n/);
    const match = /^fairgate-sim listening on http:\/\/127\.0\.0\.1:(\d+)\n$/.exec(line);
    expect(match, line).not.toBeNull();
    const health = await fetch(`http://127.0.0.1:${match![1]}/health`);
    expect(health.status).toBe(200);
    child.kill('SIGTERM');
    expect(await exitOf(child)).toBe(0);
  });

  it('exits 0 on SIGINT even with a stream in flight', async () => {
    const child = run(['--port', '0', '--alpha-ms', '50']);
    const port = /:(\d+)\n/.exec(await output(child.stdout, /\n/))![1];
    const response = await fetch(
      `http://127.0.0.1:${port}/v1/completions`,
      jsonPost({ model: 'fairgate-sim', prompt: 'p', max_tokens: 1000, stream: true }),
    );
    const reader = response.body!.getReader();
    await reader.read();
    child.kill('SIGINT');
    expect(await exitOf(child)).toBe(0);
    await reader.read().catch(() => null);
  });

  it('with FAIRGATE_EXIT_WITH_STDIN=1 exits when its stdin ends (parent gone)', async () => {
    const child = run(['--port', '0'], { FAIRGATE_EXIT_WITH_STDIN: '1' });
    await output(child.stdout, /\n/);
    child.stdin!.end();
    expect(await exitOf(child)).toBe(0);
  });

  it('exits 2 naming the flag on a bad value or an unknown flag', async () => {
    const bad = run(['--alpha-ms', 'soon']);
    const badErr = output(bad.stderr, /help/);
    expect(await exitOf(bad)).toBe(2);
    expect(await badErr).toContain('--alpha-ms');

    const unknown = run(['--alpah-ms', '3']);
    const unknownErr = output(unknown.stderr, /help/);
    expect(await exitOf(unknown)).toBe(2);
    expect(await unknownErr).toContain('--alpah-ms');

    const fromEnv = run([], { FAIRGATE_SIM_MAX_NUM_SEQS: '0' });
    const envErr = output(fromEnv.stderr, /help/);
    expect(await exitOf(fromEnv)).toBe(2);
    expect(await envErr).toContain('FAIRGATE_SIM_MAX_NUM_SEQS');
  });

  it('--help documents the flags and exits 0', async () => {
    const child = run(['--help']);
    const text = output(child.stdout, /stdin ends/);
    expect(await exitOf(child)).toBe(0);
    expect(await text).toContain('--reset-after-tokens');
  });
});

/** A strict reader of the Prometheus text exposition format (version 0.0.4). */
interface Family {
  type: string;
  samples: Array<{ name: string; labels: Record<string, string>; value: number }>;
}

function parsePrometheus(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const sampleLine = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$/;
  const labelPair = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('# HELP ')) continue;
    if (line.startsWith('# TYPE ')) {
      const [name, type] = line.slice(7).split(' ');
      expect(['counter', 'gauge', 'histogram', 'summary', 'untyped']).toContain(type);
      families.set(name!, { type: type!, samples: [] });
      continue;
    }
    expect(line.startsWith('#'), `unexpected comment: ${line}`).toBe(false);
    const match = sampleLine.exec(line);
    expect(match, `not a sample line: ${line}`).not.toBeNull();
    const [, name, labelText = '', valueText] = match!;
    const labels: Record<string, string> = {};
    let rest = labelText;
    while (rest.length > 0) {
      const pair = labelPair.exec(rest);
      expect(pair, `bad labels in: ${line}`).not.toBeNull();
      labels[pair![1]!] = pair![2]!;
      rest = rest.slice(pair![0].length);
    }
    const value =
      valueText === '+Inf' ? Infinity : valueText === '-Inf' ? -Infinity : Number(valueText);
    expect(Number.isNaN(value) && valueText !== 'NaN', `bad value: ${line}`).toBe(false);
    const family = families.get(name!) ?? families.get(name!.replace(/_(bucket|sum|count)$/, ''));
    expect(family, `sample before its # TYPE: ${line}`).toBeDefined();
    family!.samples.push({ name: name!, labels, value });
  }
  return families;
}

describe('LoRA', () => {
  it('--max-loras and --lora-modules as vLLM takes them: adapters served, gauge exported', async () => {
    const handle = await startSim({
      args: [
        '--alpha-ms',
        '1',
        '--model',
        'base',
        '--max-loras',
        '2',
        '--lora-modules',
        'a=/ad/a',
        'b=/ad/b',
      ],
    });
    handles.push(handle);
    const models = (await (await fetch(`${handle.url}/v1/models`)).json()) as {
      data: Array<{ id: string; root: string; parent: string | null }>;
    };
    expect(models.data.map(({ id, root, parent }) => [id, root, parent])).toEqual([
      ['base', 'base', null],
      ['a', '/ad/a', 'base'],
      ['b', '/ad/b', 'base'],
    ]);
    const loaded = await fetch(
      `${handle.url}/v1/load_lora_adapter`,
      jsonPost({ lora_name: 'c', lora_path: '/ad/c' }),
    );
    expect(loaded.status).toBe(200);
    expect(loaded.headers.get('content-type')).toBeNull();
    expect(await loaded.text()).toBe("Success: LoRA adapter 'c' added successfully.");
    const answer = await fetch(
      `${handle.url}/v1/completions`,
      jsonPost({ model: 'c', prompt: 'p', max_tokens: 2 }),
    );
    expect(((await answer.json()) as { model: string }).model).toBe('c');
    const families = parsePrometheus(await (await fetch(`${handle.url}/metrics`)).text());
    const lora = families.get('vllm:lora_requests_info');
    expect(lora?.type).toBe('gauge');
    expect(lora!.samples.map((sample) => sample.labels)).toContainEqual({
      max_lora: '2',
      running_lora_adapters: 'c',
      waiting_lora_adapters: 'c',
    });
  });
});

describe('idle engine', () => {
  it('uses no CPU while idle (no busy loop, no periodic timer)', async () => {
    const handle = await startSim({ args: { 'alpha-ms': 1 } });
    handles.push(handle);
    // Some work first, so an engine loop that forgot to stop would still be spinning.
    await fetch(
      `${handle.url}/v1/completions`,
      jsonPost({ model: 'fairgate-sim', prompt: 'warm up', max_tokens: 20 }),
    );
    const cpu = async () =>
      metricValue(await (await fetch(`${handle.url}/metrics`)).text(), 'process_cpu_seconds_total');
    const before = await cpu();
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const used = (await cpu()) - before;
    // One /metrics scrape costs a few ms; a spinning loop would burn ~1 s.
    expect(used).toBeLessThan(0.05);
  });
});

describe('/metrics', () => {
  it('parses as Prometheus text and has every vLLM name with model_name (info gauges without)', async () => {
    const handle = await startSim({ args: { 'alpha-ms': 2, model: 'metrics-model' } });
    handles.push(handle);
    await fetch(
      `${handle.url}/v1/chat/completions`,
      jsonPost({
        model: 'metrics-model',
        messages: [{ role: 'user', content: 'hello' }],
        max_tokens: 4,
      }),
    );
    const response = await fetch(`${handle.url}/metrics`);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const families = parsePrometheus(await response.text());

    const expected: Record<string, string> = {
      'vllm:num_requests_running': 'gauge',
      'vllm:num_requests_waiting': 'gauge',
      'vllm:kv_cache_usage_perc': 'gauge',
      'vllm:time_to_first_token_seconds': 'histogram',
      'vllm:inter_token_latency_seconds': 'histogram',
      'vllm:time_per_output_token_seconds': 'histogram',
      'vllm:e2e_request_latency_seconds': 'histogram',
      'vllm:prompt_tokens_total': 'counter',
      'vllm:generation_tokens_total': 'counter',
      'vllm:request_success_total': 'counter',
      'vllm:num_preemptions_total': 'counter',
      'vllm:prefix_cache_queries_total': 'counter',
      'vllm:prefix_cache_hits_total': 'counter',
      fairgate_sim_iteration_lag_seconds: 'histogram',
    };
    for (const [name, type] of Object.entries(expected)) {
      const family = families.get(name);
      expect(family?.type, name).toBe(type);
      expect(family!.samples.length, name).toBeGreaterThan(0);
      for (const sample of family!.samples) expect(sample.labels.model_name).toBe('metrics-model');
    }
    // Every other vLLM family has model_name too, except the info gauges: vLLM labels those
    // with configuration only (CacheConfig fields and engine; LoRA adapters).
    for (const [name, family] of families) {
      if (!name.startsWith('vllm:') || name.endsWith('_info')) continue;
      for (const sample of family.samples) expect(sample.labels.model_name, name).toBeDefined();
    }
    const cacheConfig = families.get('vllm:cache_config_info');
    expect(cacheConfig?.type).toBe('gauge');
    expect(cacheConfig!.samples).toEqual([
      {
        name: 'vllm:cache_config_info',
        labels: expect.objectContaining({ block_size: '16', num_gpu_blocks: '8192', engine: '0' }),
        value: 1,
      },
    ]);
    expect(cacheConfig!.samples[0]!.labels).not.toHaveProperty('model_name');

    const ttft = families.get('vllm:time_to_first_token_seconds')!.samples;
    const buckets = ttft.filter((s) => s.name.endsWith('_bucket'));
    const counts = buckets.map((s) => s.value);
    expect(counts).toEqual([...counts].sort((a, b) => a - b)); // cumulative
    expect(buckets.at(-1)!.labels.le).toBe('+Inf');
    expect(ttft.find((s) => s.name.endsWith('_count'))!.value).toBe(1);
    const success = families.get('vllm:request_success_total')!.samples;
    expect(success.find((s) => s.labels.finished_reason === 'length')!.value).toBe(1);
    expect(families.get('vllm:generation_tokens_total')!.samples[0]!.value).toBe(4);
  });
});
