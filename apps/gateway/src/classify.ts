import type { TenantConfig } from '@fairgate/config';
import {
  type ApiRequest,
  type EndpointSpec,
  kvBlocksFor,
  requestedMaxTokens,
} from '@fairgate/openai';
import { badRequest } from './errors.js';

/** What the scheduler needs to know about a request (t1 classification). */
export interface Classification {
  sloClass: string;
  /** Priority of the class = the band the request waits in (higher first). */
  priority: number;
  /**
   * Absolute deadline for the first token (ms since epoch): x-slo-ttft-ms, else the class's
   * target from scheduler.slo_targets_ms, else none (slo-deadline order then uses the queue TTL).
   */
  deadlineMs: number | undefined;
  inputTokens: number;
  /**
   * Output tokens assumed for KV sizing: a generation's max_tokens, or the default when
   * unset; 0 for a prefill-only request (embeddings, scoring: no output).
   */
  maxTokens: number;
  kvBlocks: number;
  /** Token-bucket cost (0 when the tenant has no bucket): input tokens (+ max_tokens). */
  bucketTokens: number;
  /**
   * The estimate reserved against the tenant's budgets (0 when it has no budget or rate):
   * input tokens + max_tokens, trued up to the usage at release.
   */
  budgetTokens: number;
}

/** Whether the tenant has a budget or a rate (config `limits`). */
export function hasLimits(tenant: TenantConfig): boolean {
  const limits = tenant.limits;
  return (
    limits !== undefined &&
    (limits.tokens_per_day !== undefined ||
      limits.tokens_per_month !== undefined ||
      limits.requests_per_minute !== undefined)
  );
}

/** The token-bucket amount a finished request actually used, by the same rule as its cost. */
export function actualBucketTokens(
  tenant: TenantConfig,
  usage: { prompt_tokens: number; completion_tokens: number },
): number {
  if (!tenant.token_bucket) return 0;
  return (
    usage.prompt_tokens + (tenant.token_bucket.include_max_tokens ? usage.completion_tokens : 0)
  );
}

export interface ClassifyInput {
  tenant: TenantConfig;
  sloClasses: Record<string, number>;
  /** Per-class TTFT targets in ms (scheduler.slo_targets_ms). */
  sloTargetsMs: Record<string, number>;
  /** The request's endpoint (its token estimate and kind) and its validated body. */
  spec: EndpointSpec;
  request: ApiRequest;
  /** Raw header values (undefined when absent). */
  classHeader: string | undefined;
  ttftHeader: string | undefined;
  nowMs: number;
  blockSize: number;
  /** Output tokens assumed when a chat request names no max_tokens. */
  defaultMaxTokens: number;
}

export const SLO_CLASS_HEADER = 'x-slo-class';
export const SLO_TTFT_HEADER = 'x-slo-ttft-ms';

/**
 * Resolves the request's SLO class: the tenant's default, or the class named in
 * x-slo-class, capped at the tenant's max class (a header can lower a request's
 * priority freely and never raise it above the tenant's ceiling). An unknown
 * class name or a malformed deadline is a 400 naming the header.
 */
export function classify(input: ClassifyInput): Classification {
  const { tenant, sloClasses } = input;
  const maxClass = tenant.max_class ?? tenant.default_class;
  const ceiling = sloClasses[maxClass] ?? Number.POSITIVE_INFINITY;
  let sloClass = tenant.default_class;
  if (input.classHeader !== undefined) {
    const asked = input.classHeader.trim();
    if (!(asked in sloClasses)) {
      throw badRequest(
        `Unknown SLO class '${asked}' in ${SLO_CLASS_HEADER} (known: ${Object.keys(sloClasses).join(', ')})`,
        SLO_CLASS_HEADER,
        'unknown_slo_class',
      );
    }
    sloClass = sloClasses[asked]! > ceiling ? maxClass : asked;
  }
  let deadlineMs: number | undefined;
  if (input.ttftHeader !== undefined) {
    const ms = Number(input.ttftHeader.trim());
    if (!Number.isInteger(ms) || ms <= 0 || ms > 86_400_000) {
      throw badRequest(
        `${SLO_TTFT_HEADER} must be a positive integer number of milliseconds`,
        SLO_TTFT_HEADER,
        'invalid_slo_ttft',
      );
    }
    deadlineMs = input.nowMs + ms;
  } else {
    const target = input.sloTargetsMs[sloClass];
    if (target !== undefined) deadlineMs = input.nowMs + target;
  }
  const { spec, request } = input;
  const inputTokens = spec.inputTokens(request);
  const generation = spec.asGeneration?.(request);
  const maxTokens = generation
    ? (requestedMaxTokens(generation) ?? input.defaultMaxTokens)
    : (spec.outputTokens?.(request) ?? 0);
  return {
    sloClass,
    priority: sloClasses[sloClass] ?? 0,
    deadlineMs,
    inputTokens,
    maxTokens,
    kvBlocks: kvBlocksFor(inputTokens + maxTokens, input.blockSize),
    bucketTokens: tenant.token_bucket
      ? inputTokens + (tenant.token_bucket.include_max_tokens ? maxTokens : 0)
      : 0,
    budgetTokens: hasLimits(tenant) ? inputTokens + maxTokens : 0,
  };
}
