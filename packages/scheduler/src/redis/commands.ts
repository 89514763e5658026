import type { Redis } from 'ioredis';
import { SCRIPTS_VERSION, type ScriptName, scripts } from '../generated/scripts.js';

/**
 * ioredis command name of a script, versioned so that two releases sharing one Redis during
 * a rolling deploy each run their own scripts. ioredis sends EVALSHA and falls back to EVAL
 * on NOSCRIPT, so a SCRIPT FLUSH or a Redis restart is invisible to callers.
 */
export function commandName(name: ScriptName): string {
  return `fairgate_${SCRIPTS_VERSION.replace(/[^A-Za-z0-9]/g, '_')}_${name}`;
}

export type ScriptArg = string | number;
export type RunScript = (
  name: ScriptName,
  keys: readonly string[],
  args: readonly ScriptArg[],
) => Promise<unknown>;

type DefinedCommand = (...args: ScriptArg[]) => Promise<unknown>;

/** Defines every script on the connection (once) and returns a caller for them. */
export function defineScripts(redis: Redis): RunScript {
  const commands = redis as unknown as Record<string, DefinedCommand | undefined>;
  for (const script of Object.values(scripts)) {
    const name = commandName(script.name);
    if (!commands[name])
      redis.defineCommand(name, { numberOfKeys: script.keys, lua: script.content });
  }
  return (name, keys, args) => {
    const script = scripts[name];
    if (keys.length !== script.keys) {
      throw new Error(`script ${name} takes ${script.keys} keys, got ${keys.length}`);
    }
    const command = commands[commandName(name)] as DefinedCommand;
    return command.call(redis, ...keys, ...args);
  };
}
