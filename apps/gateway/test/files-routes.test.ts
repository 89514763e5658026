import { TEST_KEYS } from '@fairgate/testkit';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGatewayApp } from '../src/app.js';
import type { GatewayDeps } from '../src/context.js';
import { type GatewayStack, startGatewayStack } from './fixture.js';

const MAX_FILE_BYTES = 4_000;
const MAX_TENANT_BYTES = 6_000;
const MAX_LINES = 5;

/** A valid batch input file of `count` chat requests. */
function batchInput(count: number, prefix = 'req'): string {
  return Array.from({ length: count }, (_, i) =>
    JSON.stringify({
      custom_id: `${prefix}-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: 'sim-model', messages: [{ role: 'user', content: `hello ${i}` }] },
    }),
  ).join('\n');
}

describe('the Files API', () => {
  let stack: GatewayStack;
  let deps: GatewayDeps;
  let baseURL: string;
  let paying: OpenAI;
  let free: OpenAI;

  /** A raw request to the gateway under test. */
  const call = (path: string, init: RequestInit = {}, key: string = TEST_KEYS.paying) =>
    fetch(`${baseURL}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${key}`, ...init.headers },
    });

  const upload = (
    content: string | Buffer,
    fields: Record<string, string> = {},
    key: string = TEST_KEYS.paying,
  ) => {
    const form = new FormData();
    form.set('purpose', 'batch');
    for (const [name, value] of Object.entries(fields)) form.set(name, value);
    form.set('file', new Blob([content]), 'input.jsonl');
    return call('/v1/files', { method: 'POST', body: form }, key);
  };

  const errorOf = async (response: Response) =>
    ((await response.json()) as { error: Record<string, unknown> }).error;

  beforeAll(async () => {
    stack = await startGatewayStack({
      replicaId: 'files',
      withRedis: true,
      config: {
        sections: {
          batch: {
            max_file_bytes: MAX_FILE_BYTES,
            max_tenant_bytes: MAX_TENANT_BYTES,
            max_lines: MAX_LINES,
          },
        },
      },
    });
    // A replica with `redis:` serves the Files API on its Redis (batch/batch-api.ts).
    ({ deps, url: baseURL } = stack.gateway);
    expect(deps.files).toBeDefined();
    const client = (apiKey: string) =>
      new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0 });
    paying = client(TEST_KEYS.paying);
    free = client(TEST_KEYS.free);
  });

  afterAll(async () => {
    await stack?.close();
  });

  beforeEach(async () => {
    for (const tenant of [paying, free]) {
      for await (const file of tenant.files.list()) await tenant.files.delete(file.id);
    }
  });

  it('uploads, retrieves, lists, reads and deletes a file through the OpenAI SDK', async () => {
    const text = `${batchInput(3)}\n`;
    const created = await paying.files.create({
      file: await toFile(Buffer.from(text), 'input.jsonl'),
      purpose: 'batch',
    });
    expect(created).toEqual({
      id: expect.stringMatching(/^file-[0-9a-f]{24}$/),
      object: 'file',
      bytes: Buffer.byteLength(text),
      created_at: expect.any(Number),
      filename: 'input.jsonl',
      purpose: 'batch',
      status: 'processed',
      expires_at: null,
      status_details: null,
    });
    expect(Math.abs(created.created_at - Date.now() / 1_000)).toBeLessThan(60);
    expect(await paying.files.retrieve(created.id)).toEqual(created);
    const page = await paying.files.list();
    expect(page.data).toEqual([created]);
    expect(page.has_more).toBe(false);
    const content = await paying.files.content(created.id);
    expect(content.headers.get('content-type')).toBe('application/octet-stream');
    expect(await content.text()).toBe(text);
    expect(await paying.files.delete(created.id)).toEqual({
      id: created.id,
      object: 'file',
      deleted: true,
    });
    await expect(paying.files.retrieve(created.id)).rejects.toMatchObject({ status: 404 });
    expect((await paying.files.list()).data).toEqual([]);
  });

  it('pages the list (newest first, asc on request, the SDK following the cursor)', async () => {
    const created = [];
    for (let i = 0; i < 3; i += 1) {
      created.push(
        await paying.files.create({
          file: await toFile(Buffer.from(batchInput(1, `p${i}`)), `in-${i}.jsonl`),
          purpose: 'batch',
        }),
      );
      await new Promise((resolve) => setTimeout(resolve, 5)); // distinct creation ms
    }
    const newestFirst = created.map((file) => file.id).reverse();
    const first = await paying.files.list({ limit: 2 });
    expect(first.data.map((file) => file.id)).toEqual(newestFirst.slice(0, 2));
    expect(first.has_more).toBe(true);
    const all: string[] = [];
    for await (const file of paying.files.list({ limit: 1 })) all.push(file.id);
    expect(all).toEqual(newestFirst);
    const ascending = await paying.files.list({ order: 'asc' });
    expect(ascending.data.map((file) => file.id)).toEqual(created.map((file) => file.id));
    const raw = await (await call(`/v1/files?limit=1&after=${newestFirst[0]}`)).json();
    expect(raw).toEqual({
      object: 'list',
      data: [expect.objectContaining({ id: newestFirst[1] })],
      first_id: newestFirst[1],
      last_id: newestFirst[1],
      has_more: true,
    });
    expect((await paying.files.list({ purpose: 'batch_output' })).data).toEqual([]);
  });

  it.each([
    ['purpose=assistants', 'purpose'],
    ['order=up', 'order'],
    ['limit=0', 'limit'],
    ['limit=10001', 'limit'],
    ['limit=ten', 'limit'],
    ['limit=1.5', 'limit'],
  ])('answers 400 naming the parameter for GET /v1/files?%s', async (query, param) => {
    const response = await call(`/v1/files?${query}`);
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({ type: 'invalid_request_error', param });
  });

  it('answers 400 with the line number for a bad JSONL file, and stores nothing', async () => {
    const text = `${batchInput(2)}\n\n{"custom_id": "x", "method": "GET"}\n`;
    const response = await upload(text);
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toEqual({
      type: 'invalid_request_error',
      message: 'Line 4: method must be "POST"',
      param: 'file',
      code: 'invalid_method',
    });
    expect((await paying.files.list()).data).toEqual([]);
    // Through the SDK: the same 400.
    await expect(
      paying.files.create({ file: await toFile(Buffer.from('nope'), 'x.jsonl'), purpose: 'batch' }),
    ).rejects.toMatchObject({ status: 400, code: 'invalid_json', param: 'file' });
  });

  it.each([
    ['too many lines', batchInput(MAX_LINES + 1), 'too_many_lines'],
    ['an empty file', '\n\n', 'empty_file'],
    ['bytes that are not UTF-8', Buffer.from([0xff, 0xfe, 0x0a]), 'invalid_encoding'],
  ])('answers 400 for %s', async (_name, content, code) => {
    const response = await upload(content);
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({ param: 'file', code });
  });

  it('answers 400 for a purpose other than batch, a missing file, a body not multipart', async () => {
    const wrongPurpose = await upload(batchInput(1), { purpose: 'fine-tune' });
    expect(wrongPurpose.status).toBe(400);
    expect(await errorOf(wrongPurpose)).toMatchObject({ param: 'purpose' });
    const form = new FormData();
    form.set('purpose', 'batch');
    const noFile = await call('/v1/files', { method: 'POST', body: form });
    expect(noFile.status).toBe(400);
    expect(await errorOf(noFile)).toMatchObject({ param: 'file' });
    const asText = new FormData();
    asText.set('purpose', 'batch');
    asText.set('file', batchInput(1)); // a plain field, not an upload
    expect(await errorOf(await call('/v1/files', { method: 'POST', body: asText }))).toMatchObject({
      param: 'file',
    });
    const json = await call('/v1/files', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(json.status).toBe(400);
    const garbled = await call('/v1/files', {
      method: 'POST',
      headers: { 'content-type': 'multipart/form-data; boundary=b' },
      body: 'not multipart at all',
    });
    expect(garbled.status).toBe(400);
    expect(await errorOf(garbled)).toMatchObject({ code: 'invalid_multipart' });
  });

  it('answers 413 for a file past batch.max_file_bytes, and for a body far past it', async () => {
    // Within the multipart allowance: refused on the file's own size.
    const overFile = await upload('x'.repeat(MAX_FILE_BYTES + 1));
    expect(overFile.status).toBe(413);
    expect(await errorOf(overFile)).toMatchObject({ code: 'file_too_large' });
    // Past it: refused on the Content-Length, before the body is read.
    const overBody = await upload('x'.repeat(MAX_FILE_BYTES + 100 * 1024));
    expect(overBody.status).toBe(413);
    expect(await errorOf(overBody)).toMatchObject({
      code: 'file_too_large',
      message: expect.stringContaining('batch.max_file_bytes'),
    });
    // Chunked (no Content-Length): refused while it streams in.
    const chunks = [batchInput(1), 'x'.repeat(MAX_FILE_BYTES + 100 * 1024)];
    const chunked = await call('/v1/files', {
      method: 'POST',
      headers: { 'content-type': 'multipart/form-data; boundary=b' },
      body: new ReadableStream({
        pull(controller) {
          const chunk = chunks.shift();
          if (chunk === undefined) controller.close();
          else controller.enqueue(new TextEncoder().encode(chunk));
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(chunked.status).toBe(413);
    expect((await paying.files.list()).data).toEqual([]);
  });

  it("answers 429 past the tenant's batch.max_tenant_bytes, storing nothing", async () => {
    const line = batchInput(1);
    const big = `${line}\n${' '.repeat(3_500 - line.length)}`; // blank padding: still valid
    expect((await upload(big)).status).toBe(200);
    const refused = await upload(big);
    expect(refused.status).toBe(429);
    expect(await errorOf(refused)).toMatchObject({ code: 'tenant_quota_exceeded' });
    expect((await paying.files.list()).data).toHaveLength(1);
    // The quota is the tenant's own: another tenant still has room.
    expect((await upload(big, {}, TEST_KEYS.free)).status).toBe(200);
  });

  it("answers 404 for another tenant's file, and for an unknown one", async () => {
    const file = await paying.files.create({
      file: await toFile(Buffer.from(batchInput(1)), 'mine.jsonl'),
      purpose: 'batch',
    });
    for (const path of [`/v1/files/${file.id}`, `/v1/files/${file.id}/content`]) {
      const response = await call(path, {}, TEST_KEYS.free);
      expect(response.status).toBe(404);
      expect(await errorOf(response)).toMatchObject({
        message: `No such File object: ${file.id}`,
        code: 'not_found',
      });
    }
    expect((await call(`/v1/files/${file.id}`, { method: 'DELETE' }, TEST_KEYS.free)).status).toBe(
      404,
    );
    await expect(free.files.retrieve(file.id)).rejects.toMatchObject({ status: 404 });
    expect((await free.files.list()).data).toEqual([]);
    expect((await paying.files.retrieve(file.id)).id).toBe(file.id); // still there
    for (const id of ['file-000000000000000000000000', 'anything']) {
      expect((await call(`/v1/files/${id}`)).status).toBe(404);
      expect((await call(`/v1/files/${id}/content`)).status).toBe(404);
      expect((await call(`/v1/files/${id}`, { method: 'DELETE' })).status).toBe(404);
    }
  });

  it('answers 401 without an API key or with an unknown one, on every route', async () => {
    const routes: Array<[string, string]> = [
      ['POST', '/v1/files'],
      ['GET', '/v1/files'],
      ['GET', '/v1/files/file-000000000000000000000000'],
      ['GET', '/v1/files/file-000000000000000000000000/content'],
      ['DELETE', '/v1/files/file-000000000000000000000000'],
    ];
    for (const [method, path] of routes) {
      const anonymous = await fetch(`${baseURL}${path}`, { method });
      expect(anonymous.status).toBe(401);
      expect((await call(path, { method }, 'wrong-key')).status).toBe(401);
    }
    // An oversized upload without a key: 401, not 413.
    const form = new FormData();
    form.set('file', new Blob(['x'.repeat(MAX_FILE_BYTES + 100 * 1024)]), 'big.jsonl');
    expect((await fetch(`${baseURL}/v1/files`, { method: 'POST', body: form })).status).toBe(401);
  });

  it('answers 501 batch_unavailable (after authentication) without a file store', async () => {
    const embedded = createGatewayApp({ ...deps, files: undefined });
    const auth = { authorization: `Bearer ${TEST_KEYS.paying}` };
    for (const [method, path] of [
      ['GET', '/v1/files'],
      ['POST', '/v1/files'],
      ['GET', '/v1/files/file-000000000000000000000000'],
      ['DELETE', '/v1/files/file-000000000000000000000000'],
    ] as const) {
      const response = await embedded.request(path, { method, headers: auth });
      expect(response.status).toBe(501);
      expect(await errorOf(response)).toMatchObject({ code: 'batch_unavailable' });
    }
    expect((await embedded.request('/v1/files')).status).toBe(401);
  });
});
