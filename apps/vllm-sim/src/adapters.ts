import { randomUUID } from 'node:crypto';
import type { LoraModule } from './config.js';

/**
 * The LoRA adapters the pod serves, as vLLM's OpenAIServingModels (with --enable-lora and
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING): registered at start (--lora-modules) or by
 * POST /v1/load_lora_adapter, listed by /v1/models, selected by a request's `model`, removed
 * by POST /v1/unload_lora_adapter. Messages, types and status codes are vLLM's.
 *
 * Registered is not the same as in memory: vLLM never unregisters an adapter to make room;
 * its engine holds the --max-cpu-loras most recently used ones and loads an evicted one
 * again when a batch needs it (see AdapterCache). A load waits `loadMs`, then puts the
 * adapter in the engine's memory. Operations on one name are serialised, as vLLM's
 * per-name lock does.
 */
export interface LoraAdapter {
  name: string;
  path: string;
}

/** What the registry needs of the engine: its adapter memory. */
export interface AdapterMemory {
  loadAdapter(name: string): boolean;
  unloadAdapter(name: string): boolean;
}

/**
 * vLLM's error body, `{"error":{"message","type","param","code"}}`, whose `code` is the HTTP
 * status as an integer and `type` a class name (NotFoundError, InvalidUserInput, ...).
 */
export class VllmError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = 'VllmError';
  }

  toBody() {
    return {
      error: { message: this.message, type: this.type, param: this.param, code: this.status },
    };
  }
}

/** vLLM's answer to a request naming a model it does not serve. */
export function modelNotFound(model: string): VllmError {
  return new VllmError(404, 'NotFoundError', `The model \`${model}\` does not exist.`, 'model');
}

/**
 * The request's model, checked as vLLM checks it on every endpoint: none or the served model
 * runs without adapter (null), a registered LoRA adapter with it (returned), anything else
 * is 404.
 */
export function adapterOf(
  model: string | null | undefined,
  servedModel: string,
  adapters: Pick<LoraAdapters, 'has'> | null,
): string | null {
  if (!model || model === servedModel) return null;
  if (adapters?.has(model)) return model;
  throw modelNotFound(model);
}

export class LoraAdapters {
  private readonly adapters = new Map<string, LoraAdapter>();
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(
    private readonly memory: AdapterMemory,
    private readonly loadMs: number,
    private readonly wait: (ms: number) => Promise<void> = (ms) =>
      new Promise((resolve) => setTimeout(resolve, ms)),
  ) {}

  /** Registered adapters in registration order. */
  list(): LoraAdapter[] {
    return [...this.adapters.values()];
  }

  has(name: string): boolean {
    return this.adapters.has(name);
  }

  /** An adapter of --lora-modules: registered and in memory before the pod serves. */
  registerAtStart(module: LoraModule): void {
    this.memory.loadAdapter(module.name);
    this.register(module.name, module.path);
  }

  /** POST /v1/load_lora_adapter: the success text, or a VllmError. */
  async load(body: unknown): Promise<string> {
    const request = fields(body, ['lora_name', 'lora_path'], ['load_inplace']);
    const name = request.lora_name as string;
    return this.locked(name, async () => {
      const path = request.lora_path as string;
      if (!name || !path) {
        throw new VllmError(
          400,
          'InvalidUserInput',
          "Both 'lora_name' and 'lora_path' must be provided.",
        );
      }
      if (request.load_inplace !== true && this.adapters.has(name)) {
        throw new VllmError(
          400,
          'InvalidUserInput',
          `The lora adapter '${name}' has already been loaded. If you want to load the adapter ` +
            "in place, set 'load_inplace' to True.",
        );
      }
      await this.wait(this.loadMs);
      this.memory.loadAdapter(name);
      this.register(name, path);
      return `Success: LoRA adapter '${name}' added successfully.`;
    });
  }

  /** POST /v1/unload_lora_adapter: the success text, or a VllmError. */
  async unload(body: unknown): Promise<string> {
    const name = fields(body, ['lora_name'], []).lora_name as string;
    return this.locked(name, async () => {
      if (!name) {
        throw new VllmError(
          400,
          'InvalidUserInput',
          "'lora_name' needs to be provided to unload a LoRA adapter.",
        );
      }
      if (!this.adapters.has(name)) {
        throw new VllmError(404, 'NotFoundError', `The lora adapter '${name}' cannot be found.`);
      }
      this.memory.unloadAdapter(name);
      this.adapters.delete(name);
      return `Success: LoRA adapter '${name}' removed successfully.`;
    });
  }

  private register(name: string, path: string): void {
    // A reload in place keeps the adapter's place in the listing (a Python dict update).
    this.adapters.set(name, { name, path });
  }

  /** Runs `operation` after every earlier operation on `name` has settled. */
  private async locked<T>(name: string, operation: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(name) ?? Promise.resolve();
    const run = previous.then(operation, operation);
    const settled = run.catch(() => {});
    this.locks.set(name, settled);
    try {
      return await run;
    } finally {
      if (this.locks.get(name) === settled) this.locks.delete(name);
    }
  }
}

/**
 * The body's fields as vLLM's pydantic model checks them: required strings, optional
 * booleans. A body that is no object or a field of the wrong type is FastAPI's validation
 * error (400 "Bad Request", param `body.<field>`; the message is shorter than pydantic's).
 */
function fields(
  body: unknown,
  strings: readonly string[],
  booleans: readonly string[],
): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw validationError('body', 'Input should be a valid dictionary or object');
  }
  const record = body as Record<string, unknown>;
  for (const key of strings) {
    if (!(key in record)) throw validationError(`body.${key}`, 'Field required');
    if (typeof record[key] !== 'string')
      throw validationError(`body.${key}`, 'Input should be a valid string');
  }
  for (const key of booleans) {
    if (key in record && typeof record[key] !== 'boolean')
      throw validationError(`body.${key}`, 'Input should be a valid boolean');
  }
  return record;
}

export function validationError(param: string, message: string): VllmError {
  return new VllmError(400, 'Bad Request', `1 validation error:\n  ${param}: ${message}`, param);
}

/** vLLM's ModelPermission of a model card. */
export function modelPermission(created: number) {
  return {
    id: `modelperm-${randomUUID().replaceAll('-', '')}`,
    object: 'model_permission',
    created,
    allow_create_engine: false,
    allow_sampling: true,
    allow_logprobs: true,
    allow_search_indices: false,
    allow_view: true,
    allow_fine_tuning: false,
    organization: '*',
    group: null,
    is_blocking: false,
  };
}
