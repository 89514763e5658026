export {
  ADMISSION_POLICIES,
  type AdmissionConfig,
  type AdmissionDecision,
  type AdmissionPolicy,
  DEFAULT_ADMISSION,
  DEFAULT_SATURATION,
  decideAdmission,
  maxPodLoad,
  type PodLoad,
  type PoolSignals,
  poolSaturation,
  type SaturationConfig,
} from './admission.js';
export {
  conservationViolations,
  emptyOutcomes,
  type FlowCounters,
  totalEnded,
  totalRejected,
} from './conservation.js';
export { Deque } from './deque.js';
export { FAIRNESS_POLICIES, type FairnessPolicy, FlowRing, type FlowState } from './drr.js';
export {
  assertInteger,
  assertValidName,
  type Band,
  isValidName,
  type PodName,
  type ReplicaId,
  type RequestId,
  type TenantId,
} from './ids.js';
export { compareOrderKeys, type OrderKey, type QueueOrder, queueScore } from './order.js';
export {
  isOutcome,
  isReleaseOutcome,
  OUTCOMES,
  type Outcome,
  RELEASE_OUTCOMES,
  type ReleaseOutcome,
} from './outcomes.js';
export {
  type DropResponse,
  isRejectCode,
  outcomeDropResponse,
  REJECT_CODES,
  RejectCode,
  rejectionResponse,
} from './rejections.js';
export {
  DEFAULT_SLO_CLASS,
  DEFAULT_SLO_PRIORITIES,
  isSheddablePriority,
  type SloClassName,
} from './slo.js';
export {
  type BucketConfig,
  type BucketState,
  fullBucket,
  refill,
  type TakeResult,
  take,
  trueUp,
} from './token-bucket.js';
