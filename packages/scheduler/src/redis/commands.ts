import { type Redis, ReplyError } from 'ioredis';
import { library, type ScriptName, scripts } from '../generated/scripts.js';

export type ScriptArg = string | number;
export type RunScript = (
  name: ScriptName,
  keys: readonly string[],
  args: readonly ScriptArg[],
) => Promise<unknown>;

/**
 * Runs the scheduler's scripts as functions of one Redis function library (FCALL), loaded
 * on first use with FUNCTION LOAD REPLACE. The library's name carries the package version
 * (scripts/build-lua.mjs), so two releases sharing one Redis during a rolling deploy each
 * run their own functions; every replica of one release loads the same code, so REPLACE is
 * idempotent.
 *
 * Redis keeps libraries in its RDB/AOF, but a restart without persistence or a FUNCTION
 * FLUSH drops them. A call refused because its function does not exist loads the library
 * again and is retried once, so the loss is invisible to callers (as ioredis hides NOSCRIPT
 * for EVALSHA). That refusal is recognised by Redis's reply text, the one place this
 * package reads one: Redis gives it no error code of its own ("ERR Function not found";
 * test/redis.test.ts flushes the functions under load). The scripts themselves never fail
 * by error: they return negative codes (src/codes.ts).
 */
export function functionRunner(redis: Redis): RunScript {
  let loading: Promise<void> | undefined;
  let loaded = false;
  const load = (): Promise<void> => {
    loading ??= (
      redis.call('FUNCTION', 'LOAD', 'REPLACE', library.content) as Promise<unknown>
    ).then(
      () => {
        loaded = true;
      },
      (error: unknown) => {
        loading = undefined;
        throw error;
      },
    );
    return loading;
  };

  return async (name, keys, args) => {
    const script = scripts[name];
    if (keys.length !== script.keys) {
      throw new Error(`script ${name} takes ${script.keys} keys, got ${keys.length}`);
    }
    if (!loaded) await load();
    try {
      return await redis.call('FCALL', script.function, script.keys, ...keys, ...args);
    } catch (error) {
      if (!isMissingFunction(error)) throw error;
      loading = undefined;
      await load();
      return redis.call('FCALL', script.function, script.keys, ...keys, ...args);
    }
  };
}

function isMissingFunction(error: unknown): boolean {
  return error instanceof ReplyError && /function not found/i.test((error as Error).message);
}
