export {
  ConfigError,
  DEFAULT_CONFIG,
  envName,
  helpText,
  type OutputLenMode,
  type ParsedCli,
  parseCli,
  type SimConfig,
  validateConfig,
} from './config.js';
export {
  type DriverObserver,
  type DriverOptions,
  EngineDriver,
  realTimerHost,
  type TimerHost,
} from './driver.js';
export {
  Engine,
  type EngineConfig,
  type EngineObserver,
  type Iteration,
  QueueFullError,
  type SequenceListener,
  type SequenceSpec,
  type SequenceState,
  type SequenceView,
} from './engine.js';
export { type GenerationPlan, planGeneration } from './generation.js';
export { hashPromptBlocks, type KvBlock, KvBlockPool } from './kv.js';
export { type FaultKind, SimMetrics } from './metrics.js';
export { createRng, deriveSeed } from './random.js';
export {
  createSimServer,
  type LastTraceContext,
  type SimServer,
  type SimServerOptions,
} from './server.js';
export { PseudoText } from './text.js';
