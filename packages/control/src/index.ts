export {
  type ActionCode,
  type ActionKind,
  type ControllerAction,
  type ControllerConfig,
  type ControllerState,
  type DecreasePolicy,
  type Observation,
  type StepResult,
  step,
  windowSecondsToRead,
} from './aimd.js';
export { type BucketCounts, LatencyHistogram, quantile } from './histogram.js';
export { type DecodedState, decodeState, encodeState, type StateWriter } from './state-codec.js';
export type {
  PodCapacity,
  ResolvedTargets,
  TargetInputs,
  TargetSource,
  TokenMeans,
} from './tuner/capacity.js';
export {
  bootstrap,
  type FilterState,
  type Observation as TunerObservation,
  relativeStd,
  type UpdateOptions,
  type UpdateResult,
} from './tuner/ekf.js';
export {
  addGaugeSample,
  emptyGaugeSums,
  type GaugeSums,
  type ObservationOptions,
  observePeriod,
  type PeriodObservation,
  type PeriodResult,
  type PodCounters,
  type SkipReason,
  type SumCount,
} from './tuner/observations.js';
export {
  analyze,
  chainOccupancy,
  desiredPods,
  iterationMs,
  type LatencyTargets,
  latencies,
  type ModelResult,
  maxRate,
  meanBatchOf,
  type Occupancy,
  type PodParams,
  serviceRate,
  type Workload,
} from './tuner/queueing-model.js';
export {
  INITIAL_SCALE_SIGNAL,
  nextScaleSignal,
  type ScaleSignalConfig,
  type ScaleSignalState,
} from './tuner/scale-signal.js';
export {
  type CapacityReport,
  capacityReport,
  decodePodTuner,
  emptyPodTuner,
  encodePodTuner,
  type ModelReport,
  type ModelTuning,
  type OutcomeRecord,
  outcomeOf,
  type PodPeriod,
  type PodReport,
  type PodTunerSettings,
  type PodTunerState,
  recordOutcome,
  skipPeriod,
  TUNER_OUTCOMES,
  type TuneEvent,
  type TuneResult,
  type TunerOutcome,
  tunePod,
} from './tuner/tuner.js';
export {
  decodeWindow,
  encodeWindow,
  summarizeWindow,
  type WindowCounts,
  type WindowSummary,
} from './window.js';
