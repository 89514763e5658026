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
  type ObservationOptions,
  observePeriod,
  type PeriodObservation,
  type PodCounters,
  type SumCount,
} from './tuner/observations.js';
export {
  analyze,
  desiredPods,
  iterationMs,
  type LatencyTargets,
  type ModelResult,
  maxRate,
  type PodParams,
  serviceRate,
  type Workload,
} from './tuner/queueing-model.js';
export {
  type CapacityReport,
  capacityReport,
  decodePodTuner,
  emptyPodTuner,
  encodePodTuner,
  type ModelReport,
  type ModelTuning,
  type PodPeriod,
  type PodReport,
  type PodTunerSettings,
  type PodTunerState,
  type TuneEvent,
  type TuneResult,
  tunePod,
} from './tuner/tuner.js';
export {
  decodeWindow,
  encodeWindow,
  summarizeWindow,
  type WindowCounts,
  type WindowSummary,
} from './window.js';
