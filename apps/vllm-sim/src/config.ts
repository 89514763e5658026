import { parseArgs } from 'node:util';
import { z } from 'zod';

/**
 * Flags and environment of `fairgate-sim`, validated into one {@link SimConfig}.
 *
 * Precedence: command-line flag, then the environment variable
 * `FAIRGATE_SIM_<FLAG_IN_UPPER_SNAKE>` (e.g. FAIRGATE_SIM_ALPHA_MS), then the default.
 * A bad value refuses to start with a {@link ConfigError} naming the flag (main exits 2).
 *
 * The default timing parameters resemble one small GPU serving an ~8B model: 8 ms of fixed
 * per-iteration overhead, 0.05 ms of compute per token and 0.0001 ms of KV-cache reads per
 * cached token (the order of magnitude of the WVA queueing analyzer's defaults).
 */
export type OutputLenMode = 'max' | 'random';

/** A LoRA adapter served from the start (vLLM's `--lora-modules name=path`). */
export interface LoraModule {
  name: string;
  path: string;
}

export interface SimConfig {
  port: number;
  host: string;
  model: string;
  alphaMs: number;
  betaMs: number;
  gammaMs: number;
  maxNumSeqs: number;
  kvBlocks: number;
  blockSize: number;
  maxModelLen: number;
  maxWaiting: number;
  defaultMaxTokens: number;
  seed: number;
  outputLenMode: OutputLenMode;
  /** Every answer ends at EOS after at most this many tokens (0 = never early). */
  eosAfter: number;
  failRate: number;
  fail429Rate: number;
  stallMs: number;
  resetAfterTokens: number;
  /** Most distinct LoRA adapters in one batch; 0 = LoRA off. */
  maxLoras: number;
  /** Adapters the engine holds in memory (LRU); 0 = as many as maxLoras. */
  maxCpuLoras: number;
  /** Adapters registered at start. */
  loraModules: LoraModule[];
  /** Time to load an adapter (a load request, or a batch needing one not in memory). */
  loraLoadMs: number;
  /** Size of the vectors /v1/embeddings and /pooling answer. */
  embeddingDim: number;
  /** Bytes of an audio upload that make one audio token (50 tokens per second of audio). */
  audioBytesPerToken: number;
}

export class ConfigError extends Error {
  constructor(
    readonly flag: string,
    message: string,
  ) {
    super(`--${flag}: ${message}`);
    this.name = 'ConfigError';
  }
}

/** Parses a flag's text; a failed parse names the expectation, not zod's internals. */
interface FlagSpec {
  key: keyof SimConfig;
  flag: string;
  /** Placeholder shown in --help. */
  arg: string;
  /** Takes several values, as words after the flag or repeated flags (joined by spaces). */
  list?: boolean;
  help: string;
  fallback: SimConfig[keyof SimConfig];
  schema: z.ZodType<SimConfig[keyof SimConfig], string>;
}

const NUMBER_TEXT = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

function numberFlag(min: number, max = Number.POSITIVE_INFINITY, integer = false) {
  const what = integer ? 'an integer' : 'a number';
  const range = max === Number.POSITIVE_INFINITY ? `>= ${min}` : `in [${min}, ${max}]`;
  return z
    .string()
    .trim()
    .regex(NUMBER_TEXT, `expected ${what} ${range}`)
    .transform(Number)
    .pipe(
      z
        .number()
        .refine((n) => !integer || Number.isInteger(n), `expected ${what} ${range}`)
        .refine((n) => n >= min && n <= max, `expected ${what} ${range}`),
    );
}

const intFlag = (min: number, max?: number) => numberFlag(min, max, true);

