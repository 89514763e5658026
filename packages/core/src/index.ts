export {
  ADMISSION_POLICIES,
  type AdmissionConfig,
  type AdmissionDecision,
  type AdmissionPolicy,
  DEFAULT_ADMISSION,
  DEFAULT_SATURATION,
  decideAdmission,
  maxPodLoad,
  newestScrapeMs,
  type PodLoad,
  type PoolSignals,
  podPressure,
  poolSaturation,
  type SaturationConfig,
  type ScrapedLoad,
} from './admission.js';
export {
  conservationViolations,
  emptyOutcomes,
  type FlowCounters,
} from './conservation.js';
export { FAIRNESS_POLICIES, type FairnessPolicy, FlowRing, type FlowState } from './drr.js';
export {
  assertInteger,
  assertValidName,
  type Band,
  type PodName,
  type ReplicaId,
  type RequestId,
  type TenantId,
} from './ids.js';
export {
  compareOrderKeys,
  DISPATCH_ORDERS,
  type OrderKey,
  type QueueOrder,
  queueScore,
} from './order.js';
export {
  DROP_REASON_HEADER,
  type DropContext,
  type DropNotice,
  type DropReason,
  type GatewayOutcomeCode,
  isFlowControlDrop,
  type NoticeDropCode,
  noticeDropCode,
  OUTCOME_TABLE,
  type OutcomeAnswer,
  type OutcomeCode,
  type OutcomeErrorType,
  type OutcomeOptions,
  type OutcomeRow,
  outcomeAnswer,
  outcomeRow,
  type RetryOutlook,
  retryOutlook,
  type Waiting,
} from './outcome-table.js';
export {
  isOutcome,
  isReleaseOutcome,
  OUTCOMES,
  type Outcome,
  type ReleaseOutcome,
} from './outcomes.js';
export {
  DEFAULT_PREFIX_GENERATION,
  DEFAULT_PREFIX_ROUTING,
  leadingRun,
  MAX_PREFIX_BLOCKS,
  type PrefixRoutingConfig,
  prefixGenerationSize,
  prefixScore,
} from './prefix.js';
export { RejectCode } from './rejections.js';
export {
  FAIRNESS_UNITS,
  MAX_BAND,
  SCHEDULER_SETTINGS,
  type SettingCheck,
  type SettingSpec,
  type YamlForm,
} from './scheduler-settings.js';
export {
  canonicalCeilings,
  checkSetting,
  DEFAULT_SETTINGS,
  defaultSettings,
  fairnessUnitConflict,
  numberRange,
  type SchedulerSettings,
  SETTING_GROUPS,
  type SettingPath,
  type SettingValueOf,
  setSettingAt,
  settingAt,
  settingValueOfYaml,
  yamlValueOf,
} from './scheduler-settings-values.js';
export { type CounterFlowState, idleField, ServiceCounters } from './service-counters.js';
export {
  DEFAULT_SLO_CLASS,
  isSheddablePriority,
  type SloClassName,
} from './slo.js';
export { SortedSet } from './sorted-set.js';
export {
  admitUnderLimits,
  civilFromDays,
  countUnderLimits,
  currentCounters,
  daysFromCivil,
  EMPTY_COUNTERS,
  hasLimits,
  type LimitCharge,
  type LimitCounters,
  type LimitStanding,
  type LimitsDecision,
  type LimitsStanding,
  type LimitWindow,
  type LimitWindows,
  limitsStanding,
  limitWindows,
  NO_LIMITS,
  settleCharge,
  type TenantLimits,
  undoAdmission,
} from './tenant-limits.js';
export {
  type BucketConfig,
  type BucketState,
  currentBucket,
  fullBucket,
  refill,
  type TakeResult,
  take,
  trueUp,
  wholeTokens,
} from './token-bucket.js';
export {
  costTrueUp,
  DEFAULT_TOKEN_WEIGHTS,
  estimatedCost,
  expectedOutput,
  MEAN_SCALE,
  MEAN_SMOOTHING,
  nextMeanOutput,
  type TokenWeights,
  VIRTUAL_SCALE,
  virtualCost,
  weightedTokens,
} from './token-cost.js';
