import {
  type ChatCompletion,
  type Completion,
  parsePrometheusText,
  parseVllmMetrics,
} from '@fairgate/openai';
import { describe, expect, it } from 'vitest';
import type { SimConfig } from '../src/config.js';
import type { SimServer } from '../src/server.js';
import { inProcessSims, jsonPost, metricValues, readSse } from './http.js';

// In-process LoRA API: vLLM's load/unload endpoints, /v1/models, adapter requests, metrics.
const FAST: Partial<SimConfig> = { alphaMs: 1, betaMs: 0.001, gammaMs: 0, loraLoadMs: 0 };
const LORA: Partial<SimConfig> = { ...FAST, model: 'base', maxLoras: 2 };
const sim = inProcessSims(LORA);

const load = (server: SimServer, body: unknown) =>
  server.app.request('/v1/load_lora_adapter', jsonPost(body));
const unload = (server: SimServer, body: unknown) =>
  server.app.request('/v1/unload_lora_adapter', jsonPost(body));

async function models(server: SimServer) {
  const body = (await (await server.app.request('/v1/models')).json()) as {
    object: string;
    data: Array<Record<string, unknown>>;
  };
  return body.data;
}

const chat = (model: string, content = 'hi', extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user' as const, content }],
  max_tokens: 2,
  ...extra,
});

