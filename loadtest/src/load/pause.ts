import { setTimeout as sleep } from 'node:timers/promises';

/** Sleeps `ms`, or less when `signal` aborts first: true if the whole pause passed. */
export async function pause(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  if (signal?.aborted) return false;
  try {
    await sleep(ms, undefined, signal ? { signal } : {});
    return true;
  } catch {
    return false;
  }
}
