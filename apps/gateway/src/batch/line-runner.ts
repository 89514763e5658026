import { outcomeAnswer } from '@fairgate/core';
import { Pool } from 'undici';
import { SLO_CLASS_HEADER } from '../classify.js';
import { REQUEST_ID_HEADER } from '../middleware/request-context.js';
import { BATCH_ID_HEADER, BATCH_TENANT_HEADER, type BatchCredential } from './credential.js';
import type { LineAnswer } from './line-outcome.js';

export interface LineRequest {
  readonly tenant: string;
  readonly batch: string;
  /** The tenant's batch class (x-slo-class: capped at the tenant's max class as any). */
  readonly sloClass: string;
  readonly endpoint: string;
  readonly body: string;
  readonly requestId: string;
  /** traceparent / tracestate of the line's span (the SERVER span becomes its child). */
  readonly traceHeaders: Record<string, string>;
  readonly timeoutMs: number;
}

/**
 * Submits batch lines to this replica's own HTTP server, so each line takes the very path
 * a live request of its tenant takes (request/pipeline.ts: classify, admit through the
 * shared scheduler with DRR weights, quotas, budget, saturation gate and in-flight
 * eviction, wait for the grant, forward, relay, finalize) at the tenant's batch class.
 * A failure to reach the replica (it is closing) is an answer too: 503
 * `replica_unreachable`, tried again.
 */
export class LineRunner {
  readonly #pool: Pool;
  readonly #credential: BatchCredential;

  constructor(selfUrl: string, credential: BatchCredential, connections: number) {
    this.#pool = new Pool(selfUrl, { connections: Math.max(1, connections) });
    this.#credential = credential;
  }

  async run(line: LineRequest): Promise<LineAnswer> {
    try {
      const response = await this.#pool.request({
        method: 'POST',
        path: line.endpoint,
        headers: {
          'content-type': 'application/json',
          authorization: this.#credential.authorization,
          [BATCH_TENANT_HEADER]: line.tenant,
          [BATCH_ID_HEADER]: line.batch,
          [SLO_CLASS_HEADER]: line.sloClass,
          [REQUEST_ID_HEADER]: line.requestId,
          ...line.traceHeaders,
        },
        body: line.body,
        headersTimeout: line.timeoutMs,
        bodyTimeout: line.timeoutMs,
      });
      const header = (name: string) => {
        const value = response.headers[name];
        return Array.isArray(value) ? value[0] : value;
      };
      return {
        status: response.statusCode,
        requestId: header(REQUEST_ID_HEADER) ?? line.requestId,
        body: await response.body.text(),
        retryAfter: header('retry-after') !== undefined,
      };
    } catch (error) {
      const unreachable = outcomeAnswer('replica_unreachable', { message: String(error) });
      return {
        status: unreachable.status,
        requestId: line.requestId,
        body: JSON.stringify({ error: { code: unreachable.code, message: unreachable.message } }),
        retryAfter: 'retry-after' in unreachable.headers,
      };
    }
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}
