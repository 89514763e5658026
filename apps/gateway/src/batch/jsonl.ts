import { BATCH_PATHS, type BatchPath, endpointOfPath, parseApiRequest } from '@fairgate/openai';

/**
 * The Batch API's input format (OpenAI's): one request per line,
 * `{"custom_id": "...", "method": "POST", "url": "/v1/chat/completions", "body": {...}}`.
 * A file is checked whole at upload (routes/files.ts), with the live endpoints' own schema,
 * so that a batch never starts on a file with a line that could only fail.
 */
export interface BatchInputLine {
  /** 1-based line number in the file. */
  readonly line: number;
  readonly customId: string;
  readonly url: BatchPath;
  /** The request body (validated by the live endpoint's zod schema) as JSON text. */
  readonly body: string;
  /** body.model */
  readonly model: string;
}

/**
 * The first bad line of a file; `code` is the error code the upload answers with. `line` is
 * 0 (and the message has no `Line <n>: ` prefix) for `empty_file`, which no line is to blame for.
 */
export class BatchInputError extends Error {
  constructor(
    readonly line: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'BatchInputError';
  }
}

/** OpenAI's limit on a custom_id. */
export const MAX_CUSTOM_ID_LENGTH = 512;

const isBatchPath = (url: unknown): url is BatchPath =>
  (BATCH_PATHS as readonly unknown[]).includes(url);

/**
 * Parses and validates a batch input file, failing at its first bad line. Lines holding
 * only whitespace are skipped (they still count for line numbers, as an editor shows them);
 * CRLF line endings and a leading UTF-8 byte order mark are accepted. The body is kept as
 * the client wrote it (re-serialized, without the schema's defaults), as the live path
 * forwards it.
 */
export function parseBatchInput(text: string, options: { maxLines: number }): BatchInputLine[] {
  const lines = text.replace(/^\uFEFF/, '').split('\n');
  const requests: BatchInputLine[] = [];
  const lineOfCustomId = new Map<string, number>();
  lines.forEach((raw, index) => {
    const source = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (source.trim() === '') return;
    const line = index + 1;
    if (requests.length >= options.maxLines) {
      fail(line, 'too_many_lines', `the file has more than ${options.maxLines} requests`);
    }
    const request = parseLine(source, line, lineOfCustomId);
    lineOfCustomId.set(request.customId, line);
    requests.push(request);
  });
  if (requests.length === 0) {
    throw new BatchInputError(0, 'empty_file', 'The file has no request line');
  }
  return requests;
}

function parseLine(
  source: string,
  line: number,
  lineOfCustomId: ReadonlyMap<string, number>,
): BatchInputLine {
  const entry = parseObject(source, line);
  const customId = entry.custom_id;
  if (typeof customId !== 'string' || customId === '' || customId.length > MAX_CUSTOM_ID_LENGTH) {
    fail(
      line,
      'missing_custom_id',
      `custom_id must be a non-empty string of at most ${MAX_CUSTOM_ID_LENGTH} characters`,
    );
  }
  const earlier = lineOfCustomId.get(customId);
  if (earlier !== undefined) {
    fail(line, 'duplicate_custom_id', `custom_id '${customId}' is already used on line ${earlier}`);
  }
  if (entry.method !== 'POST') fail(line, 'invalid_method', `method must be "POST"`);
  const url = entry.url;
  // The endpoint each accepted `url` is served by (the same table as the live routes).
  const spec = isBatchPath(url) ? endpointOfPath(url) : undefined;
  if (spec === undefined)
    fail(line, 'invalid_url', `url must be one of: ${BATCH_PATHS.join(', ')}`);
  if (entry.body === undefined) fail(line, 'invalid_body', 'body is missing');
  let model: string;
  try {
    model = parseApiRequest(spec, entry.body).model;
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    fail(line, 'invalid_body', `invalid body: ${detail}`);
  }
  // A line's answer is one JSON body in the output file (OpenAI's batches do not stream).
  if ((entry.body as { stream?: unknown }).stream === true) {
    fail(line, 'invalid_body', 'stream: true is not supported in a batch');
  }
  return {
    line,
    customId,
    url: url as BatchInputLine['url'],
    body: JSON.stringify(entry.body),
    model,
  };
}

function parseObject(source: string, line: number): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(source);
  } catch (error) {
    fail(line, 'invalid_json', `not valid JSON (${(error as Error).message})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(line, 'invalid_json', 'a line must be a JSON object');
  }
  return value as Record<string, unknown>;
}

function fail(line: number, code: string, detail: string): never {
  throw new BatchInputError(line, code, `Line ${line}: ${detail}`);
}
