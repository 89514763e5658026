import { OpenAIHttpError } from '@fairgate/openai';
import { type ClientLink, chance, createRng, deriveSeed } from '@fairgate/runtime';
import type { SimConfig } from './config.js';

/**
 * Fault injection for generation requests, decided per request from --seed and the
 * request's arrival index (reproducible):
 * - --stall-ms: the response (headers included) starts only after this delay;
 * - --fail-rate: answered 500 in the OpenAI error shape;
 * - --fail-429-rate: answered 429 (rate_limit_error), drawn independently after the 500 draw;
 * - --reset-after-tokens N: the connection is dropped once N tokens were sent (streaming) or
 *   generated (non-streaming, before any byte of the response).
 */
export type FaultConfig = Pick<
  SimConfig,
  'seed' | 'failRate' | 'fail429Rate' | 'stallMs' | 'resetAfterTokens'
>;

export type InjectedFailure = 'fail_500' | 'fail_429' | null;

export function drawFailure(config: FaultConfig, requestIndex: number): InjectedFailure {
  if (config.failRate <= 0 && config.fail429Rate <= 0) return null;
  const rng = createRng(deriveSeed(config.seed, 'fault', requestIndex));
  if (chance(rng, config.failRate)) return 'fail_500';
  if (chance(rng, config.fail429Rate)) return 'fail_429';
  return null;
}

export function failureError(failure: Exclude<InjectedFailure, null>): OpenAIHttpError {
  return failure === 'fail_500'
    ? new OpenAIHttpError({
        status: 500,
        type: 'server_error',
        message: 'Injected failure (fairgate-sim --fail-rate).',
        code: 'injected_failure',
      })
    : new OpenAIHttpError({
        status: 429,
        type: 'rate_limit_error',
        message: 'Injected rate limit (fairgate-sim --fail-429-rate).',
        code: 'injected_rate_limit',
        headers: { 'retry-after': '1' },
      });
}

/** Resolves after `ms`, or early (false) when the client leaves: a gone client ends the stall. */
export function stall(ms: number, client: ClientLink): Promise<boolean> {
  if (ms <= 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    if (client.gone) {
      resolve(false);
      return;
    }
    const unsubscribe = client.onLeave(() => {
      clearTimeout(timer);
      resolve(false);
    });
    const timer = setTimeout(() => {
      unsubscribe();
      resolve(true);
    }, ms);
  });
}
