import { type DnsServerHandle, findDnsmasq, freePort, startDnsServer } from '@fairgate/testkit';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeWithTools } from '../../../test/support/required-tools.js';
import { DnsSource, type DnsSourceOptions } from '../src/discovery/dns-source.js';
import type { DiscoveredPod } from '../src/discovery/pod-source.js';

/** DnsSource against a real DNS server (dnsmasq): A records, SRV records, no records, no server. */
describeWithTools(
  'DnsSource',
  { dnsmasq: findDnsmasq() },
  'apt-get install -y dnsmasq-base',
  () => {
    let dns: DnsServerHandle;
    beforeAll(async () => {
      dns = await startDnsServer({
        srv: [
          { name: '_http._tcp.vllm.test', target: 'a.vllm.test', port: 8001 },
          { name: '_http._tcp.vllm.test', target: 'b.vllm.test', port: 8002 },
        ],
      });
      await dns.setRecords('a.vllm.test', ['10.0.0.1']);
      await dns.setRecords('b.vllm.test', ['10.0.0.2', '10.0.0.3']);
    }, 20_000);
    afterAll(() => dns?.stop());

    const source = (options: Partial<DnsSourceOptions>) =>
      new DnsSource({
        name: '',
        srv: false,
        scheme: 'http',
        refreshMs: 300,
        servers: [dns.server],
        ...options,
      });

    it('lists every A record with the configured port, sorted, and follows an edit', async () => {
      await dns.setRecords('pods.vllm.test', ['10.0.0.9', '10.0.0.10']);
      const pods = source({ name: 'pods.vllm.test', port: 8000 });
      expect(await pods.read()).toEqual([
        { name: '10.0.0.10:8000', url: 'http://10.0.0.10:8000' },
        { name: '10.0.0.9:8000', url: 'http://10.0.0.9:8000' },
      ]);
      await dns.setRecords('pods.vllm.test', ['10.0.0.9']);
      expect((await pods.read()).map((p) => p.name)).toEqual(['10.0.0.9:8000']);
    });

    it('with srv, takes each target with the port of its record', async () => {
      const pods = source({ name: '_http._tcp.vllm.test', srv: true, scheme: 'https' });
      expect(await pods.read()).toEqual([
        { name: '10.0.0.1:8001', url: 'https://10.0.0.1:8001' },
        { name: '10.0.0.2:8002', url: 'https://10.0.0.2:8002' },
        { name: '10.0.0.3:8002', url: 'https://10.0.0.3:8002' },
      ]);
    });

    it('a name with no record is no pod (every pod scaled away)', async () => {
      expect(await source({ name: 'none.vllm.test', port: 8000 }).read()).toEqual([]);
      await dns.setRecords('gone.vllm.test', []);
      expect(await source({ name: 'gone.vllm.test', port: 8000 }).read()).toEqual([]);
    });

    it('a server that does not answer is an error, reported while the source runs, not an empty set', async () => {
      const silent = `127.0.0.1:${await freePort()}`;
      const pods = source({
        name: 'pods.vllm.test',
        port: 8000,
        servers: [silent],
        refreshMs: 150,
      });
      await expect(pods.read()).rejects.toThrow();
      const seen: Array<readonly DiscoveredPod[]> = [];
      const errors: Error[] = [];
      pods.start({ onPods: (p) => seen.push(p), onError: (e) => errors.push(e) });
      await expect.poll(() => errors.length, { timeout: 3_000 }).toBeGreaterThanOrEqual(2);
      await pods.stop();
      expect(seen).toEqual([]);
    });

    it('start reports a set every refresh until stopped', async () => {
      await dns.setRecords('pods.vllm.test', ['10.0.0.9']);
      const pods = source({ name: 'pods.vllm.test', port: 8000, refreshMs: 100 });
      const seen: string[][] = [];
      pods.start({ onPods: (p) => seen.push(p.map((x) => x.name)), onError: () => {} });
      await expect.poll(() => seen.length, { timeout: 3_000 }).toBeGreaterThanOrEqual(3);
      await pods.stop();
      const count = seen.length;
      await new Promise((r) => setTimeout(r, 300));
      expect(seen.length).toBe(count);
      expect(seen[0]).toEqual(['10.0.0.9:8000']);
    });
  },
);
