import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '@fairgate/testkit';
import { describe, expect, it } from 'vitest';

/** Every descendant of `root` (pid list), from one `ps` snapshot. */
function descendants(root: number): number[] {
  const out = spawnSync('ps', ['-eo', 'pid=,ppid='], { encoding: 'utf8' }).stdout;
  const children = new Map<number, number[]>();
  for (const line of out.trim().split('\n')) {
    const [pid, ppid] = line.trim().split(/\s+/).map(Number);
    if (!pid || ppid === undefined) continue;
    children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  }
  const found: number[] = [];
  const stack = [root];
  while (stack.length > 0) {
    for (const child of children.get(stack.pop()!) ?? []) {
      found.push(child);
      stack.push(child);
    }
  }
  return found;
}

/** Alive and not a zombie. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^\d+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}

/** A tiny stack: one pod, two replicas, one tenant. */
const TINY = `
name: tiny
duration_s: 60
tenants:
  - name: paying
    key_ref: paying
    arrival: { kind: poisson, rate: 10 }
    output_tokens: { median: 40, max: 64 }
stack: { pods: 1, replicas: 2, pod_cap: 16, sim: { alpha_ms: 20, beta_ms: 1, max_num_seqs: 16 } }
`;

/**
 * Clean shutdown: the CLI with --stack (redis-server when installed, a sim and two gateway
 * replicas as its children; built dist/ needed), interrupted with SIGINT mid-run: it exits,
 * writes what it measured, and leaves no process behind.
 */
describe('fairgate-load --stack on SIGINT', () => {
  it('stops every process it started and still writes the report', async () => {
    const out = mkdtempSync(join(tmpdir(), 'fairgate-load-sigint-'));
    const scenario = join(out, 'tiny.yaml');
    writeFileSync(scenario, TINY);
    const cli = spawn(
      process.execPath,
      [
        '--conditions=@fairgate/source',
        '--import',
        'tsx',
        'loadtest/src/load/cli.ts',
        scenario,
        '--stack',
        '--seconds',
        '60',
        '--plain',
        '--out',
        out,
      ],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    cli.stdout.setEncoding('utf8').on('data', (t: string) => {
      output += t;
    });
    cli.stderr.setEncoding('utf8').on('data', (t: string) => {
      output += t;
    });
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      cli.once('exit', (code, signal) => resolve({ code, signal })),
    );
    try {
      const deadline = Date.now() + 45_000;
      while (!/running tiny/.test(output) && Date.now() < deadline && cli.exitCode === null) {
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(output).toMatch(/running tiny/);
      await new Promise((r) => setTimeout(r, 2_500)); // mid-run: requests in flight
      const children = descendants(cli.pid!);
      // redis-server (when installed), the sim and the gateway replica(s).
      expect(children.length, output).toBeGreaterThanOrEqual(2);
      cli.kill('SIGINT');
      const { code, signal } = await Promise.race([
        exited,
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error(`no exit after SIGINT\n${output}`)), 30_000),
        ),
      ]);
      expect(code === 130 || signal === 'SIGINT', `code ${code} signal ${signal}\n${output}`).toBe(
        true,
      );
      const gone = Date.now() + 5_000;
      while (children.some(alive) && Date.now() < gone)
        await new Promise((r) => setTimeout(r, 100));
      expect(children.filter(alive), output).toEqual([]);
      expect(output).toMatch(/SIGINT: stopping/);
      expect(existsSync(join(out, 'report.html')), output).toBe(true);
    } finally {
      if (cli.exitCode === null) cli.kill('SIGKILL');
    }
  }, 90_000);
});
