import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cpuMicros, rssMb, syscallCounts } from '../bench/harness/proc.js';

describe("the benches' /proc reader", () => {
  it('reads this process: CPU that grows with work, RSS', () => {
    const before = cpuMicros(process.pid);
    // Spin until /proc's 10 ms clock ticks (2 s at most on a machine that starves us).
    const until = performance.now() + 2_000;
    while (cpuMicros(process.pid) === before && performance.now() < until) {}
    expect(cpuMicros(process.pid)).toBeGreaterThan(before);
    expect(rssMb(process.pid)).toBeGreaterThan(10);
  });

  it('counts each write system call', () => {
    const file = join(tmpdir(), `fairgate-proc-${process.pid}.txt`);
    const fd = openSync(file, 'w');
    try {
      const before = syscallCounts(process.pid);
      for (let i = 0; i < 50; i++) writeSync(fd, 'x');
      const after = syscallCounts(process.pid);
      // Other threads of this process (the runner's) may write meanwhile: at least ours.
      expect(after.writes - before.writes).toBeGreaterThanOrEqual(50);
      expect(after.reads).toBeGreaterThanOrEqual(before.reads);
    } finally {
      closeSync(fd);
      rmSync(file, { force: true });
    }
  });

  it('answers NaN for a process that is gone or not given', async () => {
    const child = spawn(process.execPath, ['-e', '']);
    const pid = child.pid as number;
    await once(child, 'exit');
    // Reaped by the exit event: its /proc entry is gone.
    expect(cpuMicros(pid)).toBeNaN();
    expect(cpuMicros(undefined)).toBeNaN();
    expect(syscallCounts(pid)).toEqual({ reads: Number.NaN, writes: Number.NaN });
    expect(syscallCounts(undefined)).toEqual({ reads: Number.NaN, writes: Number.NaN });
  });
});