describe('POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM responses)', () => {
  it('load answers 200 with vLLM text and no content-type; unload likewise', async () => {
    const server = sim();
    const loaded = await load(server, { lora_name: 'sql', lora_path: '/adapters/sql' });
    expect(loaded.status).toBe(200);
    expect(loaded.headers.get('content-type')).toBeNull();
    expect(await loaded.text()).toBe("Success: LoRA adapter 'sql' added successfully.");
    expect(server.engine.loadedAdapters).toEqual(['sql']);

    const removed = await unload(server, { lora_name: 'sql' });
    expect(removed.status).toBe(200);
    expect(await removed.text()).toBe("Success: LoRA adapter 'sql' removed successfully.");
    expect(server.engine.loadedAdapters).toEqual([]);
    expect((await models(server)).map((card) => card.id)).toEqual(['base']);
  });

  const LOADED = { lora_name: 'sql', lora_path: '/adapters/sql' };
  it.each([
    {
      what: 'load of a loaded name',
      route: 'load',
      body: LOADED,
      status: 400,
      error: {
        message:
          "The lora adapter 'sql' has already been loaded. If you want to load the adapter in " +
          "place, set 'load_inplace' to True.",
        type: 'InvalidUserInput',
        param: null,
        code: 400,
      },
    },
    {
      what: 'load with an empty name',
      route: 'load',
      body: { lora_name: '', lora_path: '/x' },
      status: 400,
      error: {
        message: "Both 'lora_name' and 'lora_path' must be provided.",
        type: 'InvalidUserInput',
        param: null,
        code: 400,
      },
    },
    {
      what: 'load with an empty path',
      route: 'load',
      body: { lora_name: 'x', lora_path: '' },
      status: 400,
      error: { type: 'InvalidUserInput', code: 400 },
    },
    {
      what: 'load without lora_path',
      route: 'load',
      body: { lora_name: 'x' },
      status: 400,
      error: { type: 'Bad Request', param: 'body.lora_path', code: 400 },
    },
    {
      what: 'load with a non-boolean load_inplace',
      route: 'load',
      body: { lora_name: 'x', lora_path: '/x', load_inplace: 'yes' },
      status: 400,
      error: { type: 'Bad Request', param: 'body.load_inplace', code: 400 },
    },
    {
      what: 'load with bad JSON',
      route: 'load',
      body: '{"lora_name":',
      status: 400,
      error: { type: 'Bad Request', param: 'body', code: 400 },
    },
    {
      what: 'unload of an unknown name',
      route: 'unload',
      body: { lora_name: 'nope' },
      status: 404,
      error: {
        message: "The lora adapter 'nope' cannot be found.",
        type: 'NotFoundError',
        param: null,
        code: 404,
      },
    },
    {
      what: 'unload with an empty name',
      route: 'unload',
      body: { lora_name: '' },
      status: 400,
      error: {
        message: "'lora_name' needs to be provided to unload a LoRA adapter.",
        type: 'InvalidUserInput',
        param: null,
        code: 400,
      },
    },
    {
      what: 'unload without lora_name',
      route: 'unload',
      body: {},
      status: 400,
      error: { type: 'Bad Request', param: 'body.lora_name', code: 400 },
    },
  ])('$what -> $status', async ({ route, body, status, error }) => {
    const server = sim({ loraModules: [{ name: 'sql', path: '/adapters/sql' }] });
    const response = await (route === 'load' ? load : unload)(server, body);
    expect(response.status).toBe(status);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    const json = (await response.json()) as { error: Record<string, unknown> };
    expect(Object.keys(json.error)).toEqual(['message', 'type', 'param', 'code']);
    expect(json.error).toMatchObject(error);
    expect((await models(server)).map((card) => card.id)).toEqual(['base', 'sql']);
  });

  it('load_inplace replaces the path and keeps the adapter in its place', async () => {
    const server = sim({
      loraModules: [
        { name: 'a', path: '/a' },
        { name: 'b', path: '/b' },
      ],
    });
    const response = await load(server, { lora_name: 'a', lora_path: '/a2', load_inplace: true });
    expect(response.status).toBe(200);
    expect((await models(server)).map((card) => [card.id, card.root])).toEqual([
      ['base', 'base'],
      ['a', '/a2'],
      ['b', '/b'],
    ]);
  });

  it('a load waits --lora-load-ms; a second load of the same name waits for it, then fails', async () => {
    const server = sim({ loraLoadMs: 60 });
    const started = performance.now();
    const [first, second] = await Promise.all([
      load(server, { lora_name: 'slow', lora_path: '/slow' }),
      load(server, { lora_name: 'slow', lora_path: '/slow' }),
    ]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(55);
    expect([first.status, second.status]).toEqual([200, 400]);
  });

  it('without --max-loras the LoRA routes do not exist', async () => {
    const server = sim({ maxLoras: 0 });
    expect((await load(server, { lora_name: 'a', lora_path: '/a' })).status).toBe(404);
    expect((await unload(server, { lora_name: 'a' })).status).toBe(404);
  });
});

describe('GET /v1/models with adapters', () => {
  it('lists the base model, then each adapter as vLLM does', async () => {
    const server = sim({ maxModelLen: 2048, loraModules: [{ name: 'sql', path: '/ad/sql' }] });
    await load(server, { lora_name: 'chat', lora_path: '/ad/chat' });
    const data = await models(server);
    expect(
      data.map(({ id, root, parent, max_model_len }) => ({ id, root, parent, max_model_len })),
    ).toEqual([
      { id: 'base', root: 'base', parent: null, max_model_len: 2048 },
      { id: 'sql', root: '/ad/sql', parent: 'base', max_model_len: null },
      { id: 'chat', root: '/ad/chat', parent: 'base', max_model_len: null },
    ]);
    for (const card of data) {
      expect(Object.keys(card)).toEqual([
        'id',
        'object',
        'created',
        'owned_by',
        'root',
        'parent',
        'max_model_len',
        'permission',
      ]);
      expect(card).toMatchObject({ object: 'model', owned_by: 'vllm' });
      expect(card.permission).toEqual([
        expect.objectContaining({ id: expect.stringMatching(/^modelperm-[0-9a-f]{32}$/) }),
      ]);
    }
  });

  it('keeps listing adapters beyond --max-cpu-loras (vLLM evicts from memory only)', async () => {
    const server = sim({ maxLoras: 1, maxCpuLoras: 2 });
    for (const name of ['a', 'b', 'c'])
      await load(server, { lora_name: name, lora_path: `/${name}` });
    expect((await models(server)).map((card) => card.id)).toEqual(['base', 'a', 'b', 'c']);
    expect(server.engine.loadedAdapters).toEqual(['b', 'c']); // a, least recently used, evicted
  });
});

describe('generation with an adapter', () => {
  it.each(['/v1/chat/completions', '/v1/completions'])(
    '%s: an adapter is served under its name; the base model under its own',
    async (path) => {
      const server = sim({ loraModules: [{ name: 'sql', path: '/ad/sql' }] });
      const body = (model: string) =>
        path === '/v1/completions' ? { model, prompt: 'hi', max_tokens: 2 } : chat(model);
      for (const model of ['sql', 'base']) {
        const response = await server.app.request(path, jsonPost(body(model)));
        expect(response.status).toBe(200);
        expect(((await response.json()) as ChatCompletion | Completion).model).toBe(model);
      }
    },
  );

  it('streams chunks carrying the adapter name', async () => {
    const server = sim({ loraModules: [{ name: 'sql', path: '/ad/sql' }] });
    const { chunks } = await readSse(
      await server.app.request(
        '/v1/chat/completions',
        jsonPost(chat('sql', 'q', { stream: true })),
      ),
    );
    expect(chunks.length).toBeGreaterThan(0);
    for (const chunk of chunks) expect(chunk.model).toBe('sql');
  });

  it.each([
    { what: 'an adapter never loaded', model: 'nope', setup: async () => {} },
    {
      what: 'an unloaded adapter',
      model: 'sql',
      setup: (server: SimServer) => unload(server, { lora_name: 'sql' }),
    },
  ])('$what -> vLLM 404 NotFoundError', async ({ model, setup }) => {
    const server = sim({ loraModules: [{ name: 'sql', path: '/ad/sql' }] });
    await setup(server);
    const response = await server.app.request('/v1/chat/completions', jsonPost(chat(model)));
    expect(response.status).toBe(404);
    expect(await response.json()).toEqual({
      error: {
        message: `The model \`${model}\` does not exist.`,
        type: 'NotFoundError',
        param: 'model',
        code: 404,
      },
    });
  });

  it('with LoRA off an unknown model is 404 too, as in vLLM', async () => {
    const server = sim({ maxLoras: 0 });
    const unknown = await server.app.request('/v1/chat/completions', jsonPost(chat('anything')));
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({
      error: {
        message: 'The model `anything` does not exist.',
        type: 'NotFoundError',
        param: 'model',
        code: 404,
      },
    });
    const served = await server.app.request('/v1/chat/completions', jsonPost(chat('base')));
    expect(((await served.json()) as ChatCompletion).model).toBe('base');
  });

  it('the prefix cache is per adapter: the same prompt under another adapter misses', async () => {
    const server = sim({
      loraModules: [
        { name: 'a', path: '/a' },
        { name: 'b', path: '/b' },
      ],
    });
    const prompt = 'x'.repeat(4 * 100);
    const cached = async (model: string) => {
      const response = await server.app.request(
        '/v1/chat/completions',
        jsonPost(chat(model, prompt)),
      );
      const body = (await response.json()) as ChatCompletion;
      return body.usage.prompt_tokens_details?.cached_tokens;
    };
    expect(await cached('a')).toBe(0);
    expect(await cached('a')).toBeGreaterThan(0);
    expect(await cached('b')).toBe(0);
    expect(await cached('base')).toBe(0);
  });
});

describe('LoRA metrics', () => {
  const scrape = async (server: SimServer) => (await server.app.request('/metrics')).text();

  it('vllm:lora_requests_info: no series before the first step, then one per label set', async () => {
    const server = sim({ maxLoras: 3, loraModules: [{ name: 'sql', path: '/ad/sql' }] });
    expect(await scrape(server)).toContain('# TYPE vllm:lora_requests_info gauge');
    expect(metricValues(await scrape(server), 'vllm:lora_requests_info').size).toBe(0);

    const before = Date.now() / 1000;
    await server.app.request('/v1/chat/completions', jsonPost(chat('sql')));
    const series = metricValues(await scrape(server), 'vllm:lora_requests_info');
    // The step that ran the request listed it; the step that finished it listed nothing.
    const busy = series.get(
      '{max_lora="3",running_lora_adapters="sql",waiting_lora_adapters="sql"}',
    );
    const idle = series.get('{max_lora="3",running_lora_adapters="",waiting_lora_adapters=""}');
    expect(series.size).toBe(2);
    expect(busy).toBeGreaterThanOrEqual(before - 0.01);
    expect(idle).toBeGreaterThanOrEqual(busy!);
    expect(idle).toBeLessThanOrEqual(Date.now() / 1000 + 0.01);

    // The gateway's strict parser reads it, and the info gauges add no model.
    const text = await scrape(server);
    expect(
      parsePrometheusText(text).filter((s) => s.name === 'vllm:lora_requests_info'),
    ).toHaveLength(2);
    expect(parseVllmMetrics(text).models).toEqual(['base']);
  });

  it('vllm:lora_requests_info is absent with LoRA off; vllm:cache_config_info is always there', async () => {
    const text = await scrape(sim({ maxLoras: 0, kvBlocks: 1234, blockSize: 32 }));
    expect(text).not.toContain('vllm:lora_requests_info');
    expect(text).toContain(
      '# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig',
    );
    expect(text).toContain('# TYPE vllm:cache_config_info gauge');
    const [labels, value] = [...metricValues(text, 'vllm:cache_config_info')][0]!;
    expect(value).toBe(1);
    expect(labels).toContain('block_size="32"');
    expect(labels).toContain('num_gpu_blocks="1234"');
    expect(labels).toContain('engine="0"');
    expect(labels).not.toContain('model_name');
  });
});
