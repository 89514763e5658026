import { Resolver } from 'node:dns/promises';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findExecutable } from './paths.js';
import { freePort } from './ports.js';
import { type ManagedProcess, spawnManaged, waitUntil } from './processes.js';

/** A real DNS server (Debian's dnsmasq) answering from a hosts file the test rewrites. */
export interface DnsServerHandle {
  /** `127.0.0.1:<port>`, for a discovery section's `servers`. */
  readonly server: string;
  readonly process: ManagedProcess;
  /**
   * Makes `name` resolve to exactly `addresses` (A records), and returns once the server
   * answers so: the hosts file is rewritten and dnsmasq reloads it on SIGHUP.
   */
  setRecords(name: string, addresses: readonly string[]): Promise<void>;
  stop(): Promise<void>;
}

export const DNSMASQ_MISSING_HELP =
  'install dnsmasq (Debian: apt-get install dnsmasq-base); .ci/run installs it';

export function findDnsmasq(): string | undefined {
  return findExecutable('dnsmasq', ['/usr/sbin', '/sbin']);
}

/**
 * Starts dnsmasq on a free port of 127.0.0.1 with no upstream, no /etc/hosts and no cache:
 * it answers only from its own hosts file, with TTL 0, so every query sees the last edit.
 */
export async function startDnsServer(
  options: { srv?: ReadonlyArray<{ name: string; target: string; port: number }> } = {},
): Promise<DnsServerHandle> {
  const bin = findDnsmasq();
  if (!bin) throw new Error(`dnsmasq not found: ${DNSMASQ_MISSING_HELP}`);
  const dir = mkdtempSync(join(tmpdir(), 'fairgate-dns-'));
  const hostsFile = join(dir, 'hosts');
  writeFileSync(hostsFile, '');
  const port = await freePort();
  const child = spawnManaged({
    name: `dnsmasq:${port}`,
    command: bin,
    args: [
      '--keep-in-foreground',
      '--no-daemon',
      `--port=${port}`,
      '--listen-address=127.0.0.1',
      '--bind-interfaces',
      '--no-resolv',
      // Every name is local: one it does not hold is NXDOMAIN, not REFUSED.
      '--local=/#/',
      '--no-hosts',
      '--no-poll',
      '--cache-size=0',
      '--local-ttl=0',
      `--addn-hosts=${hostsFile}`,
      `--pid-file=${join(dir, 'pid')}`,
      // SRV records are fixed at start (a SIGHUP rereads only the hosts file).
      ...(options.srv ?? []).map((r) => `--srv-host=${r.name},${r.target},${r.port}`),
      '--user=',
      '--log-facility=-',
    ],
  });
  const server = `127.0.0.1:${port}`;
  const resolver = new Resolver({ timeout: 500, tries: 1 });
  resolver.setServers([server]);
  const answers = async (name: string): Promise<string[]> => {
    try {
      return (await resolver.resolve4(name)).sort();
    } catch {
      return [];
    }
  };
  await waitUntil(
    `dnsmasq on ${server}`,
    async () => {
      try {
        await resolver.resolve4('ready.invalid');
      } catch (error) {
        // NXDOMAIN (ENOTFOUND): the server answers.
        return (error as NodeJS.ErrnoException).code === 'ENOTFOUND';
      }
      return true;
    },
    { process: child, timeoutMs: 10_000 },
  );
  const records = new Map<string, readonly string[]>();
  return {
    server,
    process: child,
    async setRecords(name, addresses) {
      records.set(name, addresses);
      const lines = [...records].flatMap(([host, list]) => list.map((a) => `${a} ${host}`));
      writeFileSync(hostsFile, `${lines.join('\n')}\n`);
      process.kill(child.pid, 'SIGHUP');
      const want = [...addresses].sort().join(',');
      await waitUntil(
        `dnsmasq to answer ${name} -> [${want}]`,
        async () => (await answers(name)).join(',') === want,
        {
          process: child,
          timeoutMs: 5_000,
        },
      );
    },
    async stop() {
      await child.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
