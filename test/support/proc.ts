import { readFileSync } from 'node:fs';

/**
 * What a process holds in memory, kB, from /proc/<pid>/status: its whole resident set
 * (`VmRSS`), or its anonymous part alone (`RssAnon`: without the pages of its executable and
 * libraries, which it shares and which only grow as new code first runs).
 */
export type Resident = 'VmRSS' | 'RssAnon';

export function rssKb(pid: number, resident: Resident = 'VmRSS'): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${resident}:`));
  return Number(line?.replace(/\D+/g, '') ?? Number.NaN);
}

/**
 * Runs `work` while sampling the process's resident memory every 2 ms: its result, the
 * memory before, and the most it grew by meanwhile (kB).
 */
export async function rssGrowthDuring<T>(
  pid: number,
  work: () => Promise<T>,
  resident: Resident = 'VmRSS',
): Promise<{ result: T; baselineKb: number; growthKb: number }> {
  const baselineKb = rssKb(pid, resident);
  let peak = baselineKb;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssKb(pid, resident));
  }, 2);
  try {
    const result = await work();
    peak = Math.max(peak, rssKb(pid, resident));
    return { result, baselineKb, growthKb: peak - baselineKb };
  } finally {
    clearInterval(sampler);
  }
}

/**
 * Waits (up to `maxMs`) until the process's resident memory grows by less than `quietKb`
 * over `windowMs`: the code a workload made hot is compiled, the heap at its working size.
 */
export async function settledRss(
  pid: number,
  resident: Resident = 'VmRSS',
  { windowMs = 300, quietKb = 128, maxMs = 10_000 } = {},
): Promise<void> {
  const deadline = Date.now() + maxMs;
  const window = () => new Promise<void>((resolve) => setTimeout(resolve, windowMs));
  while (Date.now() < deadline) {
    const { growthKb } = await rssGrowthDuring(pid, window, resident);
    if (growthKb < quietKb) return;
  }
}
