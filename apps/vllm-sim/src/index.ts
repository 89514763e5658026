// The library surface for harnesses that drive the sim's engine in process (loadtest's
// tuner benchmark); the sim itself is the `fairgate-sim` binary (src/main.ts).
export {
  Engine,
  type EngineConfig,
  type EngineObserver,
  type Iteration,
  type SequenceListener,
  type SequenceSpec,
  type SequenceState,
  type SequenceView,
} from './engine.js';
export { ITL_BUCKETS, TTFT_BUCKETS } from './metrics.js';
