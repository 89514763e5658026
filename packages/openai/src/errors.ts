/**
 * The OpenAI error shape: `{"error":{"message","type","param","code"}}`.
 * One error class carries the HTTP status with it, so every layer throws the
 * same thing and one handler renders it.
 */
export interface OpenAIErrorBody {
  error: {
    message: string;
    type: string;
    param: string | null;
    code: string | null;
  };
}

export type OpenAIErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'server_error'
  | 'service_unavailable_error'
  | 'upstream_error'
  | 'timeout_error';

export interface OpenAIHttpErrorInit {
  status: number;
  message: string;
  type: OpenAIErrorType;
  param?: string | null;
  code?: string | null;
  /** Extra response headers, e.g. Retry-After for a 429. */
  headers?: Record<string, string>;
}

export class OpenAIHttpError extends Error {
  readonly status: number;
  readonly type: OpenAIErrorType;
  readonly param: string | null;
  readonly code: string | null;
  readonly headers: Record<string, string>;

  constructor(init: OpenAIHttpErrorInit) {
    super(init.message);
    this.name = 'OpenAIHttpError';
    this.status = init.status;
    this.type = init.type;
    this.param = init.param ?? null;
    this.code = init.code ?? null;
    this.headers = init.headers ?? {};
  }

  toBody(): OpenAIErrorBody {
    return errorBody(this.message, this.type, this.param, this.code);
  }
}

export function errorBody(
  message: string,
  type: OpenAIErrorType | string,
  param: string | null = null,
  code: string | null = null,
): OpenAIErrorBody {
  return { error: { message, type, param, code } };
}

/** True when `value` has the OpenAI error shape (used by clients and tests). */
export function isOpenAIErrorBody(value: unknown): value is OpenAIErrorBody {
  if (typeof value !== 'object' || value === null) return false;
  const error = (value as { error?: unknown }).error;
  if (typeof error !== 'object' || error === null) return false;
  const e = error as Record<string, unknown>;
  return (
    typeof e.message === 'string' &&
    typeof e.type === 'string' &&
    'param' in e &&
    'code' in e &&
    (e.param === null || typeof e.param === 'string') &&
    (e.code === null || typeof e.code === 'string')
  );
}
