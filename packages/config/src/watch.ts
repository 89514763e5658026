import { statSync } from 'node:fs';
import { stat } from 'node:fs/promises';
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
 * reload is refused and the old config kept, as is one that changes the pools' names, their
 * discovery or `auth.jwt` (all built at start). Polls the file's stat (robust to
 * editors and ConfigMap updates that replace the file by rename).
 */
export class ConfigWatcher {
  #current: FairgateConfig;
  #timer: NodeJS.Timeout | undefined;
  #checking = false;
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

  /**
   * Polls the file's stat every `intervalMs` and reloads when it differs from
   * the stat taken when the config in force was read. (fs.watchFile compares
   * with its own previous poll, so a write landing before its first poll would
   * go unnoticed.)
   */
  start(intervalMs = 250): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => void this.#check(), intervalMs);
    this.#timer.unref();
  }

  async #check(): Promise<void> {
    if (this.#checking) return;
    this.#checking = true;
    try {
      const now = await stat(this.path).catch(() => undefined);
      const changed = now
        ? now.mtimeMs !== this.seenStat.mtimeMs || now.size !== this.seenStat.size
        : this.seenStat.size !== -1;
      if (changed && this.#timer) this.reload();
    } finally {
      this.#checking = false;
    }
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Re-reads the file now; returns true when the new config took effect. */
  reload(): boolean {
    this.seenStat = this.#stat();
    try {
      const next = loadConfigFile(this.path, this.env);
      const previous = this.#current;
      const pools = (c: FairgateConfig) => c.pools.map((pool) => pool.name).join(', ');
      if (pools(next) !== pools(previous)) {
        // Each pool runs its own scheduler, pods and leader: they are built at start.
        throw new ConfigError(
          `invalid config ${this.path}: pools: a reload cannot add, remove or rename pools (in force: ${pools(previous)}; in the file: ${pools(next)}); restart the replicas to change them`,
          'pools',
        );
      }
      const discovery = (c: FairgateConfig) =>
        JSON.stringify(c.pools.map((pool) => pool.discovery ?? null));
      if (discovery(next) !== discovery(previous)) {
        // A pool's discovery source (its DNS name, its Service) runs from start.
        throw new ConfigError(
          `invalid config ${this.path}: discovery: a reload cannot change where pods are discovered; restart the replicas to change it`,
          'discovery',
        );
      }
      const jwt = (c: FairgateConfig) => JSON.stringify(c.auth?.jwt ?? null);
      if (jwt(next) !== jwt(previous)) {
        // The JWT verifier (its JWKS, its cache of the issuer's keys) is built at start.
        throw new ConfigError(
          `invalid config ${this.path}: auth.jwt: a reload cannot change JWT authentication; restart the replicas to change it`,
          'auth.jwt',
        );
      }
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
