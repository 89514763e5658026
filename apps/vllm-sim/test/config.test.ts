import { describe, expect, it } from 'vitest';
import { ConfigError, DEFAULT_CONFIG, envName, helpText, parseCli } from '../src/config.js';

function config(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const parsed = parseCli(argv, env);
  if (parsed.help) throw new Error('unexpected --help');
  return parsed.config;
}

function configError(argv: string[], env: NodeJS.ProcessEnv = {}): ConfigError {
  try {
    parseCli(argv, env);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected a ConfigError');
}

describe('parseCli', () => {
  it('uses the documented defaults', () => {
    expect(config([])).toEqual(DEFAULT_CONFIG);
    expect(DEFAULT_CONFIG).toMatchObject({
      port: 8000,
      host: '127.0.0.1',
      alphaMs: 8,
      blockSize: 16,
      outputLenMode: 'max',
      eosAfter: 0,
      maxLoras: 0,
      maxCpuLoras: 0,
      loraModules: [],
      loraLoadMs: 50,
    });
  });

  it('reads every flag, and a flag beats its environment variable', () => {
    const parsed = config(
      [
        '--port=0',
        '--alpha-ms',
        '20',
        '--beta-ms',
        '0.5',
        '--gamma-ms',
        '1e-3',
        '--max-num-seqs',
        '4',
        '--output-len-mode',
        'random',
        '--fail-429-rate',
        '0.25',
        '--reset-after-tokens',
        '3',
      ],
      { FAIRGATE_SIM_ALPHA_MS: '99', FAIRGATE_SIM_MODEL: 'from-env' },
    );
    expect(parsed).toMatchObject({
      port: 0,
      alphaMs: 20,
      betaMs: 0.5,
      gammaMs: 0.001,
      maxNumSeqs: 4,
      outputLenMode: 'random',
      fail429Rate: 0.25,
      resetAfterTokens: 3,
      model: 'from-env',
    });
  });

  it('names env variables FAIRGATE_SIM_<FLAG>', () => {
    expect(envName('alpha-ms')).toBe('FAIRGATE_SIM_ALPHA_MS');
    expect(config([], { FAIRGATE_SIM_FAIL_429_RATE: '1' }).fail429Rate).toBe(1);
  });

  it.each([
    [['--alpha-ms', 'fast'], 'alpha-ms'],
    [['--max-num-seqs', '2.5'], 'max-num-seqs'],
    [['--max-num-seqs', '0'], 'max-num-seqs'],
    [['--fail-rate', '1.5'], 'fail-rate'],
    [['--port', '70000'], 'port'],
    [['--output-len-mode', 'sometimes'], 'output-len-mode'],
    [['--no-such-flag', '1'], 'no-such-flag'],
    [['--alpha-ms'], 'alpha-ms'],
    [['--kv-blocks', '10', '--max-model-len', '4096'], 'kv-blocks'],
    [['--max-loras', '1', '--lora-modules', 'a'], 'lora-modules'],
    [['--max-loras', '1', '--lora-modules', 'a=/x', 'a=/y'], 'lora-modules'],
    [['--lora-modules', 'a=/x'], 'lora-modules'],
    [['--max-cpu-loras', '2'], 'max-cpu-loras'],
    [['--max-loras', '4', '--max-cpu-loras', '2'], 'max-cpu-loras'],
    [['--lora-load-ms', '-1'], 'lora-load-ms'],
  ])('refuses %j naming --%s', (argv, flag) => {
    const error = configError(argv);
    expect(error.flag).toBe(flag);
    expect(error.message).toContain(`--${flag}`);
  });

  it.each([
    { argv: ['--lora-modules', 'a=/x', 'b=/y'], what: "vLLM's words after the flag" },
    { argv: ['--lora-modules=a=/x', 'b=/y'], what: 'an inline value and more words' },
    { argv: ['--lora-modules', 'a=/x,b=/y'], what: 'a comma-separated value' },
    { argv: ['--lora-modules', 'a=/x', '--lora-modules', 'b=/y'], what: 'a repeated flag' },
  ])('--lora-modules takes $what', ({ argv }) => {
    const parsed = config(['--max-loras', '2', ...argv, '--seed', '3']);
    expect(parsed.loraModules).toEqual([
      { name: 'a', path: '/x' },
      { name: 'b', path: '/y' },
    ]);
    expect(parsed.seed).toBe(3);
  });

  it('reads the LoRA flags from the environment', () => {
    const parsed = config([], {
      FAIRGATE_SIM_MAX_LORAS: '2',
      FAIRGATE_SIM_MAX_CPU_LORAS: '3',
      FAIRGATE_SIM_LORA_MODULES: 'a=/x b=/y',
      FAIRGATE_SIM_LORA_LOAD_MS: '5',
    });
    expect(parsed).toMatchObject({ maxLoras: 2, maxCpuLoras: 3, loraLoadMs: 5 });
    expect(parsed.loraModules.map((module) => module.name)).toEqual(['a', 'b']);
  });

  it('names the environment variable a bad value came from', () => {
    const error = configError([], { FAIRGATE_SIM_STALL_MS: '-1' });
    expect(error.flag).toBe('stall-ms');
    expect(error.message).toContain('FAIRGATE_SIM_STALL_MS');
  });

  it('--help lists every flag with its env variable', () => {
    expect(parseCli(['--help'])).toEqual({ help: true });
    const help = helpText();
    for (const flag of [
      'port',
      'host',
      'model',
      'alpha-ms',
      'beta-ms',
      'gamma-ms',
      'max-num-seqs',
      'kv-blocks',
      'block-size',
      'max-model-len',
      'max-waiting',
      'seed',
      'output-len-mode',
      'fail-rate',
      'fail-429-rate',
      'stall-ms',
      'reset-after-tokens',
      'max-loras',
      'max-cpu-loras',
      'lora-modules',
      'lora-load-ms',
    ]) {
      expect(help).toContain(`--${flag} `);
      expect(help).toContain(envName(flag));
    }
  });
});
