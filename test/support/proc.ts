import { readFileSync } from 'node:fs';

/** A process's resident set in kB (/proc/<pid>/status VmRSS). */
export function rssKb(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Number(line?.replace(/\D+/g, '') ?? Number.NaN);
}

/**
 * Runs `work` while sampling the process's RSS every 2 ms: its result, the RSS before, and
 * the most it grew by meanwhile (kB).
 */
export async function rssGrowthDuring<T>(
  pid: number,
  work: () => Promise<T>,
): Promise<{ result: T; baselineKb: number; growthKb: number }> {
  const baselineKb = rssKb(pid);
  let peak = baselineKb;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssKb(pid));
  }, 2);
  try {
    const result = await work();
    return { result, baselineKb, growthKb: peak - baselineKb };
  } finally {
    clearInterval(sampler);
  }
}
