import { readFileSync, writeFileSync } from 'node:fs';
import { appEntry, spawnManaged, writeGatewayConfig } from '@fairgate/testkit';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';

function runGateway(args: string[]) {
  const child = spawnManaged({
    name: 'fairgate-cli',
    command: process.execPath,
    args: [appEntry('gateway'), ...args],
  });
  return child.exit.then(({ code }) => ({ code, logs: child.logs() }));
}

describe('fairgate CLI', () => {
  it('refuses to start on a bad config, naming the key', async () => {
    const path = writeGatewayConfig({ pods: [{ name: 'pod-a', url: 'http://127.0.0.1:9' }] });
    const config = parse(readFileSync(path, 'utf8'));
    config.tenants[1].weight = -3;
    writeFileSync(path, stringify(config));
    const { code, logs } = await runGateway(['--config', path, '--port', '0']);
    expect(code).toBe(2);
    expect(logs).toContain('tenants[1].weight');
  });

  it.each([
    [['--port', '0'], '--config is required'],
    [['--config', '/x.yaml', '--port', 'eighty'], '--port must be an integer'],
    [['--config', '/x.yaml', '--bogus'], "Unknown option '--bogus'"],
    [['--config', '/nonexistent/fairgate.yaml'], '/nonexistent/fairgate.yaml'],
  ])('%j exits 2 saying %s', async (args, message) => {
    const { code, logs } = await runGateway(args);
    expect(code).toBe(2);
    expect(logs).toContain(message);
  });
});
