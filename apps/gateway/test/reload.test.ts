import { readFileSync, writeFileSync } from 'node:fs';
import {
  type AppHandle,
  sha256Hex,
  startSim,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { type RunningGateway, startGateway } from '../src/index.js';

describe('hot reload', () => {
  let sim: AppHandle;
  let gateway: RunningGateway;
  let configPath: string;
  const logs: string[] = [];

  const ask = (key: string) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: 1,
      }),
    }).then(async (r) => {
      await r.arrayBuffer();
      return r.status;
    });

  const edit = (change: (config: Record<string, any>) => void) => {
    const config = parse(readFileSync(configPath, 'utf8')) as Record<string, any>;
    change(config);
    writeFileSync(configPath, stringify(config));
  };

  beforeAll(async () => {
    sim = await startSim({ args: { 'alpha-ms': 1, model: 'sim-model' } });
    configPath = writeGatewayConfig({ pods: [{ name: 'pod-a', url: sim.url }] });
    gateway = await startGateway({
      configPath,
      port: 0,
      replicaId: 'reload',
      log: (line) => logs.push(line),
    });
  });
  afterAll(async () => {
    await gateway?.close(1_000);
    await sim?.stop();
  });

  it('takes a new tenant and new weights without a restart', async () => {
    expect(await ask(TEST_KEYS.extra)).toBe(401);
    edit((config) => {
      config.tenants.push({ id: 'extra', api_key_sha256: [sha256Hex(TEST_KEYS.extra)], weight: 5 });
    });
    await expect.poll(() => ask(TEST_KEYS.extra), { timeout: 3_000, interval: 50 }).toBe(200);
    await expect
      .poll(
        async () =>
          (await gateway.deps.pools.first.scheduler.snapshot()).tenants.find(
            (t) => t.tenant === 'extra',
          )?.weight,
      )
      .toBe(5);
  });

  it('refuses a bad reload, names the key and keeps serving with the old config', async () => {
    edit((config) => {
      config.tenants[0].weight = 0;
    });
    await expect
      .poll(() => logs.some((l) => l.includes('refused') && l.includes('tenants[0].weight')))
      .toBe(true);
    expect(await ask(TEST_KEYS.paying)).toBe(200);
    expect(await ask(TEST_KEYS.extra)).toBe(200);
    expect(gateway.deps.config().tenants[0]?.weight).toBe(2);
  });
});