/** `name=path` items separated by spaces or commas; names unique. */
const loraModulesFlag = z.string().transform((text, ctx) => {
  const modules: LoraModule[] = [];
  for (const item of text.split(/[\s,]+/).filter((word) => word.length > 0)) {
    const match = /^([^=]+)=([^=]+)$/.exec(item);
    if (!match) {
      ctx.addIssue({ code: 'custom', message: `expected name=path items, got ${item}` });
      return z.NEVER;
    }
    const [, name, path] = match as unknown as [string, string, string];
    if (modules.some((module) => module.name === name)) {
      ctx.addIssue({ code: 'custom', message: `adapter ${name} named twice` });
      return z.NEVER;
    }
    modules.push({ name, path });
  }
  return modules;
});

const FLAGS: readonly FlagSpec[] = [
  {
    key: 'port',
    flag: 'port',
    arg: 'N',
    help: 'TCP port to listen on; 0 picks a free port',
    fallback: 8000,
    schema: intFlag(0, 65535),
  },
  {
    key: 'host',
    flag: 'host',
    arg: 'HOST',
    help: 'address to bind',
    fallback: '127.0.0.1',
    schema: z.string().trim().min(1, 'expected a host name or address'),
  },
  {
    key: 'model',
    flag: 'model',
    arg: 'NAME',
    help: 'served model id (GET /v1/models, response "model")',
    fallback: 'fairgate-sim',
    schema: z.string().trim().min(1, 'expected a non-empty model name'),
  },
  {
    key: 'alphaMs',
    flag: 'alpha-ms',
    arg: 'MS',
    help: 'fixed overhead of every engine iteration',
    fallback: 8,
    schema: numberFlag(0),
  },
  {
    key: 'betaMs',
    flag: 'beta-ms',
    arg: 'MS',
    help: 'compute time per processed token',
    fallback: 0.05,
    schema: numberFlag(0),
  },
  {
    key: 'gammaMs',
    flag: 'gamma-ms',
    arg: 'MS',
    help: 'KV-cache read time per token in the context',
    fallback: 0.0001,
    schema: numberFlag(0),
  },
  {
    key: 'maxNumSeqs',
    flag: 'max-num-seqs',
    arg: 'N',
    help: 'most sequences running in one batch',
    fallback: 256,
    schema: intFlag(1),
  },
  {
    key: 'kvBlocks',
    flag: 'kv-blocks',
    arg: 'N',
    help: 'KV-cache blocks in the pool',
    fallback: 8192,
    schema: intFlag(1),
  },
  {
    key: 'blockSize',
    flag: 'block-size',
    arg: 'N',
    help: 'tokens per KV-cache block',
    fallback: 16,
    schema: intFlag(1, 1024),
  },
  {
    key: 'maxModelLen',
    flag: 'max-model-len',
    arg: 'N',
    help: 'context length: prompt + max_tokens must fit',
    fallback: 4096,
    schema: intFlag(2),
  },
  {
    key: 'maxWaiting',
    flag: 'max-waiting',
    arg: 'N',
    help: 'waiting-queue capacity; a new request beyond it gets 429',
    fallback: 1024,
    schema: intFlag(0),
  },
  {
    key: 'defaultMaxTokens',
    flag: 'default-max-tokens',
    arg: 'N',
    help: 'output limit of a chat request naming none (bounded by the context left)',
    fallback: 256,
    schema: intFlag(1),
  },
  {
    key: 'seed',
    flag: 'seed',
    arg: 'N',
    help: 'seed of every pseudo-random draw (text, lengths, faults)',
    fallback: 0,
    schema: intFlag(0, 2 ** 32 - 1),
  },
  {
    key: 'outputLenMode',
    flag: 'output-len-mode',
    arg: 'max|random',
    help: 'max: max_tokens tokens; random: uniform in [max(1,min_tokens), max_tokens]',
    fallback: 'max',
    schema: z.enum(['max', 'random'], 'expected max or random'),
  },
  {
    key: 'eosAfter',
    flag: 'eos-after',
    arg: 'N',
    help: 'every answer stops at EOS after at most N tokens (min_tokens and ignore_eos respected), whatever max_tokens; 0: off',
    fallback: 0,
    schema: intFlag(0),
  },
  {
    key: 'failRate',
    flag: 'fail-rate',
    arg: 'P',
    help: 'fraction of generation requests answered 500',
    fallback: 0,
    schema: numberFlag(0, 1),
  },
  {
    key: 'fail429Rate',
    flag: 'fail-429-rate',
    arg: 'P',
    help: 'fraction of generation requests answered 429',
    fallback: 0,
    schema: numberFlag(0, 1),
  },
  {
    key: 'stallMs',
    flag: 'stall-ms',
    arg: 'MS',
    help: 'delay before a generation response starts (slow first byte)',
    fallback: 0,
    schema: numberFlag(0),
  },
  {
    key: 'resetAfterTokens',
    flag: 'reset-after-tokens',
    arg: 'N',
    help: 'drop the connection after N tokens were sent; 0 = off',
    fallback: 0,
    schema: intFlag(0),
  },
  {
    key: 'maxLoras',
    flag: 'max-loras',
    arg: 'N',
    help: 'LoRA: most distinct adapters in one batch (vLLM --enable-lora --max-loras); 0 = off',
    fallback: 0,
    schema: intFlag(0),
  },
  {
    key: 'maxCpuLoras',
    flag: 'max-cpu-loras',
    arg: 'N',
    help: 'LoRA: adapters held in memory, least recently used evicted; 0 = --max-loras',
    fallback: 0,
    schema: intFlag(0),
  },
  {
    key: 'loraModules',
    flag: 'lora-modules',
    arg: 'NAME=PATH...',
    list: true,
    help: 'LoRA: adapters served from the start (space- or comma-separated, repeatable)',
    fallback: [],
    schema: loraModulesFlag,
  },
  {
    key: 'loraLoadMs',
    flag: 'lora-load-ms',
    arg: 'MS',
    help: 'LoRA: time to load an adapter (load request, or a batch needing an evicted one)',
    fallback: 50,
    schema: numberFlag(0),
  },
  {
    key: 'embeddingDim',
    flag: 'embedding-dim',
    arg: 'N',
    help: 'size of the embedding vectors (a seeded hash of the input)',
    fallback: 16,
    schema: intFlag(1, 65536),
  },
  {
    key: 'audioBytesPerToken',
    flag: 'audio-bytes-per-token',
    arg: 'N',
    help: 'bytes of an audio upload per audio token (640: 16 kHz 16-bit PCM at 50 tokens/s)',
    fallback: 640,
    schema: intFlag(1),
  },
];

