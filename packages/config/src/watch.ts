import { type StatWatcher, statSync, unwatchFile, watchFile } from 'node:fs';
import { ConfigError, loadConfigFile } from './load.js';
import type { FairgateConfig } from './schema.js';

export interface ConfigWatcherEvents {
  /** A new valid config is in force. */
  onReload?: (config: FairgateConfig, previous: FairgateConfig) => void;
  /** A changed file was refused; the previous config stays in force. */
  onRejected?: (error: ConfigError) => void;
}

/**
 * Holds the config in force and reloads it when the file changes. A bad
 * reload is refused and the old config kept. Polls the file's stat (robust to
 * editors and ConfigMap updates that replace the file by rename).
 */
export class ConfigWatcher {
  #current: FairgateConfig;
  #watcher: StatWatcher | undefined;
  /** Stat of the file as last read (good or bad): a change is a difference from it. */
  private seenStat: { mtimeMs: number; size: number };

  constructor(
    readonly path: string,
    private readonly events: ConfigWatcherEvents = {},
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {
    this.seenStat = this.#stat();
    this.#current = loadConfigFile(path, env);
  }

  #stat(): { mtimeMs: number; size: number } {
    try {
      const { mtimeMs, size } = statSync(this.path);
      return { mtimeMs, size };
    } catch {
      return { mtimeMs: 0, size: -1 };
    }
  }

  get current(): FairgateConfig {
    return this.#current;
  }

  start(intervalMs = 250): void {
    if (this.#watcher) return;
    this.#watcher = watchFile(
      this.path,
      { interval: intervalMs, persistent: false },
      (now, before) => {
        if (now.mtimeMs !== before.mtimeMs || now.size !== before.size) this.reload();
      },
    );
  }

  stop(): void {
    if (!this.#watcher) return;
    unwatchFile(this.path);
    this.#watcher = undefined;
  }

  /** Re-reads the file now; returns true when the new config took effect. */
  reload(): boolean {
    this.seenStat = this.#stat();
    try {
      const next = loadConfigFile(this.path, this.env);
      const previous = this.#current;
      this.#current = next;
      this.events.onReload?.(next, previous);
      return true;
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      this.events.onRejected?.(error);
      return false;
    }
  }
}