export const DEFAULT_CONFIG: SimConfig = Object.fromEntries(
  FLAGS.map((spec) => [spec.key, spec.fallback]),
) as unknown as SimConfig;

export function envName(flag: string): string {
  return `FAIRGATE_SIM_${flag.toUpperCase().replaceAll('-', '_')}`;
}

export type ParsedCli = { help: true } | { help: false; config: SimConfig };

/**
 * Parses argv (without node and script) and the environment. Throws ConfigError on an
 * unknown flag, a missing value or a value out of range.
 */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv = {}): ParsedCli {
  const options = Object.fromEntries(
    FLAGS.map((spec) => [spec.flag, { type: 'string' as const, multiple: spec.list === true }]),
  );
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: joinListWords(argv),
      options: { ...options, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw cliError(error);
  }
  if (values.help === true) return { help: true };

  const config: Record<string, unknown> = {};
  for (const spec of FLAGS) {
    const given = values[spec.flag];
    const fromFlag = Array.isArray(given) ? given.join(' ') : given;
    const text = typeof fromFlag === 'string' ? fromFlag : env[envName(spec.flag)];
    if (text === undefined) {
      config[spec.key] = spec.fallback;
      continue;
    }
    const parsed = spec.schema.safeParse(text);
    if (!parsed.success) {
      const source = typeof fromFlag === 'string' ? '' : ` (from ${envName(spec.flag)})`;
      const reason = parsed.error.issues[0]?.message ?? 'invalid value';
      throw new ConfigError(spec.flag, `${reason}, got ${JSON.stringify(text)}${source}`);
    }
    config[spec.key] = parsed.data;
  }
  return { help: false, config: validateConfig(config as unknown as SimConfig) };
}

/** Cross-field rules; also used by tests and createSimServer for programmatic configs. */
export function validateConfig(config: SimConfig): SimConfig {
  // One sequence of max_model_len tokens must fit in the pool on its own, or a long
  // request could wait forever (vLLM refuses to start in the same situation).
  const blocksForLongest = Math.ceil(config.maxModelLen / config.blockSize);
  if (config.kvBlocks < blocksForLongest) {
    throw new ConfigError(
      'kv-blocks',
      `${config.kvBlocks} blocks of ${config.blockSize} tokens cannot hold one sequence of ` +
        `--max-model-len ${config.maxModelLen} (needs ${blocksForLongest})`,
    );
  }
  if (config.maxLoras === 0) {
    if (config.loraModules.length > 0)
      throw new ConfigError('lora-modules', 'needs --max-loras > 0 (LoRA is off)');
    if (config.maxCpuLoras > 0)
      throw new ConfigError('max-cpu-loras', 'needs --max-loras > 0 (LoRA is off)');
  } else if (config.maxCpuLoras > 0 && config.maxCpuLoras < config.maxLoras) {
    // vLLM: "max_cpu_loras (N) must be >= max_loras (M)".
    throw new ConfigError(
      'max-cpu-loras',
      `${config.maxCpuLoras} must be >= --max-loras ${config.maxLoras}`,
    );
  }
  return config;
}

/**
 * vLLM's list flags take the words after them (`--lora-modules a=/x b=/y`, argparse
 * nargs='+'); node's parseArgs takes one value, so those words are joined into it.
 */
function joinListWords(argv: readonly string[]): string[] {
  const listFlags = new Set(FLAGS.filter((spec) => spec.list).map((spec) => `--${spec.flag}`));
  const args: string[] = [];
  for (let index = 0; index < argv.length; index++) {
    const arg = argv[index]!;
    const name = arg.split('=', 1)[0]!;
    args.push(arg);
    if (!listFlags.has(name)) continue;
    const words: string[] = [];
    while (index + 1 < argv.length && !argv[index + 1]!.startsWith('-')) words.push(argv[++index]!);
    if (words.length === 0) continue;
    if (name === arg) args.push(words.join(' '));
    else args[args.length - 1] = [arg, ...words].join(' ');
  }
  return args;
}

function cliError(error: unknown): ConfigError {
  const message = error instanceof Error ? error.message : String(error);
  // node:util parseArgs names the option in its message: "Unknown option '--nope'..."
  const named = /'(-{1,2}[^'\s]+)/.exec(message);
  const flag = named?.[1]?.replace(/^-+/, '') ?? 'arguments';
  return new ConfigError(flag, message);
}

export function helpText(): string {
  const rows = FLAGS.flatMap((spec) => [
    `${`  --${spec.flag} ${spec.arg}`.padEnd(32)}${spec.help}`,
    `${' '.repeat(32)}default ${JSON.stringify(spec.fallback)}, env ${envName(spec.flag)}`,
  ]);
  return [
    'Usage: fairgate-sim [flags]',
    '',
    'A simulated vLLM pod: continuous batching on the queueing model',
    '  iteration = alpha + sum over the batch of (beta+gamma)*uncached_prompt (prefill)',
    '              or beta + gamma*(prompt+generated) (decode step)',
    'with the OpenAI API, vLLM /metrics and fault injection. See docs/sim.md.',
    '',
    'Flags (a flag beats its environment variable, which beats the default):',
    ...rows,
    `${'  -h, --help'.padEnd(32)}print this help`,
    '',
    'FAIRGATE_EXIT_WITH_STDIN=1 makes the sim exit when its stdin ends.',
  ].join('\n');
}
